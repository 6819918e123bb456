"""The Slurm backend: the launchers' job runs through a real `srun` on a real Slurm cluster.

csrun_wse / csrun_cpu build their srun line ONCE (system/sched/request.py); this backend runs that
line's argv with `singularity exec -B ... <image>` replaced by the command itself (no container
here), passes srun's own lines through (queue/allocation lines, `srun: error: node3: task 2: ...`),
and records the run in the store under Slurm's job id (table `slurm_jobs`; the store is SQLite on
the login host, so only the launcher process writes it, never a task on a compute node).

What real Slurm does that we rely on (measured on Slurm 22.05; the recording is
tests/slurm/ground_truth/layout.json, see docs/sources.md#slurm):
* srun allocates the job itself; a heterogeneous job prints `srun: job N queued and waiting for
  resources` with its base id N; a 1-node job prints nothing, so its id comes from squeue's
  AllocSID (srun runs in its own session, so its pid is that session id);
* srun's error lines number tasks PER COMPONENT; we map them to the global SLURM_PROCID with the
  components' node lists (`scontrol show job`) and name task and node in our one-line report;
* a request larger than the cluster pends forever (EnforcePartLimits does not reject a het job),
  so the node count is checked against `sinfo` before srun starts;
* `scancel <base id>` ends every component; `scontrol show job` then says CANCELLED;
* with `site.system_licenses`, each CS-2 system is a license of count 1 named as the system
  (slurm.conf `Licenses=cs2-1:1,...`): the srun line asks for the systems its job reserves
  (flags.with_systems), so Slurm queues the job until they are free, as the embedded scheduler
  does; squeue's Licenses column says which systems a job holds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from cs2sim.system.errors import ConfigError, UsageError
from cs2sim.system.sched import queue
from cs2sim.system.sched.allocation import Allocation, Events
from cs2sim.system.sched.fit import NodeInfo
from cs2sim.system.sched.pycmd import secret_env
from cs2sim.system.sched.request import JobRequest, SrunCommand
from cs2sim.system.sched.runner import StepResult, TaskExit
from cs2sim.system.sched.slurm_client import (
    SQUEUE_FORMAT,
    SlurmJobRecord,
    SrunWatch,
    exit_of,
    run_client,
    show_job,
    squeue_jobs,
)
from cs2sim.system.sched.slurm_records import (
    SCHEMA,
    mark_started,
    record_end,
    record_job,
    recorded_job,
)

if TYPE_CHECKING:
    from cs2sim.system.store import Store

__all__ = ["SlurmBackend", "slurm_argv", "srun_missing", "SCHEMA", "recorded_job"]

ID_POLL_S = 0.1  # how often squeue is asked for a 1-node job's id (srun prints none)
FIRST_ID_POLL_S = 0.3  # ... starting this late: srun prints a het job's id within ~50 ms
STOP_GRACE_S = 35.0  # srun waits up to 32 s (KillWait) for a cancelled step; then we kill srun


def slurm_argv(srun: SrunCommand, run_args: tuple[str, ...]) -> tuple[str, ...]:
    """The srun line's argv with `singularity exec [-B ...] <image>` replaced by the command:
    the same words the launcher printed up to the container, then the command itself."""
    words = list(srun.argv)
    cut = words.index("singularity") if "singularity" in words else len(words)
    return (*words[:cut], *run_args)


def srun_missing() -> str | None:
    """Why the Slurm backend cannot run here (one sentence), or None."""
    for tool in ("srun", "sinfo", "squeue", "scancel", "scontrol"):
        if shutil.which(tool) is None:
            return (
                f"the scheduler is slurm but `{tool}` is not on PATH; install the Slurm "
                "client (slurm-client) or set CS2_SCHEDULER=embedded."
            )
    return None


def _end_with_launcher() -> None:
    """In srun, before exec: SIGTERM when the launcher dies (a kill -9 cannot run our cleanup).
    srun then cancels the step ("forcing job termination"), and Slurm kills the step's tasks.
    What a task started and left behind (re-parented to init) is beyond Slurm's reach under
    proctrack/linuxproc; a site that needs that uses proctrack/cgroup (docs/security.md)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _pump(stream: IO[bytes], sink: Callable[[str], None], watch: SrunWatch | None) -> None:
    """Copy complete lines from a pipe to `sink` (and to the watcher) until EOF."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if watch is not None:
            watch.feed(line.rstrip("\n"))
        sink(line if line.endswith("\n") else line + "\n")


def _tasks_on(
    nodes: list[str], request: JobRequest, record: SlurmJobRecord | None, job_id: int
) -> list[int]:
    """The SLURM_PROCIDs that ran on `nodes`: srun does not always report the tasks of a node it
    lost, so they come from the allocation and Slurm's numbering rules (layout.py, the same rules
    the embedded scheduler follows, checked against real Slurm)."""
    from cs2sim.system.sched.layout import layout

    if record is None or [len(n) for n in record.nodes] != [c.nodes for c in request.components]:
        return []
    every = {n for part in record.nodes for n in part}
    tasks = layout(request, job_id, [list(p) for p in record.nodes], dict.fromkeys(every, 1 << 20))
    return sorted(t.procid for t in tasks if t.node in nodes)


def _ranges(ids: list[int]) -> str:
    """[2, 3, 4, 7] -> '2-4,7'."""
    parts: list[str] = []
    for i in ids:
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{i}"
        else:
            parts.append(str(i))
    return ",".join(parts)


class SlurmBackend:
    """Runs a launcher's request as one real srun (which allocates the job and starts every task).

    `argv` is the launcher's srun line (`slurm_argv`): the request itself only describes the job
    for the store and the report; the line is built by request.py alone.
    """

    name = "slurm"

    def __init__(
        self, store: Store, argv: tuple[str, ...] = (), *, base_env: dict[str, str] | None = None
    ) -> None:
        self.store = store
        self.argv = argv
        self.base_env = base_env
        self._nodes: list[NodeInfo] | None = None
        self._recorded: set[int] = set()
        self.last_record: SlurmJobRecord | None = None

    # -- the cluster ---------------------------------------------------------------------------
    @property
    def nodes(self) -> list[NodeInfo]:
        """Slurm's nodes (sinfo), in Slurm's order, with their CPUs."""
        if self._nodes is None:
            proc = run_client(["sinfo", "-h", "-N", "-o", "%N %c"])
            if proc.returncode != 0:
                raise ConfigError(
                    "sinfo failed ("
                    + (proc.stderr.strip() or "no output")
                    + "); check that slurmctld is running."
                )
            seen: dict[str, int] = {}
            for line in proc.stdout.splitlines():
                name, _, cpus = line.partition(" ")
                if name and name not in seen:
                    seen[name] = int(cpus) if cpus.strip().isdigit() else 0
            self._nodes = [NodeInfo(n, c) for n, c in seen.items()]
        return self._nodes

    # -- Backend -------------------------------------------------------------------------------
    def allocate(
        self,
        request: JobRequest,
        *,
        user: str,
        events: Events,
        stop_requested: Callable[[], int | None],
    ) -> Allocation | None:
        """srun allocates the job itself: only refuse what Slurm would leave pending forever."""
        why = srun_missing()
        if why is not None:
            raise ConfigError(why[0].upper() + why[1:])
        have = len(self.nodes)
        if request.nodes > have:
            raise queue.NeverFits(
                "Requested node configuration is not available",
                f"the job asks for {request.nodes} nodes and this Slurm cluster has {have}; "
                f"lower --total-nodes to {have} or less.",
            )
        if stop_requested() is not None:
            return None
        return Allocation(0, (), request)

    def run(
        self,
        alloc: Allocation,
        *,
        out: Callable[[str], None],
        err: Callable[[str], None],
        stop_requested: Callable[[], int | None],
        on_started: Callable[[float], None] | None = None,
    ) -> StepResult:
        """Run srun; pass its output through; the step's result as srun reports it."""
        request = alloc.request
        if not self.argv:
            raise UsageError(
                "The Slurm backend was given no srun line; build it with "
                "request.srun_command (csrun_wse does)."
            )
        env = self._srun_env(request)
        t0 = time.perf_counter()
        watch = SrunWatch()
        pty = request.pty
        proc, pumps = self._start_srun(env, pty, out, err, watch)
        result = StepResult([], 0)
        job_id: int | None = None
        started = False
        at_start: SlurmJobRecord | None = None
        next_id_poll = t0 + FIRST_ID_POLL_S  # a het job's id comes on srun's first line
        kill_at: float | None = None
        try:
            while True:
                try:
                    rc = proc.wait(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.perf_counter()
                if job_id is None and watch.job_id is not None:
                    job_id = watch.job_id
                if job_id is None and now >= next_id_poll:
                    job_id = self._job_of_session(proc.pid if not pty else os.getsid(0))
                    next_id_poll = now + ID_POLL_S
                if job_id is not None and job_id not in self._recorded:
                    self._register(job_id, request)
                if (
                    job_id is not None
                    and not started
                    and (watch.allocated_at is not None or watch.job_id is None)
                ):
                    started = True
                    # the components' nodes as allocated (after a node failure Slurm may already
                    # have taken the failed node out of the job's record)
                    at_start = show_job(job_id)
                    self._mark_started(job_id)
                    if on_started is not None:
                        on_started(now - t0)
                sig = stop_requested() if result.interrupted is None else None
                if sig is not None:
                    result.interrupted = sig
                    self._stop(proc, job_id)
                    kill_at = time.monotonic() + STOP_GRACE_S
                if kill_at is not None and time.monotonic() > kill_at:
                    proc.kill()
                    kill_at = None
        finally:
            if proc.poll() is None:  # an exception in the launcher: srun must not outlive it
                self._stop(proc, job_id)
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for p in pumps:
                p.join(timeout=5)
        return self._conclude(job_id, request, watch, result, rc, at_start, t0, err)

    def _srun_env(self, request: JobRequest) -> dict[str, str]:
        """srun's environment: the base one, the request's, the job's secret, and this
        installation's commands first on PATH."""
        env = dict(os.environ if self.base_env is None else self.base_env)
        env.update(request.env)
        env.update(secret_env())  # srun passes it to every task (the chief's channel)
        # the task runs the same command words on every node: `python-ws` etc. must resolve to
        # this installation (same path on every node, see docs/slurm.md)
        bindir = os.path.dirname(sys.executable)
        if bindir not in env.get("PATH", "").split(os.pathsep):
            env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
        return env

    def _start_srun(
        self,
        env: dict[str, str],
        pty: bool,
        out: Callable[[str], None],
        err: Callable[[str], None],
        watch: SrunWatch,
    ) -> tuple[subprocess.Popen[bytes], list[threading.Thread]]:
        """Start srun; off a terminal, threads that pass its output and stderr through (the
        stderr one feeding `watch`)."""
        try:
            proc = subprocess.Popen(
                list(self.argv),
                env=env,
                stdin=None if pty else subprocess.DEVNULL,
                stdout=None if pty else subprocess.PIPE,
                stderr=None if pty else subprocess.PIPE,
                start_new_session=not pty,  # Ctrl-C reaches the launcher, which cancels the job
                preexec_fn=_end_with_launcher,
            )
        except OSError as e:
            raise ConfigError(
                f"cannot run srun: {e.strerror}; install the Slurm client or set "
                "CS2_SCHEDULER=embedded."
            ) from e
        pumps = []
        if not pty:
            pumps = [
                threading.Thread(target=_pump, args=(proc.stdout, out, None), daemon=True),
                threading.Thread(target=_pump, args=(proc.stderr, err, watch), daemon=True),
            ]
            for p in pumps:
                p.start()
        return proc, pumps

    def _conclude(
        self,
        job_id: int | None,
        request: JobRequest,
        watch: SrunWatch,
        result: StepResult,
        rc: int,
        at_start: SlurmJobRecord | None,
        t0: float,
        err: Callable[[str], None],
    ) -> StepResult:
        """What srun's end means: the exit code, the job's record (with its nodes as
        allocated), each task's exit and the report of a failure."""
        if job_id is None:
            job_id = watch.job_id
        if job_id is not None and job_id not in self._recorded:
            self._register(job_id, request)
        result.exit_code = rc if rc >= 0 else 128 - rc
        if result.interrupted is not None and result.exit_code == 0:
            result.exit_code = 128 + result.interrupted
        result.started_s = time.perf_counter() - t0
        record = show_job(job_id) if job_id is not None else None
        if (
            record is not None
            and at_start is not None
            and at_start.nodes
            and ([len(n) for n in record.nodes] != [len(n) for n in at_start.nodes])
        ):
            record = SlurmJobRecord(record.states, at_start.nodes)
        self.last_record = record
        result.exits = self._exits(request, record, watch)
        self._job_id = job_id
        report = self._report(job_id, request, record, watch, result)
        if report:
            err(report + "\n")
            result.messages.append(report)
        return result

    _job_id: int | None = None

    def release(self, alloc: Allocation, result: StepResult | None) -> None:
        """Record how the job ended (Slurm already freed its nodes); idempotent."""
        job_id = self._job_id
        if job_id is None:
            return
        record = self.last_record
        if result is None:
            state, code = "CANCELLED", None
        elif record is not None and record.state in ("CANCELLED", "FAILED", "NODE_FAIL"):
            state, code = record.state, result.exit_code
        elif result.interrupted is not None:
            state, code = "CANCELLED", result.exit_code
        else:
            state = "COMPLETED" if result.exit_code == 0 else "FAILED"
            code = result.exit_code
        self._finish(job_id, state, code, record)

    def cancel(self, job_id: int, *, user: str, admin: bool) -> None:
        """scancel the base id (every component); Slurm decides who may."""
        proc = run_client(["scancel", str(job_id)])
        if proc.returncode != 0:
            msg = proc.stderr.strip().removeprefix("scancel: error: ") or "scancel failed"
            raise UsageError(f"Slurm refused to cancel job {job_id}: {msg}; see `jobs show`.")

    def queue(self, *, all_states: bool = False) -> list[queue.QueueJob]:
        """squeue's jobs, one QueueJob per job (a het job's components folded together)."""
        fmt = SQUEUE_FORMAT
        args = ["squeue", "-h", "-O", fmt]
        if all_states:
            args += ["-t", "all"]
        proc = run_client(args)
        if proc.returncode != 0:
            raise ConfigError(
                "squeue failed ("
                + (proc.stderr.strip() or "no output")
                + "); check that slurmctld is running."
            )
        return squeue_jobs(proc.stdout, fmt)

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _job_of_session(sid: int) -> int | None:
        """The job whose allocating process has session id `sid` (srun's own session)."""
        # -t all: a 1-node job may have ended before we asked (Slurm keeps it for MinJobAge)
        proc = run_client(["squeue", "-h", "-t", "all", "-O", "JobID:20,HetJobID:20,AllocSID:12"])
        best: int | None = None
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[2] == str(sid):
                base = int(parts[1]) if parts[1].isdigit() and parts[1] != "0" else int(parts[0])
                best = base if best is None else max(best, base)
        return best

    @staticmethod
    def _stop(proc: subprocess.Popen[bytes], job_id: int | None) -> None:
        """Cancel the whole job (every component); before its id is known, stop srun."""
        if job_id is not None:
            run_client(["scancel", str(job_id)])
        elif proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    def _exits(
        self, request: JobRequest, record: SlurmJobRecord | None, watch: SrunWatch
    ) -> list[TaskExit]:
        """srun's per-component task numbers -> global SLURM_PROCIDs (components' tasks are
        contiguous PROCID ranges, in component order; a task's component is found by its node)."""
        offsets, first = [], 0
        for comp in request.components:
            offsets.append(first)
            first += comp.ntasks
        exits: list[TaskExit] = []
        for node, ids, text, after_stop in watch.errors:
            k = 0
            if record is not None:
                k = next((i for i, nodes in enumerate(record.nodes) if node in nodes), 0)
            base = offsets[k] if k < len(offsets) else 0
            code, sig = exit_of(text)
            stopped = after_stop and sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGINT)
            exits += [TaskExit(base + i, node, code, sig, stopped) for i in ids]
        return exits

    @staticmethod
    def _report(
        job_id: int | None,
        request: JobRequest,
        record: SlurmJobRecord | None,
        watch: SrunWatch,
        result: StepResult,
    ) -> str:
        """One line naming the task and node that failed the job (srun's lines said it per
        component; this says it with the global task id the task saw as SLURM_PROCID)."""
        jid = f"job {job_id}" if job_id is not None else "the job"
        if watch.failed_nodes:
            failed = list(dict.fromkeys(watch.failed_nodes))  # srun repeats it per component
            ids = _tasks_on(failed, request, record, job_id or 0)
            on = f" under task(s) {_ranges(ids)} (SLURM_PROCID)" if ids else ""
            return (
                f"csrun: {jid} failed: node {', '.join(failed)} failed{on} (Slurm: Node "
                "failure); the other tasks were stopped. Rerun when `sinfo` shows the node "
                "up."
            )
        bad = [e for e in result.exits if e.failed]
        if result.interrupted is not None:
            return (
                f"csrun: {jid} was cancelled (the launcher was interrupted and scancelled "
                "it); every task was stopped."
            )
        if not bad:
            if record is not None and "CANCELLED" in record.states and result.exit_code:
                return f"csrun: {jid} was cancelled (scancel); every task was stopped."
            return ""
        first = bad[0]
        how = (
            f"exited with exit code {first.code}"
            if first.signal is None
            else f"was killed by signal {first.signal}"
        )
        return (
            f"csrun: {jid} failed: task {first.procid} (SLURM_PROCID) on {first.node} {how}"
            "; --kill-on-bad-exit stopped the other tasks. See the task's output above."
        )

    def _register(self, job_id: int, request: JobRequest) -> None:
        record_job(
            self.store, job_id, len(request.components), request.job_name, " ".join(request.command)
        )
        self._recorded.add(job_id)

    def _mark_started(self, job_id: int) -> None:
        mark_started(self.store, job_id)

    def _finish(
        self, job_id: int, state: str, code: int | None, record: SlurmJobRecord | None
    ) -> None:
        nodes = [list(n) for n in record.nodes] if record is not None else []
        record_end(self.store, job_id, state, code, nodes)
