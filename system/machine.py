"""The machine: one CS-2 system as every other layer sees it (the facade over system/).

Rules this file keeps:

1. Every attempt to change the system is ONE ``BEGIN IMMEDIATE`` transaction that re-reads the
   state inside it, asks state.next_state, writes the change and its audit row, and commits;
   two processes racing cannot both win.
2. A denied (role) or refused (state) attempt writes only its audit row and changes nothing else.
   An attempt that fails midway is rolled back and audited as "error" afterwards.
3. Time-based facts are resolved by whoever reads next, inside a write transaction: a reboot
   whose time has passed becomes ACTIVE (audited as ``booted`` by ``system``), a RUNNING job whose
   process is gone becomes FAILED. No daemon; a killed shell cannot leave the machine half-booted.
4. The systems come from the cluster description, copied into the store when it is created and
   again only when the file changes (so opening a Machine does not import yaml).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from cs2sim.system import audit as auditlog
from cs2sim.system import changes, jobs
from cs2sim.system.cluster import Cluster, cluster_source, load_cluster
from cs2sim.system.errors import (
    ConfigError,
    CsError,
    InvalidTransition,
    JobRefused,
    NoSuchJob,
    PermissionDenied,
    ResourceError,
    UsageError,
)
from cs2sim.system.state import (
    ADMIN_ACTIONS,
    INTERNAL_ACTIONS,
    Action,
    ExecMode,
    State,
    next_state,
    ready_text,
)
from cs2sim.system.users import SYSTEM, Identity, Role, permission_message

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.audit import AuditEntry
    from cs2sim.system.jobs import Job
    from cs2sim.system.store import Store

__all__ = [
    "SystemStatus",
    "BootOutcome",
    "Machine",
    "boot_seconds",
    "list_systems",
    "software_version",
    "COMMAND_WORDS",
    "LAUNCHERS",
    "DEFAULT_BOOT_SECONDS",
]

DEFAULT_BOOT_SECONDS = 5.0  # long enough for a person to see the reboot
BUILD_STAMP = "202611220000"  # the build stamp of this cs2sim release (UTC); bump on release
CSOFT_RELEASE = "1.4.0"  # the CSoft release whose behaviour we model (execmode + FW swap, R1.4)

# The command words each action is audited and reported as.
COMMAND_WORDS: dict[Action, str] = {
    Action.STANDBY: "system standby",
    Action.ACTIVATE: "system activate",
    Action.SETUP: "config execmode setup",
    Action.WITHDRAW: "config execmode withdraw",
    Action.FAULT: "system fault",
    Action.BOOTED: "booted",
}
# The launcher word that runs a job in each mode (Cerebras' reference implementations and Model Zoo,
# docs/sources.md: python / python-ws).
LAUNCHERS: dict[ExecMode, str] = {
    ExecMode.PIPELINED: "python",
    ExecMode.WEIGHT_STREAMING: "python-ws",
}

# Why a job cannot start, by system state (ACTIVE is checked against the mode instead).
_JOB_REFUSALS: dict[State, str] = {
    State.STANDBY: "System {name} is in STANDBY; an admin must run `system activate` "
    "before jobs can run.",
    State.ACTIVATING: "System {name} is ACTIVATING ({ready}); wait for it to become ACTIVE, "
    "then start the job again.",
    State.FAULT: "System {name} is in FAULT ({reason}); an admin must run `system standby` and "
    "`system activate` before jobs can run.",
}


def boot_seconds() -> float:
    """How long a reboot (ACTIVATING) takes: $CS2_BOOT_SECONDS, default 5.0."""
    text = os.environ.get("CS2_BOOT_SECONDS", "").strip()
    if not text:
        return DEFAULT_BOOT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(
            f"CS2_BOOT_SECONDS is {text!r}; "
            "set it to a number of seconds >= 0 (e.g. 5) or unset it."
        )
    return value


@lru_cache(maxsize=1)
def software_version() -> str:
    """Our CSoft-style version "1.4.0-<YYYYMMDDhhmm>-1-<8 hex>" (the firmware version format of
    ALCF's user docs, docs/sources.md).

    The stamp is this cs2sim release's build stamp and the hex is the start of the sha256 of the
    system/ sources, so two installs of the same code report the same version (file times differ
    from clone to clone, so they are not used) and the version changes when the model does.
    """
    import hashlib

    sources = sorted(Path(__file__).parent.glob("*.py")) + [
        Path(__file__).with_name("cluster_default.yaml")
    ]
    digest = hashlib.sha256()
    for path in sources:
        digest.update(path.read_bytes())
    return f"{CSOFT_RELEASE}-{BUILD_STAMP}-1-{digest.hexdigest()[:8]}"


@dataclass(frozen=True)
class SystemStatus:
    """A system as of one read of the store."""

    name: str
    ip: str
    state: State
    configured_mode: ExecMode  # what `config execmode setup` chose
    active_mode: ExecMode  # what the system last booted into
    state_since: float  # epoch seconds
    activating_until: float | None  # set while ACTIVATING
    software_version: str
    running_jobs: tuple[Job, ...]
    fault_reason: str = ""
    audit_id: int | None = None  # the audit row of the change that returned this (else None)
    held_by: int | None = None  # the job holding it (a system job, or a launch the queue started)

    @property
    def pending_mode_change(self) -> bool:
        """True if the configured mode takes effect only at the next activation."""
        return self.configured_mode != self.active_mode

    def ready_in(self, now: float | None = None) -> float | None:
        """Seconds until a reboot completes (None unless ACTIVATING)."""
        if self.activating_until is None:
            return None
        return max(0.0, self.activating_until - (time.time() if now is None else now))


class Machine:
    """One CS-2 system: read its status, change its state, run jobs on it."""

    def __init__(
        self, store: Store, system: str | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self._clock = clock  # injectable so tests can let time pass without sleeping
        names = list_systems(store)
        if system is None:
            system = names[0]
        elif system not in names:
            raise UsageError(f"Unknown system {system!r}; known systems: {', '.join(names)}.")
        self.name = system
        self.several = len(names) > 1  # refusals then say which system they are about
        with store.read() as db:
            self.ip = self._row(db).ip

    # 1. reading --------------------------------------------------------------------------
    def status(self) -> SystemStatus:
        """The system now (a finished reboot reads as ACTIVE, a dead job as FAILED; committed)."""
        with self.store.read() as db:
            row = self._row(db)
            running = jobs.running(db, self.name)
            stale = self._boot_due(row, self._clock()) or bool(jobs.dead(db, running))
            held_by = jobs.holders(db, alive=False).get(self.name)
        if stale:
            with self.store.transaction() as db:
                row = self._settle(db, self._clock())
                running = jobs.running(db, self.name)
                held_by = jobs.holders(db, alive=False).get(self.name)
        return SystemStatus(
            name=row.name,
            ip=row.ip,
            state=row.state,
            configured_mode=row.configured_mode,
            active_mode=row.active_mode,
            state_since=row.state_since,
            activating_until=row.activating_until,
            software_version=software_version(),
            running_jobs=tuple(running),
            fault_reason=row.fault_reason or "",
            held_by=held_by,
        )

    def running_jobs(self) -> list[Job]:
        """The jobs running on this system now."""
        return list(self.status().running_jobs)

    def audit(self, last: int | None = None) -> list[AuditEntry]:
        """This system's audit log (and system-less rows), oldest first; the last N if given."""
        return auditlog.entries(self.store, last, system=self.name)

    def software(self) -> dict[str, str]:
        """Component -> version: cs2sim, CSoft, firmware (by active mode), python, sqlite."""
        import platform
        import sqlite3
        from importlib import metadata

        try:
            ours = metadata.version("cs2sim")
        except metadata.PackageNotFoundError:
            ours = "unknown (not installed)"
        mode = self.status().active_mode
        return {
            "cs2sim": ours,
            "CSoft": software_version(),
            "firmware": f"{mode.firmware} ({mode.label})",
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
        }

    @property
    def cluster(self) -> Cluster:
        """The full cluster description (nodes, MemoryX, SwarmX); reads the YAML."""
        return load_cluster(cluster_source(self.store.home))

    # 2. changing ---------------------------------------------------------------------------
    def check(self, who: Identity, action: Action, *, force: bool = False) -> None:
        """Raise PermissionDenied / InvalidTransition if `who` cannot do `action` now.

        Changes no state, so the shell can refuse BEFORE asking for confirmation. A refusal is
        audited: it is the user's attempt. `force`: as for `standby`.
        """
        self._attempt(who, Action(action), None, force=force)

    def standby(self, who: Identity, *, force: bool = False) -> SystemStatus:
        """Put the system in STANDBY; refused while jobs run unless `force` (the jobs then stop
        at their next step, keeping their last checkpoint; the audit counts them)."""
        return self._attempt(who, Action.STANDBY, changes.standby, force=force)

    def activate(self, who: Identity, *, expect: ExecMode | None = None) -> SystemStatus:
        """Reboot into the configured mode: ACTIVATING for boot_seconds(), then ACTIVE. With
        `expect`, refused (and audited) unless the configured mode is `expect` at the moment of
        the change: what a person confirmed, or a script asserted, is what boots."""
        seconds = boot_seconds()  # a bad $CS2_BOOT_SECONDS fails before anything is attempted
        return self._attempt(who, Action.ACTIVATE, changes.activate(seconds),
                             expect=None if expect is None else ExecMode(expect))

    def setup_execmode(self, who: Identity, mode: ExecMode, *,
                       keep_others: bool = False) -> SystemStatus:
        """Record the configured mode (STANDBY only); it takes effect at the next activation.
        With `keep_others`, refused (audited) when it would replace a different pending choice
        another account made: decided in the transaction, so a choice made meanwhile counts."""
        mode = ExecMode(mode)
        return self._attempt(who, Action.SETUP, changes.setup(mode),
                             keep_others=mode if keep_others else None)

    def record_declined(self, who: Identity, action: Action, question: str) -> None:
        """Audit an attempt that its user called off at a confirmation question (answered no):
        every attempt leaves a row, outcome "refused", nothing changed."""
        with self.store.transaction() as db:
            now = self._clock()
            row = self._settle(db, now)
            auditlog.record(db, user=who.name, system=self.name, command=COMMAND_WORDS[action],
                            from_state=row.state, to_state=row.state, outcome="refused",
                            detail=f"answered no to {question!r}; nothing changed", at=now)

    def withdraw_execmode(self, who: Identity) -> SystemStatus:
        """Take back a pending mode change (STANDBY only): the active mode is configured again.
        Refused (audited) when no change is pending."""
        return self._attempt(who, Action.WITHDRAW, changes.withdraw)

    def mode_origin(self) -> AuditEntry | None:
        """The audit row of the change that set the configured mode (`config execmode setup`
        or `withdraw`: who, when), or None if it is still the cluster description's."""
        with self.store.read() as db:
            row = db.execute(
                "SELECT * FROM audit WHERE system = ? AND outcome = 'ok' AND command IN (?, ?)"
                " AND (detail LIKE 'configured %' OR detail LIKE 'withdrew %')"
                " ORDER BY id DESC LIMIT 1",
                (self.name, COMMAND_WORDS[Action.SETUP], COMMAND_WORDS[Action.WITHDRAW]),
            ).fetchone()
        return auditlog.AuditEntry(*row) if row else None

    def last_activation(self) -> AuditEntry | None:
        """The audit row of this system's last accepted `system activate`, or None."""
        with self.store.read() as db:
            row = db.execute(
                "SELECT * FROM audit WHERE system = ? AND outcome = 'ok' AND command = ?"
                " ORDER BY id DESC LIMIT 1",
                (self.name, COMMAND_WORDS[Action.ACTIVATE]),
            ).fetchone()
        return auditlog.AuditEntry(*row) if row else None

    def inject_fault(self, who: Identity, reason: str) -> SystemStatus:
        """Put the system in FAULT (admin; for rehearsal and teaching)."""
        return self._attempt(who, Action.FAULT, changes.fault(reason.strip() or "fault injected"))

    def perform(
        self, who: Identity, action: Action, *, mode: ExecMode | None = None, reason: str = ""
    ) -> SystemStatus:
        """Do `action` by name (tests, scripts); `mode` for execmode setup, `reason` for fault."""

        def setup() -> SystemStatus:
            if mode is None:
                raise UsageError(
                    "`config execmode setup` needs a mode; choose pipelined or weight-streaming."
                )
            return self.setup_execmode(who, mode)

        runs: dict[Action, Callable[[], SystemStatus]] = {
            Action.STANDBY: lambda: self.standby(who),
            Action.ACTIVATE: lambda: self.activate(who),
            Action.SETUP: setup,
            Action.WITHDRAW: lambda: self.withdraw_execmode(who),
            Action.FAULT: lambda: self.inject_fault(who, reason),
            Action.BOOTED: lambda: self._attempt(who, Action.BOOTED, changes.boot),  # the clock's
        }
        return runs[Action(action)]()

    # 3. jobs ------------------------------------------------------------------------------
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
        machines = [self if n == self.name else Machine(self.store, n, clock=self._clock)
                    for n in names]
        job: Job | None = None
        with self.store.transaction() as db:
            now = self._clock()  # under the write lock: see _attempt
            rows = [m._settle(db, now) for m in machines]
            refusal = self._systems_refusal(rows, mode, now)
            if refusal is None:
                taken = jobs.node_conflict(db, tuple(nodes))
                taken = taken or self._held_refusal(db, names, job_id)
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
            on = "" if len(names) == 1 else f" on {', '.join(names)}"
            detail = (
                str(refusal) if refusal else
                f"job {job.id if job else '?'} ({mode}){on}: {command}"
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
                    outcome="refused" if refusal else "ok",
                    detail=detail,
                )
        if refusal is not None:
            raise refusal
        assert job is not None
        return job

    def check_job(self, mode: ExecMode, num_csx: int = 1) -> SystemStatus:
        """The system's status if a job in `mode` could start now; else JobRefused (one sentence
        naming the system, its state and active mode, and the admin commands that fix it). With
        `num_csx` the job takes this system and the next num_csx - 1 (`job_systems`): refused
        if the cluster has fewer, or if any of them is not ACTIVE in `mode`, naming it.

        Launchers call this before allocating anything; `register_job` checks again atomically.
        """
        mode = ExecMode(mode)
        names = self.job_systems(num_csx)
        machines = [self if n == self.name else Machine(self.store, n, clock=self._clock)
                    for n in names]
        with self.store.transaction() as db:
            now = self._clock()  # under the write lock: see _attempt
            rows = [m._settle(db, now) for m in machines]
            refusal = self._systems_refusal(rows, mode, now)
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
    def for_target(cls, store: Store, cs_ip: str, **kwargs: Callable[[], float]) -> Machine:
        """The system a run's `--cs_ip` names: its IP (with or without ``:9000``) or its name."""
        target = cs_ip.strip()
        host, sep, port = target.rpartition(":")
        if sep and port.isdigit():
            target = host
        names = list_systems(store)
        with store.read() as db:
            by_ip = dict(db.execute("SELECT ip, name FROM systems WHERE in_cluster = 1"))
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
        stops as after Ctrl-C (checkpoints kept) and records itself CANCELLED. Audited."""
        refusal: CsError | None = None
        with self.store.transaction() as db:
            now = self._clock()
            job = jobs.get(db, job_id)
            if job is None:
                raise NoSuchJob(
                    f"No job {job_id}; see the queue with `jobs show` and the jobs on the "
                    "system with `system show`.")
            if job.user != who.name and who.role is not Role.ADMIN:
                refusal = PermissionDenied(
                    f"Job {job_id} belongs to {job.user}; only its owner or an admin may cancel "
                    "it.")
            elif job.state != "RUNNING" or job.pid is None:
                refusal = UsageError(
                    f"Job {job_id} has already ended ({job.state}); nothing to cancel.")
            elif job.host != jobs.this_host():
                refusal = UsageError(
                    f"Job {job_id} runs on host {job.host}; cancel it there (its process is "
                    "not on this host).")
            auditlog.record(
                db, user=who.name, system=job.system, command="jobs cancel", at=now,
                outcome="ok" if refusal is None else
                "denied" if isinstance(refusal, PermissionDenied) else "refused",
                detail=str(refusal) if refusal else
                f"{jobs.describe(job)}: sent SIGINT to process {job.pid}")
        if refusal is not None:
            raise refusal
        import signal

        try:
            os.kill(int(job.pid or 0), signal.SIGINT)
        except ProcessLookupError:
            pass  # it ended meanwhile: the next reader records it
        except PermissionError as e:
            raise PermissionDenied(
                f"Job {job_id} is another OS user's process; ask {job.user} or run "
                "`jobs cancel` as that user.") from e
        return job

    def finish_job(self, job_id: int, state: str) -> None:
        """Mark a job ended (COMPLETED / FAILED / CANCELLED) and free its nodes; idempotent."""
        if state not in jobs.END_STATES:
            raise UsageError(f"Job state {state!r} is not one of {', '.join(jobs.END_STATES)}.")
        with self.store.transaction() as db:
            now = self._clock()
            job = jobs.get(db, job_id)
            if job is None:
                raise UsageError(f"No job {job_id}; see the running jobs with `system show`.")
            ended = jobs.finish(db, job_id, state, now)
            if ended:  # each system it held logs its end
                for name in job.systems:
                    row = changes.read_row(db, name)
                    auditlog.record(db, user=job.user, system=name, command="job end",
                                    from_state=row.state, to_state=row.state, at=now,
                                    detail=f"job {job_id} {state}")
        if ended:
            _kick_queue(self.store)

    # -- internals --------------------------------------------------------------------------
    def _row(self, db: sqlite3.Connection) -> changes.Row:
        return changes.read_row(db, self.name)

    @staticmethod
    def _boot_due(row: changes.Row, now: float) -> bool:
        return (
            row.state is State.ACTIVATING
            and row.activating_until is not None
            and now >= row.activating_until
        )

    def _settle(self, db: sqlite3.Connection, now: float) -> changes.Row:
        """Inside a write transaction: apply what time has decided (boot done, jobs dead)."""
        row = self._row(db)
        if self._boot_due(row, now):
            to = next_state(row.state, Action.BOOTED)
            updates, detail = changes.boot(db, row, to, now)
            changes.write_row(db, self.name, updates)
            auditlog.record(
                db,
                user=SYSTEM.name,
                system=self.name,
                command="booted",
                from_state=row.state,
                to_state=to,
                detail=detail,
                at=row.activating_until,
            )
            row = self._row(db)
        for job in jobs.dead(db, jobs.running(db, self.name)):
            jobs.finish(db, job.id, "FAILED", now)
            detail = f"job {job.id} FAILED: process {job.pid} on {job.host} no longer exists"
            self._audit_job_end(db, SYSTEM.name, row, now, detail)
        return row

    def _audit_job_end(
        self, db: sqlite3.Connection, user: str, row: changes.Row, now: float, detail: str
    ) -> None:
        """One "job end" audit row: the system's state does not change when a job ends."""
        auditlog.record(
            db,
            user=user,
            system=self.name,
            command="job end",
            from_state=row.state,
            to_state=row.state,
            at=now,
            detail=detail,
        )

    def _refusal(
        self, who: Identity, action: Action, row: changes.Row, now: float
    ) -> CsError | None:
        """Why `who` may not do `action` to `row` now (role first, then state), or None."""
        command = COMMAND_WORDS[action]
        if action in INTERNAL_ACTIONS and who != SYSTEM:
            return PermissionDenied(
                f"Permission denied: `{command}` happens by itself when a "
                "reboot's time has passed; wait for it."
            )
        if action in ADMIN_ACTIONS and who.role is not Role.ADMIN:
            return PermissionDenied(permission_message(who, command))
        ready_in = None if row.activating_until is None else row.activating_until - now
        try:
            next_state(row.state, action, ready_in=ready_in)
        except InvalidTransition as e:
            if self.several:  # in a cluster of several, say which system refused
                return InvalidTransition(f"{self.name}: {e}")
            return e
        if action is Action.BOOTED and ready_in is not None and ready_in > 0:
            return InvalidTransition(
                f"The system is ACTIVATING ({ready_text(ready_in)}); wait for it to become ACTIVE."
            )
        return None

    def _busy_refusal(self, db: sqlite3.Connection) -> CsError | None:
        """An unforced standby with live jobs running (dead ones were settled as FAILED): names
        each job's id (the one `jobs cancel` takes), user and command."""
        running = jobs.running(db, self.name)
        if not running:
            return None
        named = ", ".join(jobs.describe(j) for j in running)
        return InvalidTransition(
            f"System {self.name} has {len(running)} job(s) running: {named}; wait for them to "
            f"finish, cancel them (`jobs cancel {running[0].id}`), or run `system standby "
            "--force` to stop them at their next step (the checkpoints they have written are "
            "kept)."
        )

    def _withdraw_refusal(self, row: changes.Row) -> CsError | None:
        if row.configured_mode is row.active_mode:
            return InvalidTransition(
                f"No mode change is pending on {self.name}: it is configured for "
                f"{row.configured_mode}, the mode it runs in; nothing to withdraw."
            )
        return None

    def _expect_refusal(self, row: changes.Row, expect: ExecMode | None) -> CsError | None:
        if expect is None or row.configured_mode is expect:
            return None
        return InvalidTransition(
            f"{self.name} is configured for {row.configured_mode}, not {expect} as expected, so "
            "it was not rebooted; see who changed it with `audit show`, then run `config execmode "
            f"setup` or activate expecting {row.configured_mode}."
        )

    def _others_refusal(self, db: sqlite3.Connection, row: changes.Row, who: Identity,
                        mode: ExecMode) -> CsError | None:
        """Setting `mode` would replace another account's different pending choice."""
        if row.configured_mode is row.active_mode or mode is row.configured_mode:
            return None
        origin = db.execute(
            "SELECT user, at FROM audit WHERE system = ? AND outcome = 'ok' AND command = ?"
            " AND detail LIKE 'configured %' ORDER BY id DESC LIMIT 1",
            (self.name, COMMAND_WORDS[Action.SETUP]),
        ).fetchone()
        if origin is None or origin[0] == who.name:
            return None
        when = time.strftime("%H:%M:%S", time.localtime(origin[1]))
        return InvalidTransition(
            f"{origin[0]} chose {row.configured_mode} at {when} (pending until `system "
            f"activate`); nothing changed: agree with {origin[0]} first, or replace that choice "
            f"on purpose (`config execmode setup {_mode_word(mode)} --yes`).")

    def _job_refusal(self, row: changes.Row, mode: ExecMode, now: float) -> CsError | None:
        if row.state is not State.ACTIVE:
            ready_in = None if row.activating_until is None else row.activating_until - now
            return JobRefused(
                _JOB_REFUSALS[row.state].format(name=row.name, ready=ready_text(ready_in),
                                                reason=row.fault_reason or "no reason given")
            )
        if row.active_mode is not mode:
            return JobRefused(
                f"System {row.name} is ACTIVE in {row.active_mode} mode but this job needs "
                f"{mode}; launch it with `{LAUNCHERS[row.active_mode]}`, or ask an admin to "
                f"switch modes (`system standby`, `config execmode setup`, `system activate`)."
            )
        return None

    def _systems_refusal(
        self, rows: list[changes.Row], mode: ExecMode, now: float
    ) -> CsError | None:
        """Why a job in `mode` cannot start on these systems (one system: as always; several:
        one sentence naming each that is not ready and what an admin runs for it)."""
        if len(rows) == 1:
            return self._job_refusal(rows[0], mode, now)
        bad = [r for r in rows if self._job_refusal(r, mode, now) is not None]
        if not bad:
            return None
        names = ", ".join(r.name for r in rows)
        problems = "; ".join(f"{r.name} is {_row_text(r, now)} ({_fix_text(r, mode)})"
                             for r in bad)
        return JobRefused(
            f"This job needs {len(rows)} CS-2 systems ACTIVE in {mode} ({names}; num_csx "
            f"{len(rows)} from --cs_ip {rows[0].name}), and {problems}; or start it with "
            "--cs_ip naming other systems (`system list` in cs shows them all)."
        )

    def _held_refusal(
        self, db: sqlite3.Connection, names: tuple[str, ...], job_id: int | None
    ) -> str | None:
        """Why a system of the job is not free: another job (or launch) holds it."""
        held = jobs.holders(db)
        for name in names:
            holder = held.get(name)
            if holder is None or holder == job_id:
                continue
            job = jobs.get(db, holder)
            who = jobs.describe(job) if job is not None else f"job {holder} (a running launch)"
            return (f"System {name} is in use by {who}; wait for it to end (`jobs show`), "
                    f"cancel it (`jobs cancel {holder}`), or start this job on another system "
                    "(--cs_ip).")
        return None

    def _attempt(
        self,
        who: Identity,
        action: Action,
        change: changes.Change | None,
        *,
        force: bool = False,
        expect: ExecMode | None = None,
        keep_others: ExecMode | None = None,
    ) -> SystemStatus:
        """One attempt: settle, decide, then either change + audit "ok" or audit the refusal
        (`change` None only checks: an allowed check writes nothing)."""
        now = self._clock()  # for the "error" row if the transaction cannot even begin
        command = COMMAND_WORDS[action]
        refusal: CsError | None = None
        audit_id: int | None = None
        try:
            with self.store.transaction() as db:
                # The time is read once the write lock is held: a clock read before waiting for
                # the lock is older than what the lock's previous holder committed, and would
                # see a reboot that is already due (CS2_BOOT_SECONDS=0) as "ready in 1 s".
                now = self._clock()
                row = self._settle(db, now)
                refusal = self._refusal(who, action, row, now)
                if refusal is None and action is Action.STANDBY and not force:
                    refusal = self._busy_refusal(db)
                if refusal is None and action is Action.WITHDRAW:
                    refusal = self._withdraw_refusal(row)
                if refusal is None and action is Action.ACTIVATE:
                    refusal = self._expect_refusal(row, expect)
                if refusal is None and keep_others is not None:
                    refusal = self._others_refusal(db, row, who, keep_others)
                outcome: str | None = None  # stays None for a check that passed: no row
                to, detail = row.state, ""
                if refusal is not None:
                    outcome = "denied" if isinstance(refusal, PermissionDenied) else "refused"
                    detail = str(refusal)
                elif change is not None:
                    outcome, to = "ok", next_state(row.state, action)
                    updates, detail = change(db, row, to, now)
                    changes.write_row(db, self.name, updates)
                if outcome is not None:
                    audit_id = auditlog.record(
                        db,
                        user=who.name,
                        system=self.name,
                        command=command,
                        from_state=row.state,
                        to_state=to,
                        outcome=outcome,
                        detail=detail,
                        at=now,
                    )
        except CsError:
            raise
        except Exception as e:  # rolled back; say so in the log, best effort
            try:
                with self.store.transaction() as db:
                    auditlog.record(
                        db,
                        user=who.name,
                        system=self.name,
                        command=command,
                        outcome="error",
                        detail=f"{type(e).__name__}: {e}",
                        at=now,
                    )
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
            raise
        if refusal is not None:
            raise refusal
        return dataclasses.replace(self.status(), audit_id=audit_id)

    # 4. what became of a reboot -------------------------------------------------------------
    def boot_outcome(self, activation_id: int) -> BootOutcome:
        """What happened to this system after the activation audited as row `activation_id`:
        whether its reboot completed (the ``booted`` row) and the state changes since (who,
        when), read from the audit log so a report agrees with it row for row."""
        with self.store.read() as db:
            rows = db.execute(
                "SELECT * FROM audit WHERE id > ? AND system = ? AND outcome = 'ok'"
                " AND (from_state != to_state OR command = 'booted') ORDER BY id",
                (activation_id, self.name),
            ).fetchall()
        changed = [auditlog.AuditEntry(*r) for r in rows]
        if changed and changed[0].command == "booted":
            return BootOutcome(booted=changed[0], since=tuple(changed[1:]))
        return BootOutcome(booted=None, since=tuple(changed))


@dataclass(frozen=True)
class BootOutcome:
    """A reboot's fate: `booted` is the audit row of its completion (None: it did not
    complete); `since` the state changes after it (or, if it did not complete, the one that
    stopped it first), oldest first."""

    booted: AuditEntry | None
    since: tuple[AuditEntry, ...]


# -- the systems, from the cluster description --------------------------------------------------
def _mode_word(mode: ExecMode) -> str:
    return mode.label.lower().replace(" ", "-")


def list_systems(store: Store) -> list[str]:
    """The systems of the cluster, in its order (syncing the store with the file if it changed;
    a shared store's service keeps it in sync with its owner's file)."""
    if getattr(store, "remote", None) is not None:
        with store.read() as db:
            return _names(db)
    source = cluster_source(store.home)
    try:
        st = source.stat()
    except OSError as e:
        raise ConfigError(
            f"cannot read cluster description {source}: {e.strerror}; "
            "fix the path or its permissions."
        ) from e
    key = f"{source}|{st.st_mtime_ns}|{st.st_size}"
    with store.read() as db:
        cached = db.execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()
        if cached and cached[0] == key:
            return _names(db)
    cluster = load_cluster(source)  # only when the file is new or changed
    now = time.time()
    with store.transaction() as db:
        db.execute("UPDATE systems SET in_cluster = 0")
        for position, spec in enumerate(cluster.systems):
            db.execute(
                "INSERT INTO systems (name, ip, model, position, in_cluster, state,"
                " configured_mode, active_mode, state_since) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET ip = excluded.ip, model = excluded.model,"
                " position = excluded.position, in_cluster = 1",
                (
                    spec.name,
                    spec.ip,
                    spec.model,
                    position,
                    str(State.ACTIVE),
                    str(spec.execmode),
                    str(spec.execmode),
                    now,
                ),
            )
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('cluster', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key,),
        )
        return _names(db)


