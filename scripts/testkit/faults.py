"""Fault injection for tests of a user's error handling, and what a real CS-2 would show.

* the system faults mid-job. The run stops before its next step with exit 75 (`error: System
  cs2-1 went to FAULT while job N ran ...`); its checkpoints are kept, and the same command
  resumes once an admin has run `system standby` and `system activate`. When it happens:
  - `fault_at_step(N)`: just before global step N, exactly (the run does it: runtime/job/
    cs_run.py's CS2SIM_FAULT_AT_STEP), for runs started after the call;
  - `fault_after_checkpoint(model_dir)`: once a new checkpoint of a trained step is written;
  - `fault_when_running(delay, when=...)`: `delay` s after a job is registered RUNNING (and an
    optional `when()` holds), which can be before its first step.
  The kit's faults are one store transaction each, audited as the user `testkit`.
* a node is lost (`lose_node`): every task process of the job on that node is killed (SIGKILL).
  The launcher's kill-on-bad-exit stops the other tasks and names it (`srun: error: worker-3:
  task 5: Killed`); the launcher exits 137 and the job is FAILED.
* a slow input worker (`slow_input`): real CPU work is added to every sample the input
  streamers make (CS2SIM_INPUT_EXTRA_WORK). Training runs, slower; performance.json says
  `"suspected_input_bottleneck": true`.
* a hung input worker (`stall_streamer`): one streamer process is stopped (SIGSTOP). After the
  streamer timeout the chief fails naming the worker's rank, task and node; the job FAILS.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cs2sim.system.sched.queue_rows import QueueJob

__all__ = ["FaultTimer", "job_processes", "kill_all", "checkpoint_steps"]


class FaultTimer:
    """A background thread: when `ready()` is true, wait `delay` seconds, then `act()` once."""

    def __init__(
        self,
        ready: Callable[[], object],
        act: Callable[[], object],
        delay: float,
        timeout: float,
        what: str,
        cleanup: Callable[[], object] | None = None,
    ) -> None:
        self.what = what
        self._cleanup = cleanup  # run once when the timer is over: fired, timed out or cancelled
        self._cleaned = threading.Lock()
        self.fired_at: float | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready, act, delay, timeout), name=f"testkit-{what}", daemon=True
        )
        self._thread.start()

    def _run(
        self, ready: Callable[[], object], act: Callable[[], object], delay: float, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        try:
            while not self._stop.is_set():
                if ready():
                    if self._stop.wait(delay):
                        return
                    act()
                    self.fired_at = time.time()
                    return
                if time.monotonic() > deadline:
                    return
                self._stop.wait(0.05)
        except BaseException as e:  # noqa: BLE001 - reported by wait()
            self.error = e
        finally:
            self._clean()

    def _clean(self) -> None:
        if self._cleanup is not None and self._cleaned.acquire(blocking=False):
            self._cleanup()

    @property
    def fired(self) -> bool:
        """True once the fault was injected."""
        return self.fired_at is not None

    def wait(self, timeout: float = 60) -> bool:
        """Wait for the thread to end; True if the fault was injected."""
        self._thread.join(timeout)
        if self.error is not None:
            raise AssertionError(f"injecting {self.what} failed: {self.error}") from self.error
        return self.fired

    def cancel(self) -> None:
        """Do not inject it (if it has not happened yet), and undo what arming it set up
        (`fault_at_step`'s variables leave the system's environment at once)."""
        self._stop.set()
        self._clean()
        self._thread.join(5)


def job_processes(
    home: Path, job: QueueJob, *, node: str | None = None, streamers: bool = False
) -> list[int]:
    """Pids of a running job's task processes, from the launcher's `pids` list (as Slurm's
    `scontrol listpids`). node: only tasks on that node; streamers: only input workers (task ids
    above 0 in a component that runs several tasks per node, as runtime/job/roles.py decides)."""
    path = home / "slurm" / str(job.id) / "pids"
    if not path.is_file():
        return []
    multi: set[int] = set()  # global task ids in components with several tasks per node
    first = 0
    for comp in job.components:
        count = comp.nodes * comp.tasks_per_node
        if comp.tasks_per_node > 1:
            multi.update(range(first, first + count))
        first += count
    pids = []
    for line in path.read_text().splitlines()[1:]:
        pid, _job, _step, _local, procid, where = line.split()
        if node is not None and where != node:
            continue
        if streamers and not (int(procid) > 0 and int(procid) in multi):
            continue
        pids.append(int(pid))
    return pids


def checkpoint_steps(model_dir: Path) -> set[int]:
    """The global steps of the checkpoints in model_dir (model-ckpt-<step>.npz)."""
    steps = set()
    for path in Path(model_dir).glob("model-ckpt-*.npz"):
        tail = path.stem.rsplit("-", 1)[-1]
        if tail.isdigit():
            steps.add(int(tail))
    return steps


def kill_all(pids: list[int], sig: int = signal.SIGKILL) -> int:
    """Send `sig` to each pid still there; how many were signalled."""
    sent = 0
    for pid in pids:
        try:
            os.kill(pid, sig)
            sent += 1
        except ProcessLookupError:
            continue
    return sent
