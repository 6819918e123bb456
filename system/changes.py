"""What each action writes: one function per action, from the row it reads to the row it leaves.

A change gets (db, row, next state, now) inside the Machine's write transaction and returns the
column updates and the audit detail; it never commits and never decides legality (state.py does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cs2sim.system import jobs
from cs2sim.system.errors import StoreError
from cs2sim.system.state import ExecMode, State

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "Row",
    "Change",
    "read_row",
    "write_row",
    "standby",
    "activate",
    "setup",
    "withdraw",
    "fault",
    "boot",
]


@dataclass(frozen=True)
class Row:
    """The systems-table row of one system."""

    name: str
    ip: str
    state: State
    configured_mode: ExecMode
    active_mode: ExecMode
    state_since: float
    activating_until: float | None
    fault_reason: str | None


ROW_SQL = (
    "SELECT name, ip, state, configured_mode, active_mode, state_since, activating_until,"
    " fault_reason FROM systems WHERE name = ?"
)

# A change: (db, row, next state, now) -> (column updates, audit detail).
Updates = dict[str, Any]
Change = Callable[["sqlite3.Connection", Row, State, float], tuple[Updates, str]]


def read_row(db: sqlite3.Connection, name: str) -> Row:
    """The systems-table row of system `name`."""
    r = db.execute(ROW_SQL, (name,)).fetchone()
    try:
        return Row(r[0], r[1], State(r[2]), ExecMode(r[3]), ExecMode(r[4]), r[5], r[6], r[7])
    except (ValueError, TypeError) as e:  # a value forced past the schema's CHECK constraints
        raise StoreError(
            f"the system store at {_path(db)} holds a row for system {name} that no cs2sim "
            f"writes ({str(e)[:120]}); restore the store from a backup, or move it aside."
        ) from None


def _path(db: sqlite3.Connection) -> str:
    """The database file of a connection (for a message)."""
    try:
        return str(db.execute("PRAGMA database_list").fetchone()[2])
    except Exception:  # noqa: BLE001 - only a message depends on it
        return "?"


def write_row(db: sqlite3.Connection, name: str, updates: Updates) -> None:
    """Apply a change's column updates to system `name` (column names are ours, not input)."""
    if not updates:
        return
    columns = ", ".join(f"{column} = ?" for column in updates)
    values = [str(v) if isinstance(v, (State, ExecMode)) else v for v in updates.values()]
    db.execute(f"UPDATE systems SET {columns} WHERE name = ?", (*values, name))


def standby(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
    """STANDBY now; the detail says a standby was forced and names the jobs that were running
    (each stops itself at its next step)."""
    running = jobs.running(db, row.name)
    detail = (  # with jobs running only --force gets here: the row says it was forced
        f"forced: {len(running)} job(s) running, stopped at their next step: "
        + ", ".join(str(j.id) for j in running)
        if running
        else "no jobs running"
    )
    if row.state is State.FAULT:
        detail += f"; cleared fault: {row.fault_reason}"
    return {"state": to, "state_since": now, "activating_until": None, "fault_reason": None}, detail


def activate(seconds: float) -> Change:
    """Start the reboot: ACTIVATING until now + seconds (the active mode is unchanged yet)."""

    def change(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
        detail = (
            f"rebooting into {row.configured_mode} (firmware {row.configured_mode.firmware})"
            f", ready in {seconds:g} s"
        )
        if row.configured_mode != row.active_mode:
            detail += f"; mode change from {row.active_mode}"
        return {"state": to, "state_since": now, "activating_until": now + seconds}, detail

    return change


def setup(mode: ExecMode) -> Change:
    """Record the configured mode; the same mode again is a no-op (still audited)."""

    def change(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
        if mode == row.configured_mode:
            return {}, f"{mode} is already configured; nothing changed"
        detail = f"configured {mode} (was {row.configured_mode})"
        if mode != row.active_mode:
            detail += "; takes effect at the next `system activate`"
        return {"configured_mode": mode}, detail

    return change


def withdraw(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
    """Take a pending mode change back: the configured mode is the active one again (the
    machine refuses first when nothing is pending)."""
    detail = f"withdrew {row.configured_mode}; configured {row.active_mode} again (the active mode)"
    return {"configured_mode": row.active_mode}, detail


def fault(reason: str) -> Change:
    """FAULT now, with its reason (cleared by the next standby)."""

    def change(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
        updates: Updates = {
            "state": to,
            "state_since": now,
            "activating_until": None,
            "fault_reason": reason,
        }
        return updates, reason

    return change


def boot(db: sqlite3.Connection, row: Row, to: State, now: float) -> tuple[Updates, str]:
    """The reboot completes: ACTIVE in the configured mode, since the moment it was due."""
    since = row.activating_until if row.activating_until is not None else now
    mode = row.configured_mode
    updates = {"state": to, "active_mode": mode, "state_since": since, "activating_until": None}
    return updates, f"booted into {mode} (firmware {mode.firmware})"
