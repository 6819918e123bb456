"""The launcher's view of a scheduler: one small interface, two implementations.

`EmbeddedBackend` (here) allocates nodes of the cluster description in the store and runs every
task as a local process. The Slurm backend (`slurm.py`) runs the same request
through real `srun` using `request.srun_command`'s argv. csrun_wse / csrun_cpu only ever talk
to a Backend; the `Backend` protocol below is the contract.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from cs2sim.system import knobs
from cs2sim.system.errors import UsageError
from cs2sim.system.sched import queue
from cs2sim.system.sched.allocation import Allocation, Events
from cs2sim.system.sched.fit import NodeInfo
from cs2sim.system.sched.guard import JobGuard
from cs2sim.system.sched.layout import Task, layout
from cs2sim.system.sched.pycmd import secret_env
from cs2sim.system.sched.request import JobRequest, SrunCommand
from cs2sim.system.sched.runner import StepResult, run_step

if TYPE_CHECKING:
    from cs2sim.system.store import Store

__all__ = [
    "Allocation",
    "Backend",
    "EmbeddedBackend",
    "Events",
    "SCHEDULER_ENV",
    "scheduler_name",
    "select_backend",
]

# A queued launcher sleeps until woken (system/sched/wake.py). Its safety re-check, for peers
# that crashed without waking it, comes every RECHECK_S at the head of the queue and less often
# further back (RECHECK_S more per RECHECK_STEP jobs ahead, at most RECHECK_MAX_S): 1,000 queued
# launchers re-check about 20 times a second in all, not 20,000.
RECHECK_S = 5.0
RECHECK_STEP = 10
RECHECK_MAX_S = 60.0
RECHECK_ENV = "CS2SIM_QUEUE_RECHECK_S"  # test knob: RECHECK_S (tests prove wake-ups with 600)


class Backend(Protocol):
    """What a launcher needs from a scheduler."""

    name: str

    @property
    def nodes(self) -> list[NodeInfo]:
        """The cluster's nodes with their CPUs, in the scheduler's order."""

    def allocate(
        self,
        request: JobRequest,
        *,
        user: str,
        events: Events,
        stop_requested: Callable[[], int | None],
    ) -> Allocation | None:
        """Queue the request and block until it holds nodes. Prints (via `events`) Slurm's
        `srun: job N queued and waiting for resources` / `... has been allocated resources`.
        None if stopped while waiting (Ctrl-C, cancelled); NeverFits if it can never run."""

    def run(
        self,
        alloc: Allocation,
        *,
        out: Callable[[str], None],
        err: Callable[[str], None],
        stop_requested: Callable[[], int | None],
        on_started: Callable[[float], None] | None = None,
    ) -> StepResult:
        """Run the request's command as every task of the allocation; wait for all of them."""

    def release(self, alloc: Allocation, result: StepResult | None) -> None:
        """Free the nodes and record how the job ended (idempotent)."""

    def cancel(self, job_id: int, *, user: str, admin: bool) -> None:
        """Cancel a job (owner or admin)."""

    def queue(self, *, all_states: bool = False) -> list[queue.QueueJob]:
        """The queue's rows (squeue)."""


