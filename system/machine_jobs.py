"""A machine's jobs: registering a job on its systems, checking one could start, cancelling and
finishing it (the job half of system/machine.py's Machine, which inherits it).

A job may hold several CS-2 systems (weight streaming over num_csx systems): this system and the
next ones of the cluster description. Registering re-checks every one of them, their nodes and
who holds them, inside ONE write transaction, and writes the job and an audit row on each.

On a shared store a member's job is registered by the store service with what the service saw
of the caller: its account, its process (SO_PEERCRED, verified alive through its pidfd at that
moment) and that process's start tick and uid (/proc), never a pid or a name the caller sent, so
`jobs cancel` signals only a process that really registered itself, only while it is that same
process running as that same uid, and only from the canceller's own process.

Job ids are the service's. A caller may name an id (a launched job's SLURM_JOB_ID) only if it
is its own launch: a RUNNING job of the embedded queue, or a recorded Slurm job, of the same
account, not yet registered; any other id that is a job's is refused (audited), and an id no job
has is replaced by a new one. So a system or node held by someone's launch is never taken by
naming its id (`_held` excuses only the caller's own launch).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from cs2sim.system import audit as auditlog
from cs2sim.system import changes, jobs, procfs
from cs2sim.system.errors import (
    CsError,
    InvalidTransition,
    JobRefused,
    NoSuchJob,
    PermissionDenied,
    ResourceError,
    UsageError,
)
from cs2sim.system.state import ExecMode, held_refusal, systems_refusal
from cs2sim.system.store_ops import operation, process_of
from cs2sim.system.systems import list_systems, system_addresses
from cs2sim.system.users import Identity, Role

if TYPE_CHECKING:
    from cs2sim.system.jobs import Job
    from cs2sim.system.store import Store

__all__ = ["JobsOfMachine", "COMMAND_MAX"]

COMMAND_MAX = 4096  # a job's command line as recorded, characters (cut and marked beyond)


class JobsOfMachine:
    """The job operations of a Machine (which provides these attributes and `_settle`)."""

    store: Store
    name: str
    _clock: Callable[[], float]

    if TYPE_CHECKING:  # Machine's, which this is a part of

        def __init__(
            self, store: Store, system: str | None = None, *, clock: Callable[[], float] = ...
        ) -> None: ...

        def _settle(self, db: sqlite3.Connection, now: float) -> changes.Row: ...

        def status(self) -> Any: ...  # a machine.SystemStatus

    @operation(
        "job.register",
        receiver="machine",
        args={
            "system": str,
            "mode": ExecMode,
            "command": str,
            "nodes": tuple[str, ...],
            "job_id": int | None,
            "num_csx": int,
        },
        fill={"who": "identity", "pid": "pid"},
        may="own",
    )
    def register_job(
        self,
        who: Identity,
        mode: ExecMode,
        command: str,
        pid: int,
        nodes: tuple[str, ...] = (),
        job_id: int | None = None,
        num_csx: int = 1,
    ) -> Job:
        """Record a RUNNING job; refused unless each of its systems is ACTIVE in `mode` and free,
        and its nodes are free. `job_id`: the scheduler's id of the job (SLURM_JOB_ID), kept as
        the job's id so users see one id everywhere; a new id of the shared sequence if none is
        given (or it is already taken: a Slurm id meeting an older job's). `num_csx`: the job
        holds this system and the next num_csx - 1 of the cluster (`job_systems`); a launch the
        queue started under `job_id` already holds them, anyone else holding one refuses it."""
        mode = ExecMode(mode)
        names = self.job_systems(num_csx)
        machines = [
            self if n == self.name else type(self)(self.store, n, clock=self._clock) for n in names
        ]
        command = auditlog.cap(command, COMMAND_MAX)
        proc = process_of(pid)  # verified now (the service: still the process that connected)
        job: Job | None = None
        with self.store.transaction() as db:
            now = self._clock()  # under the write lock: see _attempt
            rows = [m._settle(db, now) for m in machines]
            refusal = systems_refusal(list(rows), mode, now)
            own: int | None = None
            if refusal is None and job_id is not None:
                own, refusal = _own_launch(db, job_id, who.name)
                job_id = own if own is not None and jobs.get(db, own) is None else None
            if refusal is None:
                taken = jobs.node_conflict(db, tuple(nodes))
                taken = taken or _held(db, names, own)
                refusal = ResourceError(taken) if taken else None
            if refusal is None:
                job, taken = jobs.insert(
                    db,
                    system=self.name,
                    user=who.name,
                    mode=mode,
                    command=command,
                    pid=pid,
                    nodes=tuple(nodes),
                    now=now,
                    job_id=job_id,
                    systems=names,
                )
                refusal = ResourceError(taken) if taken else None
            if job is not None and refusal is None:
                refusal = _record_process(db, job.id, proc)
            on = "" if len(names) == 1 else f" on {', '.join(names)}"
            detail = (
                str(refusal) if refusal else f"job {job.id if job else '?'} ({mode}){on}: {command}"
            )
            for m, r in zip(machines if refusal is None else machines[:1], rows, strict=False):
                auditlog.record(  # each system's log shows the job it runs
                    db,
                    user=who.name,
                    system=m.name,
                    command="job start",
                    from_state=r.state,
                    to_state=r.state,
                    at=now,
                    outcome="ok"
                    if refusal is None
                    else "denied"
                    if isinstance(refusal, PermissionDenied)
                    else "refused",
                    detail=detail,
                )
        if refusal is not None:
            raise refusal
        assert job is not None
        return job

    @operation(
        "job.check", receiver="machine", args={"system": str, "mode": ExecMode, "num_csx": int}
    )
    def check_job(self, mode: ExecMode, num_csx: int = 1) -> Any:  # a machine.SystemStatus
        """The system's status if a job in `mode` could start now; else JobRefused (one sentence
        naming the system, its state and active mode, and the admin commands that fix it). With
        `num_csx` the job takes this system and the next num_csx - 1 (`job_systems`): refused
        if the cluster has fewer, or if any of them is not ACTIVE in `mode`, naming it.

        Launchers call this before allocating anything; `register_job` checks again atomically.
        """
        mode = ExecMode(mode)
        names = self.job_systems(num_csx)
        machines = [
            self if n == self.name else type(self)(self.store, n, clock=self._clock) for n in names
        ]
        with self.store.transaction() as db:
            now = self._clock()  # under the write lock: see _attempt
            rows = [m._settle(db, now) for m in machines]
            refusal = systems_refusal(list(rows), mode, now)
        if refusal is not None:
            raise refusal
        return self.status()

    def job_systems(self, count: int = 1) -> tuple[str, ...]:
        """The `count` systems a job on this system takes: this one, then the next ones in the
        cluster description's order (wrapping round). JobRefused if the cluster has fewer."""
        names = list_systems(self.store)
        count = int(count)
        if count > len(names):
            raise JobRefused(
                f"This job asks for {count} CS-2 systems (runconfig.num_csx) but the cluster has "
                f"{len(names)} ({', '.join(names)}); lower num_csx to {len(names)} or fewer, or "
                "ask an admin to add systems to the cluster description (cluster.yaml)."
            )
        first = names.index(self.name)
        return tuple(names[(first + k) % len(names)] for k in range(max(1, count)))

    @classmethod
    def for_target(cls, store: Store, cs_ip: str, **kwargs: Callable[[], float]) -> Self:
        """The system a run's `--cs_ip` names: its IP (with or without ``:9000``) or its name."""
        target = cs_ip.strip()
        host, sep, port = target.rpartition(":")
        if sep and port.isdigit():
            target = host
        addresses = system_addresses(store)
        names = [n for n, _ in addresses]
        by_ip = {ip: n for n, ip in addresses}
        if target in names:
            return cls(store, target, **kwargs)
        if target in by_ip:
            return cls(store, by_ip[target], **kwargs)
        known = ", ".join(f"{n} ({ip})" for ip, n in sorted(by_ip.items(), key=lambda kv: kv[1]))
        raise UsageError(
            f"--cs_ip {cs_ip} names no CS-2 system of this cluster; use one of: {known}."
        )

    def cancel_job(self, who: Identity, job_id: int) -> Job:
        """Stop a RUNNING job that no launcher runs (`run.py --cs_ip` started by hand), by the
        id `system show` lists: its owner or an admin; SIGINT to its process on this host, so it
        stops as after Ctrl-C (checkpoints kept) and records itself CANCELLED. Audited.

        The signal is sent by the canceller's own process, and only to the process that
        registered the job while it is still that process (its start time, read by whoever
        registered it, matches): a reused pid is never signalled."""
        import signal

        job, started, uid = self._cancel_record(who, job_id)
        try:  # through a pidfd, only while it is the process recorded (start tick, uid)
            procfs.signal_recorded(int(job.pid or 0), started, uid, signal.SIGINT)
        except PermissionError as e:
            raise PermissionDenied(
                f"Job {job_id} is another OS user's process; ask {job.user} or run "
                "`jobs cancel` as that user."
            ) from e
        return job

    @operation(
        "job.cancel",
        receiver="machine",
        args={"system": str, "job_id": int},
        fill={"who": "identity"},
        may="owner-or-admin",
    )
    def _cancel_record(self, who: Identity, job_id: int) -> tuple[Job, str | None, int | None]:
        """Judge and audit a cancel: the job and its process's recorded start tick and uid."""
        refusal: CsError | None = None
        with self.store.transaction() as db:
            now = self._clock()
            job = jobs.get(db, job_id)
            if job is None:
                raise NoSuchJob(
                    f"No job {job_id}; see the queue with `jobs show` and the jobs on the "
                    "system with `system show`."
                )
            if job.user != who.name and who.role is not Role.ADMIN:
                refusal = PermissionDenied(
                    f"Job {job_id} belongs to {job.user}; only its owner or an admin may cancel it."
                )
            elif job.state != "RUNNING" or job.pid is None:
                refusal = InvalidTransition(  # refused by the job's state: exit 1, not usage
                    f"Job {job_id} has already ended ({job.state}); nothing to cancel."
                )
            elif job.host != jobs.this_host():
                refusal = UsageError(
                    f"Job {job_id} runs on host {job.host}; cancel it there (its process is "
                    "not on this host)."
                )
            started = jobs.pid_start(db, job_id)
            uid = _recorded_uid(db, job)
            auditlog.record(
                db,
                user=who.name,
                system=job.system,
                command="jobs cancel",
                at=now,
                outcome="ok"
                if refusal is None
                else "denied"
                if isinstance(refusal, PermissionDenied)
                else "refused",
                detail=str(refusal)
                if refusal
                else f"{jobs.describe(job)}: sent SIGINT to process {job.pid}",
            )
        if refusal is not None:
            raise refusal
        return job, started, uid

    @operation(
        "job.finish",
        receiver="machine",
        args={"system": str, "job_id": int, "state": str},
        fill={"who": "identity"},
        may="owner-or-admin",
    )
    def finish_job(self, job_id: int, state: str, who: Identity | None = None) -> None:
        """Mark a job ended (COMPLETED / FAILED / CANCELLED) and free its nodes; idempotent.
        `who`: the account asking (a shared store's member); only the job's owner or an admin
        may end it (None: this process registered it)."""
        if state not in jobs.END_STATES:
            raise UsageError(f"Job state {state!r} is not one of {', '.join(jobs.END_STATES)}.")
        with self.store.transaction() as db:
            now = self._clock()
            job = jobs.get(db, job_id)
            if job is None:
                raise UsageError(f"No job {job_id}; see the running jobs with `system show`.")
            if who is not None and who.name != job.user and who.role is not Role.ADMIN:
                raise PermissionDenied(
                    f"Job {job_id} belongs to {job.user}; only its owner or an admin may end it."
                )
            ended = jobs.finish(db, job_id, state, now)
            if ended:  # each system it held logs its end
                for name in job.systems:
                    row = changes.read_row(db, name)
                    auditlog.record(
                        db,
                        user=job.user,
                        system=name,
                        command="job end",
                        from_state=row.state,
                        to_state=row.state,
                        at=now,
                        detail=f"job {job_id} {state}",
                    )
        if ended:
            _kick_queue(self.store)

    @operation("job.get", receiver="machine", args={"system": str, "job_id": int})
    def job(self, job_id: int) -> Job | None:
        """The job of this id (any system), None if there is none."""
        with self.store.read() as db:
            return jobs.get(db, job_id)


