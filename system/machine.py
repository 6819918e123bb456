"""The machine: one CS-2 system as every other layer sees it (the facade over system/).

Rules this file keeps:

1. Every attempt to change the system is ONE ``BEGIN IMMEDIATE`` transaction that re-reads the
   state inside it, asks state.py (the transition table and every refusal rule beside it),
   writes the change and its audit row, and commits; two processes racing cannot both win.
2. A denied (role) or refused (state) attempt writes only its audit row and changes nothing else.
   An attempt that fails midway is rolled back and audited as "error" afterwards.
3. Time-based facts are resolved by whoever reads next, inside a write transaction: a reboot
   whose time has passed becomes ACTIVE (audited as ``booted`` by ``system``), a RUNNING job whose
   process is gone becomes FAILED. No daemon; a killed shell cannot leave the machine half-booted.
4. Each public method that reads or changes the store is an operation of the store
   (system/store_ops.py): on a shared store a member's call runs this same method in the
   owner's store service, as the account the service observed.

The parts: the systems of the cluster (system/systems.py), the jobs on a machine
(system/machine_jobs.py, a part of Machine), what each change writes (system/changes.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from cs2sim.system import audit as auditlog
from cs2sim.system import changes, jobs, knobs
from cs2sim.system.cluster import Cluster, cluster_source, load_cluster
from cs2sim.system.errors import ConfigError, CsError, PermissionDenied, UsageError
from cs2sim.system.machine_jobs import JobsOfMachine
from cs2sim.system.state import (
    LAUNCHERS,
    Action,
    ExecMode,
    State,
    action_refusal,
    busy_refusal,
    expect_refusal,
    next_state,
    others_refusal,
    withdraw_refusal,
)
from cs2sim.system.store_ops import operation, receiver, wire
from cs2sim.system.systems import list_systems, system_addresses
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


def boot_seconds() -> float:
    """How long a reboot (ACTIVATING) takes: $CS2_BOOT_SECONDS, default 5.0."""
    text = knobs.text("CS2_BOOT_SECONDS")
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


@wire
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


class Machine(JobsOfMachine):
    """One CS-2 system: read its status, change its state, run jobs on it."""

    def __init__(
        self, store: Store, system: str | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self._clock = clock  # injectable so tests can let time pass without sleeping
        addresses = system_addresses(store)
        names = [n for n, _ in addresses]
        if system is None:
            system = names[0]
        elif system not in names:
            raise UsageError(f"Unknown system {system!r}; known systems: {', '.join(names)}.")
        self.name = system
        self.several = len(names) > 1  # refusals then say which system they are about
        self.ip = dict(addresses)[system]

    # 1. reading --------------------------------------------------------------------------
    @operation("system.status", receiver="machine", args={"system": str})
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
    @operation(
        "system.check",
        receiver="machine",
        args={"system": str, "action": Action, "force": bool},
        fill={"who": "identity"},
    )
    def check(self, who: Identity, action: Action, *, force: bool = False) -> None:
        """Raise PermissionDenied / InvalidTransition if `who` cannot do `action` now.

        Changes no state, so the shell can refuse BEFORE asking for confirmation. A refusal is
        audited: it is the user's attempt. `force`: as for `standby`.
        """
        self._attempt(who, Action(action), None, force=force)

    @operation(
        "system.standby",
        receiver="machine",
        args={"system": str, "force": bool},
        fill={"who": "identity"},
        may="admin",
    )
    def standby(self, who: Identity, *, force: bool = False) -> SystemStatus:
        """Put the system in STANDBY; refused while jobs run unless `force` (the jobs then stop
        at their next step, keeping their last checkpoint; the audit counts them)."""
        return self._attempt(who, Action.STANDBY, changes.standby, force=force)

    @operation(
        "system.activate",
        receiver="machine",
        args={"system": str, "expect": ExecMode | None},
        fill={"who": "identity"},
        may="admin",
    )
    def activate(self, who: Identity, *, expect: ExecMode | None = None) -> SystemStatus:
        """Reboot into the configured mode: ACTIVATING for boot_seconds(), then ACTIVE. With
        `expect`, refused (and audited) unless the configured mode is `expect` at the moment of
        the change: what a person confirmed, or a script asserted, is what boots."""
        seconds = boot_seconds()  # a bad $CS2_BOOT_SECONDS fails before anything is attempted
        return self._attempt(
            who,
            Action.ACTIVATE,
            changes.activate(seconds),
            expect=None if expect is None else ExecMode(expect),
        )

    @operation(
        "system.setup",
        receiver="machine",
        args={"system": str, "mode": ExecMode, "keep_others": bool},
        fill={"who": "identity"},
        may="admin",
    )
    def setup_execmode(
        self, who: Identity, mode: ExecMode, *, keep_others: bool = False
    ) -> SystemStatus:
        """Record the configured mode (STANDBY only); it takes effect at the next activation.
        With `keep_others`, refused (audited) when it would replace a different pending choice
        another account made: decided in the transaction, so a choice made meanwhile counts."""
        mode = ExecMode(mode)
        return self._attempt(
            who, Action.SETUP, changes.setup(mode), keep_others=mode if keep_others else None
        )

    @operation(
        "system.declined",
        receiver="machine",
        args={"system": str, "action": Action, "question": str},
        fill={"who": "identity"},
    )
    def record_declined(self, who: Identity, action: Action, question: str) -> None:
        """Audit an attempt that its user called off at a confirmation question (answered no):
        every attempt leaves a row, outcome "refused", nothing changed."""
        with self.store.transaction() as db:
            now = self._clock()
            row = self._settle(db, now)
            auditlog.record(
                db,
                user=who.name,
                system=self.name,
                command=COMMAND_WORDS[Action(action)],
                from_state=row.state,
                to_state=row.state,
                outcome="refused",
                detail=f"answered no to {question[:200]!r}; nothing changed",
                at=now,
            )

    @operation(
        "system.withdraw",
        receiver="machine",
        args={"system": str},
        fill={"who": "identity"},
        may="admin",
    )
    def withdraw_execmode(self, who: Identity) -> SystemStatus:
        """Take back a pending mode change (STANDBY only): the active mode is configured again.
        Refused (audited) when no change is pending."""
        return self._attempt(who, Action.WITHDRAW, changes.withdraw)

    @operation("system.mode_origin", receiver="machine", args={"system": str})
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

    def _pending_origin(self, db: sqlite3.Connection) -> tuple[str, float] | None:
        """Who made the configured mode's last accepted choice, and when (None: nobody)."""
        found = db.execute(
            "SELECT user, at FROM audit WHERE system = ? AND outcome = 'ok' AND command = ?"
            " AND detail LIKE 'configured %' ORDER BY id DESC LIMIT 1",
            (self.name, COMMAND_WORDS[Action.SETUP]),
        ).fetchone()
        return None if found is None else (str(found[0]), float(found[1]))

    @operation("system.last_activation", receiver="machine", args={"system": str})
    def last_activation(self) -> AuditEntry | None:
        """The audit row of this system's last accepted `system activate`, or None."""
        with self.store.read() as db:
            row = db.execute(
                "SELECT * FROM audit WHERE system = ? AND outcome = 'ok' AND command = ?"
                " ORDER BY id DESC LIMIT 1",
                (self.name, COMMAND_WORDS[Action.ACTIVATE]),
            ).fetchone()
        return auditlog.AuditEntry(*row) if row else None

    @operation(
        "system.fault",
        receiver="machine",
        args={"system": str, "reason": str},
        fill={"who": "identity"},
        may="admin",
    )
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
                refusal = self._refusal(db, row, now, who, action, force, expect, keep_others)
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
            self._record_error(who, command, e, now)
            raise
        if refusal is not None:
            raise refusal
        return dataclasses.replace(self.status(), audit_id=audit_id)

    def _refusal(
        self,
        db: sqlite3.Connection,
        row: changes.Row,
        now: float,
        who: Identity,
        action: Action,
        force: bool,
        expect: ExecMode | None,
        keep_others: ExecMode | None,
    ) -> CsError | None:
        """The first rule (state.py) that refuses `action` now, or None: the transition table
        and the caller's rights, then a standby's running jobs (unless forced), a withdraw's
        pending change, an activation's expected mode, the other systems' modes."""
        command = COMMAND_WORDS[action]
        refusal = action_refusal(
            action,
            row,
            now,
            command=command,
            by_clock=who == SYSTEM,
            is_admin=who.role is Role.ADMIN,
            denied=permission_message(who, command),
            several=self.several,
        )
        if refusal is None and action is Action.STANDBY and not force:
            refusal = busy_refusal(
                self.name, [(j.id, jobs.describe(j)) for j in jobs.running(db, self.name)]
            )
        if refusal is None and action is Action.WITHDRAW:
            refusal = withdraw_refusal(row)
        if refusal is None and action is Action.ACTIVATE:
            refusal = expect_refusal(row, expect)
        if refusal is None and keep_others is not None:
            refusal = others_refusal(row, keep_others, who.name, self._pending_origin(db))
        return refusal

    def _record_error(self, who: Identity, command: str, e: Exception, now: float) -> None:
        """An "error" audit row for a change that failed inside its transaction (rolled back),
        best effort: the original error matters more."""
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

    # 4. what became of a reboot -------------------------------------------------------------
    @operation(
        "system.boot_outcome", receiver="machine", args={"system": str, "activation_id": int}
    )
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


# A member's Machine operations run on a Machine the service builds over its own store.
receiver("machine", lambda store, system: Machine(store, system))


@wire
@dataclass(frozen=True)
class BootOutcome:
    """A reboot's fate: `booted` is the audit row of its completion (None: it did not
    complete); `since` the state changes after it (or, if it did not complete, the one that
    stopped it first), oldest first."""

    booted: AuditEntry | None
    since: tuple[AuditEntry, ...]