class EmbeddedBackend:
    """Nodes are rows of the store; tasks are processes on this machine."""

    name = "embedded"

    def __init__(
        self, store: object, *, log_root: Path | None = None, base_env: dict[str, str] | None = None
    ) -> None:
        from cs2sim.system.store import Store

        assert isinstance(store, Store)
        self.store = store
        if log_root is None:  # a member of a shared store may not write its owner's home
            from cs2sim.system.paths import private_dir, user_tmp_dir

            log_root = (
                store.home / "slurm"
                if store.remote is None
                else private_dir(user_tmp_dir("cs2sim"), "slurm")
            )
        self.log_root = log_root
        self.base_env = base_env
        self._nodes: list[NodeInfo] | None = None
        self.guard: JobGuard | None = None

    @property
    def nodes(self) -> list[NodeInfo]:
        if self._nodes is None:
            self._nodes = queue.cluster_nodes(self.store)
        return self._nodes

    def allocate(
        self,
        request: JobRequest,
        *,
        user: str,
        events: Events,
        stop_requested: Callable[[], int | None],
    ) -> Allocation | None:
        """Queue the request, then sleep until its job starts, is cancelled, or a signal comes.

        srun's words and exit (measured on Slurm 22.05): a pending job cancelled by `jobs
        cancel` prints `srun: Job has been cancelled` and `srun: error: Unable to allocate
        resources: Job/step already completing or completed`; Ctrl-C or SIGTERM while pending
        prints `srun: Job allocation N has been revoked`; srun exits 1 in both cases."""
        # the job's guard (guard.py): if this launcher is killed, the queue keeps the job's
        # nodes until the guard has ended every process of the job
        if self.guard is None:
            self.guard = JobGuard.start()
        job_id = queue.submit(self.store, request, user=user, nodes=self.nodes)
        # The FIFO exists from here on; the state read below comes after it, so a pass that
        # started the job in between is seen by the read, and any later one wakes us.
        with _waiter(self.store.home, job_id) as waiter, _SignalPipe() as signals:
            queued = False
            recheck_at = 0.0
            while True:
                job = queue.state(self.store, job_id)
                if job.state == "RUNNING":
                    if queued:
                        events(f"srun: job {job_id} has been allocated resources")
                    return Allocation(job_id, job.nodes, request)
                if job.state != "PENDING":  # cancelled while waiting (jobs cancel)
                    events("srun: Job has been cancelled")
                    events(
                        "srun: error: Unable to allocate resources: Job/step already "
                        "completing or completed"
                    )
                    self._drop_guard()
                    return None
                if not queued:
                    events(f"srun: job {job_id} queued and waiting for resources")
                    queued = True
                if stop_requested() is not None:
                    queue.finish(self.store, job_id, "CANCELLED", None, self.nodes)
                    events(f"srun: Job allocation {job_id} has been revoked")
                    self._drop_guard()
                    return None
                now = time.monotonic()
                if now >= recheck_at:
                    ahead = queue.recheck(self.store, job_id, self.nodes)
                    recheck_at = now + _recheck_interval(ahead)
                    continue  # the re-check may have started this job: read it again
                waiter.wait(recheck_at - now, also=signals.fds)
                signals.drain()

    def tasks(self, alloc: Allocation, *, user: str = "") -> list[Task]:
        cpus = {n.name: n.cpus for n in self.nodes}
        return layout(
            alloc.request,
            alloc.job_id,
            [list(p) for p in alloc.nodes],
            cpus,
            user=user or os.environ.get("USER", ""),
        )

    def run(
        self,
        alloc: Allocation,
        *,
        out: Callable[[str], None],
        err: Callable[[str], None],
        stop_requested: Callable[[], int | None],
        on_started: Callable[[float], None] | None = None,
    ) -> StepResult:
        from cs2sim.system.oslogin import login_name

        tasks = self.tasks(alloc, user=login_name())
        env = dict(os.environ if self.base_env is None else self.base_env)
        env.update(alloc.request.env)
        env.update(secret_env())
        log_dir = None if alloc.request.pty else self.log_root / str(alloc.job_id)

        def stop() -> int | None:
            sig = stop_requested()
            if sig is None and self._cancelled(alloc.job_id):
                sig = signal.SIGTERM
            return sig

        return run_step(
            tasks,
            alloc.request.command,
            job_id=alloc.job_id,
            out=out,
            err=err,
            log_dir=log_dir,
            base_env=env,
            kill_on_bad_exit=alloc.request.kill_on_bad_exit,
            pty=alloc.request.pty,
            stop_requested=stop,
            on_started=on_started,
            guard=self.guard,
        )

    _last_check = 0.0

    def _cancelled(self, job_id: int) -> bool:
        """Whether `jobs cancel` ended this job (checked at most every 0.5 s)."""
        now = time.monotonic()
        if now - self._last_check < 0.5:
            return False
        self._last_check = now
        try:
            return queue.state(self.store, job_id).state == "CANCELLED"
        except UsageError:
            return False

    def release(self, alloc: Allocation, result: StepResult | None) -> None:
        if result is None:
            state, code = "CANCELLED", None
        elif result.interrupted is not None:
            state, code = "CANCELLED", result.exit_code
        else:
            state = "COMPLETED" if result.exit_code == 0 else "FAILED"
            code = result.exit_code
            if (
                code == SYSTEM_STOPPED_EXIT
                and _cs2_job_state(self.store, alloc.job_id) == "CANCELLED"
            ):
                # the run on the CS-2 was stopped, not failed (its system left ACTIVE, a forced
                # standby: it recorded itself CANCELLED and exited 75): the queue says the same,
                # one end, one name. A task that died (any other exit) stays FAILED.
                state = "CANCELLED"
        queue.finish(self.store, alloc.job_id, state, code, self.nodes)
        self._drop_guard()  # run_step ended every process: the guard may go

    def _drop_guard(self) -> None:
        if self.guard is not None:
            self.guard.close()
            self.guard = None

    def cancel(self, job_id: int, *, user: str, admin: bool) -> None:
        queue.cancel(self.store, job_id, user=user, admin=admin)

    def queue(self, *, all_states: bool = False) -> list[queue.QueueJob]:
        return queue.jobs(self.store, all_states=all_states)