def _held(db: sqlite3.Connection, names: tuple[str, ...], own: int | None) -> str | None:
    """Why a system of the job is not free: another job (or launch) holds it. `own`: the
    caller's own RUNNING launch (checked by `_own_launch`), whose reservation the job takes up;
    no other holder is excused, whatever id the caller names."""
    held = jobs.holders(db)
    for name in names:
        holder = held.get(name)
        if holder is None or holder == own:
            continue
        job = jobs.get(db, holder)
        who = jobs.describe(job) if job is not None else f"job {holder} (a running launch)"
        return held_refusal(name, holder, who)
    return None


def _own_launch(
    db: sqlite3.Connection, job_id: int, user: str
) -> tuple[int | None, CsError | None]:
    """Whether `job_id`, named by a job being registered, is the caller's own launch: a RUNNING
    queue job (or a recorded, live Slurm job) of `user` not yet running as a registered job;
    (its id, None) if so, (None, None) if no live job has that id (the job gets a new one), and
    (None, refusal) if it is another's job, or one already registered."""
    queued = _row(db, "SELECT user, state FROM sched_jobs WHERE id = ?", job_id)
    slurm = _row(db, "SELECT user, state FROM slurm_jobs WHERE id = ?", job_id)
    known = jobs.get(db, job_id)
    running = known is not None and known.state == "RUNNING"
    launch = queued if queued is not None else slurm
    active = launch is not None and launch[1] in ("PENDING", "RUNNING")
    started = launch is not None and (launch[1] == "RUNNING" or queued is None)  # Slurm: either
    if active and launch is not None and launch[0] == user and started and not running:
        return job_id, None
    if not active and not running:
        return None, None  # an id the service never gave, or an ended job's: a new id
    owner = launch[0] if active and launch is not None else known.user if known else "?"
    why = f"belongs to {owner}"
    if owner == user:
        why = "is already registered" if running else "has not started"
    return None, PermissionDenied(
        f"Job {job_id} {why}; a job is registered only under the id of its own running "
        "launch (SLURM_JOB_ID), or under a new one: start it without naming another's id."
    )