def _names(db: sqlite3.Connection) -> list[str]:
    rows = db.execute("SELECT name FROM systems WHERE in_cluster = 1 ORDER BY position").fetchall()
    return [name for (name,) in rows]


def _kick_queue(store: Store) -> None:
    """A job that ended frees its systems: a launch waiting for them may start now (its launcher
    is woken; best effort, the waiters re-check on their own too)."""
    try:
        from cs2sim.system.sched.queue import kick

        kick(store)
    except CsError:
        pass


def _row_text(row: changes.Row, now: float) -> str:
    """`in STANDBY`, `ACTIVE in PIPELINED mode`, `ACTIVATING (ready in 3 s)`."""
    if row.state is State.ACTIVE:
        return f"ACTIVE in {row.active_mode} mode"
    if row.state is State.ACTIVATING:
        ready_in = None if row.activating_until is None else row.activating_until - now
        return f"ACTIVATING ({ready_text(ready_in)})"
    return f"in {row.state}"


def _fix_text(row: changes.Row, mode: ExecMode) -> str:
    """What an admin runs to make the system ACTIVE in `mode` (`cs --system NAME ...`)."""
    word = mode.label.lower().replace(" ", "-")
    steps: list[str] = []
    if row.state is State.ACTIVATING:
        if row.configured_mode is mode:
            return "wait for it to become ACTIVE"
        steps = ["system standby --yes", f"config execmode setup {word}", "system activate"]
    elif row.state is State.ACTIVE:
        steps = ["system standby --yes", f"config execmode setup {word}", "system activate"]
    else:  # STANDBY, FAULT: a fault is cleared by a standby first (state.py)
        steps = ["system standby --yes"] if row.state is State.FAULT else []
        if row.configured_mode is not mode:
            steps.append(f"config execmode setup {word}")
        steps.append("system activate")
    return f"an admin runs `cs --system {row.name} -c \"{'; '.join(steps)}\"`"