class _Ticker:
    """Stands in for a wake-up FIFO that could not be made (a file system without FIFOs, no
    write access to $CS2_HOME/sched-wake): the waiter re-reads its row twice a second instead."""

    TICK_S = 0.5

    def wait(self, timeout: float | None, also: tuple[int, ...] = ()) -> bool:
        import select

        limit = self.TICK_S if timeout is None else min(timeout, self.TICK_S)
        select.select(list(also), [], [], max(0.0, limit))
        return False

    def __enter__(self) -> _Ticker:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _waiter(home: Path, job_id: int) -> Any:
    """The job's wake-up FIFO (system/sched/wake.py), or a ticker when it cannot be made."""
    from cs2sim.system.sched.wake import Waiter

    try:
        return Waiter(home, job_id)
    except OSError:
        return _Ticker()


def _recheck_interval(ahead: int) -> float:
    """Seconds to the next safety re-check of a launcher with `ahead` jobs before it, with
    +-20% jitter so launchers queued together do not re-check together."""
    import random

    first = knobs.number(RECHECK_ENV, RECHECK_S)
    base = min(max(RECHECK_MAX_S, first), first * (1 + ahead // RECHECK_STEP))
    return base * random.uniform(0.8, 1.2)


class _SignalPipe:
    """While a launcher waits: signals (Ctrl-C, SIGTERM, SIGHUP) also write to a pipe that the
    wait selects on, so a handler that only records the signal still ends the wait at once.
    Only the main thread can receive signals; elsewhere (a test's thread) there is no pipe."""

    def __init__(self) -> None:
        self.fds: tuple[int, ...] = ()  # the read end, for select
        self._pipe: tuple[int, int] | None = None
        self._old: int | None = None

    def __enter__(self) -> _SignalPipe:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return self
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self._old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        except ValueError:  # not the main interpreter
            os.close(r)
            os.close(w)
            return self
        self._pipe, self.fds = (r, w), (r,)
        return self

    def drain(self) -> None:
        """Empty the pipe (the handler has recorded the signal; the caller asks it)."""
        if self._pipe is not None:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._pipe[0], 512):
                    pass

    def __exit__(self, *exc: object) -> None:
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._old if self._old is not None else -1)
        for fd in self._pipe:
            os.close(fd)
        self._pipe, self.fds = None, ()


SCHEDULER_ENV = "CS2_SCHEDULER"  # embedded | slurm, for one run (overrides cluster.yaml's site)


SYSTEM_STOPPED_EXIT = 75  # EX_TEMPFAIL: the run's CS-2 left ACTIVE under it (runtime/job/cs_run.py)


def _cs2_job_state(store: Any, job_id: int) -> str | None:
    """How the CS-2 job with this id (a run registered under its launch's id) ended, if any."""
    from cs2sim.system import jobs

    with store.read() as db:
        job = jobs.get(db, job_id)
    return None if job is None else job.state


def scheduler_name(site: object) -> str:
    """Which scheduler runs launches: $CS2_SCHEDULER, else the cluster's `site.scheduler`."""
    from cs2sim.system.cluster import SCHEDULERS
    from cs2sim.system.errors import ConfigError

    env = knobs.text(SCHEDULER_ENV).lower()
    if env:
        if env not in SCHEDULERS:
            raise ConfigError(
                f"{SCHEDULER_ENV}={env} is not a scheduler; use one of: "
                f"{', '.join(SCHEDULERS)} (or unset it)."
            )
        return env
    return str(getattr(site, "scheduler", "embedded"))


def select_backend(
    store: Store, site: object, srun: SrunCommand | None = None, run_args: tuple[str, ...] = ()
) -> Backend:
    """The backend the site (or $CS2_SCHEDULER) chose. `srun` is the launcher's SrunCommand
    (request.srun_command / cpu_command): the Slurm backend runs its argv with the container
    replaced by `run_args` (slurm.slurm_argv). The embedded path imports nothing of Slurm's."""
    if scheduler_name(site) == "slurm":
        from cs2sim.system.sched.slurm import SlurmBackend, slurm_argv

        argv = slurm_argv(srun, run_args) if srun is not None else ()
        return SlurmBackend(store, argv)
    return EmbeddedBackend(store)
