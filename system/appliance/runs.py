"""The cluster server's dispatcher: wsjobs in priority-then-age order onto the scheduler.

The server does not place tasks itself: it starts each wsjob as the launcher a user would run
(a compile job through `csrun_cpu`, an execute job through `csrun_wse` naming the systems it
chose), so the scheduler backend that serves csrun_wse (embedded or real Slurm) reserves the
nodes and systems, and wsjobs and launcher jobs share one cluster without overlapping. The
launch commands are given by whoever starts the server (scripts/cluster_server.py).

Order: QUEUED jobs sorted by priority (p1 first), then age. Compile jobs need CPU nodes only and
start while fewer than MAX_COMPILES run. Execute jobs start strictly in order: the first one
waits until num_csx systems in a row (the cluster description's order) are ACTIVE in its mode and
held by no job; the ones behind it wait for it (the real cluster's "N execute job(s) queued
before current job"). A started execute job stays QUEUED until the scheduler has allocated its
launch (the scheduler's queue says RUNNING, or the job's chief has registered on its systems);
while the scheduler holds it PENDING, its reason is the job's queue note.

Every launch is started from the dispatcher thread (which lives as long as the server) with a
parent-death signal, so a killed server takes its launches with it and each launch stops its
tasks and frees its nodes; the next server run marks such jobs FAILED (JobBook.recover).
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs2sim.system.appliance.asuser import Account, preexec
from cs2sim.system.appliance.jobs import ENDED, JobBook, WsJob, job_log_dir
from cs2sim.system.errors import CsError, JobRefused
from cs2sim.system.machine import Machine, list_systems
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store

__all__ = ["Launchers", "Dispatcher", "MAX_COMPILES", "EXIT_SYSTEM_STOPPED", "make_log_dir"]

MAX_COMPILES = 2
TICK_S = 1.0  # with nothing to start, re-check the cluster this often (idle: one store read)
KILL_GRACE_S = 30.0  # a launch told to stop gets this long before SIGKILL
EXIT_SYSTEM_STOPPED = 75  # the run's exit code when its system left ACTIVE (forced standby, fault)
EXIT_REFUSED = 69
log = logging.getLogger("cs2sim.appliance")


@dataclass(frozen=True)
class Launchers:
    """The commands that start a compile job and an execute job (their argv prefixes)."""

    cpu: tuple[str, ...]
    wse: tuple[str, ...]


def make_log_dir(home: Path, job: WsJob) -> Path:
    """The job's remote log directory and its empty `launch.log`, made by the server (a fresh
    name: mkdir fails on anything there, a planted symlink included), then given to the job's
    user: 0700 and 0600, theirs (a server run as root serves many users, and one user's logs
    are no other's to read)."""
    log_dir = job_log_dir(home, job.id)
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(mode=0o700)
    fd = os.open(
        log_dir / "launch.log", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
    )
    try:
        if os.geteuid() == 0 and job.uid != 0:
            account = Account.of(job.uid)
            os.fchown(fd, account.uid, account.gid)
            os.chown(log_dir, account.uid, account.gid, follow_symlinks=False)
    finally:
        os.close(fd)
    return log_dir


def _open_launch_log(log_dir: Path) -> int:
    """The launch log to append to: never through a symlink, and only a regular file of the
    directory's owner (the directory is the job's user's: they may have replaced the file,
    with one of their own at most)."""
    dfd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(
            "launch.log",
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
            0o600,
            dir_fd=dfd,
        )
        st, dst = os.fstat(fd), os.fstat(dfd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != dst.st_uid or st.st_nlink != 1:
            os.close(fd)
            raise PermissionError(f"{log_dir / 'launch.log'} is not the job's own log file")
        return fd
    finally:
        os.close(dfd)


@dataclass
class _Launch:
    job_id: str
    proc: subprocess.Popen[bytes]
    deadline: float | None
    stop_reason: str = ""  # set when the server stops it (cancel, time limit, shutdown)
    stop_phase: str = ""
    sched_job: str = ""  # the scheduler's id of the launch's job, once it has one
    next_lookup: float = 0.0
    allocated: bool = True  # an execute job's launch: once the scheduler gave it its systems
    pending: str = ""  # the scheduler's reason while it has not


class Dispatcher:
    """Starts queued wsjobs when their resources are free and records how each ends."""

    def __init__(
        self,
        home: Path,
        book: JobBook,
        store: Store,
        launchers: Launchers,
        epoch: int,
        on_change: Callable[[], None],
    ) -> None:
        self.home = Path(home)
        self.book = book
        self.store = store
        self.launchers = launchers
        self.epoch = epoch
        self.on_change = on_change  # wakes the watchers of every job
        self.cond = threading.Condition()
        self.launches: dict[str, _Launch] = {}
        self.stopping = False
        self.queue_notes: dict[str, str] = {}  # job id -> why it waits (the client's message)
        self.thread = threading.Thread(target=self._loop, name="dispatcher", daemon=True)

    # --- the resources an execute job needs -------------------------------------------------
    def systems_for(self, mode: ExecMode, count: int) -> tuple[tuple[str, ...] | None, str]:
        """The first `count` systems in a row free for a job in `mode`, or None and why not."""
        names = list_systems(self.store)
        status = {n: Machine(self.store, n).status() for n in names}
        held = {n for n, s in status.items() if s.held_by is not None or s.running_jobs}
        held |= {s for job in self._running_jobs() for s in job.systems}
        busy = 0
        for first in range(len(names)):
            window = [names[(first + k) % len(names)] for k in range(count)]
            ok = all(
                status[n].state is State.ACTIVE and status[n].active_mode is mode for n in window
            )
            if ok and not held.intersection(window):
                return tuple(window), ""
            if ok:
                busy += 1
        running = len([j for j in self._running_jobs() if j.kind == "execute"])
        return None, (
            "current job is top of queue but likely blocked by running jobs, "
            f"{running} execute job(s) running, systems held: "
            f"{', '.join(sorted(held)) or 'none'}"
        )

    def refusal(self, mode: ExecMode, count: int) -> None:
        """JobRefused when no `count` systems in a row could ever run the job as the cluster is
        now (too many, STANDBY, FAULT, the other mode); the first window's reason is given."""
        names = list_systems(self.store)
        first_error: CsError | None = None
        if count > len(names):
            Machine(self.store, names[0]).job_systems(count)  # raises its sentence
        for first in names:
            try:
                Machine(self.store, first).check_job(mode, count)
                return
            except JobRefused as e:
                first_error = first_error or e
        assert first_error is not None
        raise first_error

    def _running_jobs(self) -> list[WsJob]:
        jobs = [self.book.get(j) for j in list(self.launches)]
        return [j for j in jobs if j is not None]

    # --- the loop ----------------------------------------------------------------------------
    def wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def _loop(self) -> None:
        # the lock is held while deciding (a cancel cannot slip between reading a job QUEUED and
        # starting it) and released while waiting
        with self.cond:
            while not self.stopping:
                try:
                    self._reap()
                    self._start_ready()
                except CsError:  # a store hiccup: try again at the next tick
                    pass
                except Exception as e:  # noqa: BLE001 - one line in the log; the loop goes on
                    log.error("dispatcher: %s: %s", type(e).__name__, e)
                self.cond.wait(self._next_wait())
        self._stop_all()

    def _next_wait(self) -> float:
        if not self.launches:
            return TICK_S
        # a launch is running: watch it closely (its end, its time limit)
        deadlines = [la.deadline for la in self.launches.values() if la.deadline]
        wait = 0.1
        if deadlines:
            wait = min(wait, max(0.0, min(deadlines) - time.monotonic()))
        return wait

    def _start_ready(self) -> None:
        queued = sorted(
            (
                j
                for j in self.book.all(active_only=True)
                if j.phase == "QUEUED" and j.id not in self.launches
            ),
            key=WsJob.order_key,
        )
        compiles = sum(1 for j in self._running_jobs() if j.kind == "compile")
        execute_ahead = 0
        notes = {
            job_id: note for job_id, la in self.launches.items() if (note := self._pending_note(la))
        }
        for job in queued:
            if job.kind == "compile":
                if compiles < MAX_COMPILES:
                    self._start(job, ())
                    compiles += 1
                else:
                    notes[job.id] = (
                        f"current job is top of queue but likely blocked by "
                        f"running jobs, {compiles} compile job(s) running"
                    )
                continue
            if execute_ahead:
                notes[job.id] = f"{execute_ahead} execute job(s) queued before current job"
                execute_ahead += 1
                continue
            systems, why = self.systems_for(ExecMode(job.spec["exec_mode"]), job.num_csx)
            if systems is None:
                notes[job.id] = why
                execute_ahead += 1
                continue
            self._start(job, systems)
        if notes != self.queue_notes:
            self.queue_notes = notes
            self.on_change()

    def _start(self, job: WsJob, systems: tuple[str, ...]) -> None:
        spec = job.spec
        log_dir = job_log_dir(self.home, job.id)
        if job.kind == "compile":
            argv = [*self.launchers.cpu, spec["wrapper"], spec["run_py"], *spec["args"]]
        else:
            argv = [
                *self.launchers.wse,
                *spec["shape"],
                spec["wrapper"],
                spec["run_py"],
                *spec["args"],
                "--cs_ip",
                systems[0],
            ]
        env = {k: str(v) for k, v in spec.get("env", {}).items()}
        env["CS2SIM_WSJOB"] = job.id  # the launch names its scheduler job after the wsjob
        out = -1
        try:
            out = _open_launch_log(log_dir)
            # no cwd= here: Popen would chdir with the server's rights, before any preexec
            # function; the child becomes the user first and enters the directory as them
            proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec(Account.of(job.uid), spec["cwd"]),
            )
        except (CsError, OSError, KeyError, subprocess.SubprocessError) as e:
            job.phase, job.ended = "FAILED", time.time()
            job.reason = f"the launch could not start: {getattr(e, 'strerror', None) or e}"
            self.book.save(job)
            self.on_change()
            return
        finally:
            if out >= 0:
                os.close(out)
        limit = spec.get("job_time_sec") or 0
        launch = _Launch(
            job.id, proc, time.monotonic() + limit if limit > 0 else None, allocated=not systems
        )
        self.launches[job.id] = launch
        # an execute job is RUNNING once the scheduler has given its launch the systems (the
        # chosen ones were free, but a launcher job or, on real Slurm, anyone's job may take
        # the nodes first); a compile job at once
        job.phase = "RUNNING" if launch.allocated else "QUEUED"
        job.started = time.time() if launch.allocated else None
        job.systems, job.reason = list(systems), ""
        job.spec = {**spec, "pid": proc.pid}
        self.book.save(job)
        self.on_change()

    @staticmethod
    def _pending_note(launch: _Launch) -> str:
        """Why a launched execute job still waits: the scheduler's own reason, once it says
        its job is PENDING (a launch allocated at once never says it waited)."""
        return "" if launch.allocated else launch.pending

    def _check_allocated(self, launch: _Launch) -> None:
        """Has the scheduler given the launch its systems? Its queue says so (the embedded
        scheduler), or the job's chief has registered on them (any scheduler)."""
        from cs2sim.system.sched import queue

        job = self.book.get(launch.job_id)
        if job is None or not job.systems:
            launch.allocated = True
            return
        mine = [j for j in queue.jobs(self.store) if j.pid == launch.proc.pid]
        if mine:
            launch.sched_job = str(mine[-1].id)
        status = Machine(self.store, job.systems[0]).status()
        registered = any(j.command.startswith(f"{job.id}: ") for j in status.running_jobs)
        if not registered and not (mine and mine[-1].state == "RUNNING"):
            if mine and mine[-1].state == "PENDING":
                note = (
                    f"scheduler job {mine[-1].id} is PENDING ({mine[-1].reason}), "
                    f"waiting for {', '.join(job.systems)}"
                )
                if note != launch.pending:
                    launch.pending = note
                    self.queue_notes = {**self.queue_notes, job.id: note}
                    self.on_change()
            return  # not submitted yet, waiting, or on a scheduler whose queue is not ours
        launch.allocated = True
        job.phase, job.started = "RUNNING", time.time()
        if mine and mine[-1].nodes:  # where the scheduler put each replica (csctl get job)
            job.spec = {**job.spec, "placement": [list(c) for c in mine[-1].nodes]}
        job.sched_job = launch.sched_job or job.sched_job
        self.book.save(job)
        self.on_change()

    def _reap(self) -> None:
        now = time.monotonic()
        for job_id, launch in list(self.launches.items()):
            code = launch.proc.poll()
            if not launch.sched_job and now >= launch.next_lookup:
                self._find_sched_job(launch, now)
            if code is None and not launch.allocated and not launch.stop_reason:
                self._check_allocated(launch)
            if code is None:
                due = launch.deadline is not None and now >= launch.deadline
                if due and not launch.stop_reason:
                    job = self.book.get(job_id)
                    limit = job.spec.get("job_time_sec") if job is not None else "?"
                    self._signal(
                        launch,
                        "FAILED",
                        f"the job ran past its time limit (--job_time_sec {limit})",
                    )
                elif launch.stop_reason and launch.deadline and now >= launch.deadline:
                    _kill_group(launch.proc.pid, signal.SIGKILL)
                continue
            del self.launches[job_id]
            self._record_end(job_id, launch, code)

    def _find_sched_job(self, launch: _Launch, now: float) -> None:
        """The scheduler job the launch submitted (`jobs show` lists it; its task logs are the
        job's): looked up at most once a second until found."""
        from cs2sim.system.sched import queue

        launch.next_lookup = now + 1.0
        mine = [j for j in queue.jobs(self.store, all_states=True) if j.pid == launch.proc.pid]
        if mine:
            launch.sched_job = str(mine[-1].id)
            job = self.book.get(launch.job_id)
            if job is not None:
                job.sched_job = launch.sched_job
                self.book.save(job)

    def _record_end(self, job_id: str, launch: _Launch, code: int) -> None:
        job = self.book.get(job_id)
        if job is None or job.phase in ENDED:
            return
        _kill_group(launch.proc.pid, signal.SIGKILL)  # nothing of it may outlive it
        job.ended, job.exit_code = time.time(), code
        if launch.stop_reason:
            job.phase, job.reason = launch.stop_phase, launch.stop_reason
        elif code == 0:
            job.phase, job.reason = "SUCCEEDED", ""
        elif code == EXIT_SYSTEM_STOPPED:
            job.phase = "FAILED"
            job.reason = (
                "a system of the job left ACTIVE while it ran (a forced standby or a "
                "fault); its checkpoints are kept"
            )
        elif code == EXIT_REFUSED:
            job.phase, job.reason = "FAILED", "the system refused the job (see its log)"
        elif cancelled := self._cancelled_by_scheduler(launch, job):
            # `jobs cancel N` / scancel on its launch: a cancel, whoever asked (not a failure)
            job.phase = "CANCELLED"
            job.reason = f"its scheduler job {cancelled} was cancelled (`jobs cancel`)"
        else:
            job.phase = "FAILED"
            job.reason = f"its launch exited with code {code} (see its log)"
        self.book.save(job)
        self.on_change()

    def _cancelled_by_scheduler(self, launch: _Launch, job: WsJob) -> str:
        """The scheduler job of the launch if the scheduler cancelled it, else ""."""
        from cs2sim.system.sched import queue

        try:
            mine = [j for j in queue.jobs(self.store, all_states=True) if j.pid == launch.proc.pid]
        except CsError:
            return ""
        return str(mine[-1].id) if mine and mine[-1].state == "CANCELLED" else ""

    # --- stopping ----------------------------------------------------------------------------
    def stop_job(self, job: WsJob, phase: str, reason: str) -> WsJob:
        """Cancel a queued job at once, or tell a running one's launch to stop (recorded when
        it has ended)."""
        with self.cond:
            launch = self.launches.get(job.id)
            if launch is None:
                job.phase, job.reason, job.ended = phase, reason, time.time()
                self.book.save(job)
            else:
                self._signal(launch, phase, reason)
            self.cond.notify_all()
        self.on_change()
        return job

    def _signal(self, launch: _Launch, phase: str, reason: str) -> None:
        """SIGTERM to the launcher: it stops its tasks and frees their nodes (as after
        `jobs cancel`); SIGKILL to its process group if it is still there after the grace."""
        if not launch.stop_reason:
            launch.stop_reason, launch.stop_phase = reason, phase
        launch.deadline = time.monotonic() + KILL_GRACE_S
        try:
            launch.proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _stop_all(self) -> None:
        for launch in list(self.launches.values()):
            self._signal(launch, "FAILED", "the cluster server was stopped while the job ran")
        end = time.monotonic() + KILL_GRACE_S
        for job_id, launch in list(self.launches.items()):
            try:
                code = launch.proc.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill_group(launch.proc.pid, signal.SIGKILL)
                code = launch.proc.wait()
            self.launches.pop(job_id, None)
            self._record_end(job_id, launch, code)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join()

    def describe(self) -> dict[str, Any]:
        return {"running": sorted(self.launches), "notes": dict(self.queue_notes)}


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