def _row(db: sqlite3.Connection, sql: str, job_id: int) -> tuple[Any, ...] | None:
    """One row, None if none (or if the table does not exist yet on this store)."""
    try:
        row = db.execute(sql, (job_id,)).fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None else tuple(row)


def _record_process(db: sqlite3.Connection, job_id: int, proc: Any) -> CsError | None:
    """Record the uid the job's process runs as beside its pid and start tick (what a cancel
    checks before signalling); refused if the process is not the one verified (its pid was
    reused between the check and the record)."""
    if not jobs.has_column(db, "jobs", "pid_uid"):
        db.execute("ALTER TABLE jobs ADD COLUMN pid_uid INTEGER")
    if proc is None:
        return None  # gone already, or no /proc: nothing will be signalled
    if jobs.pid_start(db, job_id) != proc.start:
        return JobRefused(
            f"the process registering the job (pid {proc.pid}) ended while it registered; "
            "start the job again."
        )
    db.execute("UPDATE jobs SET pid_uid = ? WHERE id = ?", (proc.uid, job_id))
    return None


def _recorded_uid(db: sqlite3.Connection, job: Job) -> int | None:
    """The uid a job's process was recorded running as (for a job recorded before uids were:
    its account's OS login's, if it has one)."""
    if jobs.has_column(db, "jobs", "pid_uid"):
        row = db.execute("SELECT pid_uid FROM jobs WHERE id = ?", (job.id,)).fetchone()
        if row is not None and row[0] is not None:
            return int(row[0])
    import pwd

    try:
        return pwd.getpwnam(job.user).pw_uid
    except KeyError:
        return None


def _kick_queue(store: Store) -> None:
    """A job that ended frees its systems: a launch waiting for them may start now (its launcher
    is woken; best effort, the waiters re-check on their own too)."""
    try:
        from cs2sim.system.sched.queue import kick

        kick(store)
    except CsError:
        pass
