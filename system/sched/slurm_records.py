"""What a launcher records of its Slurm job in the system store (the `slurm_jobs` table).

These are operations of the store (system/store_ops.py): on a shared store the service writes
them in the caller's name with the process it observed, and only over the caller's own rows.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import TYPE_CHECKING

from cs2sim.system import audit
from cs2sim.system.errors import PermissionDenied
from cs2sim.system.sched.queue_rows import COMMAND_MAX, NAME_MAX
from cs2sim.system.store_ops import operation

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = ["SCHEMA", "record_job", "mark_started", "record_end", "recorded_job"]

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS slurm_jobs (
        id INTEGER PRIMARY KEY,  -- Slurm's base job id (component 0)
        het_size INTEGER NOT NULL, name TEXT NOT NULL, user TEXT NOT NULL, command TEXT NOT NULL,
        host TEXT NOT NULL, launcher_pid INTEGER NOT NULL, state TEXT NOT NULL,
        exit_code INTEGER, nodes TEXT NOT NULL DEFAULT '[]',
        submitted_at REAL NOT NULL, started_at REAL, ended_at REAL)""",
)


def _ensure(store: Store) -> None:
    with store.transaction() as db:
        for statement in SCHEMA:
            db.execute(statement)


@operation(
    "slurm.record",
    args={"job_id": int, "het_size": int, "name": str, "command": str},
    fill={"user": "user", "pid": "pid"},
    may="own",
)
def record_job(
    store: Store,
    job_id: int,
    het_size: int,
    name: str,
    command: str,
    *,
    user: str | None = None,
    pid: int | None = None,
) -> None:
    """Record Slurm job `job_id` launched by this process (PENDING)."""
    from cs2sim.system.oslogin import login_name

    _ensure(store)
    user = login_name() if user is None else user
    with store.transaction() as db:
        prior = db.execute("SELECT user FROM slurm_jobs WHERE id = ?", (job_id,)).fetchone()
        if prior is not None and prior[0] != user:
            raise PermissionDenied(
                f"Slurm job {job_id} is recorded as {prior[0]}'s; a launcher "
                "records only its own jobs."
            )
        db.execute(
            "INSERT OR REPLACE INTO slurm_jobs (id, het_size, name, user, command, host, "
            "launcher_pid, state, submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'PENDING', ?)",
            (
                job_id,
                het_size,
                audit.cap(name, NAME_MAX),
                user,
                audit.cap(command, COMMAND_MAX),
                socket.gethostname(),
                os.getpid() if pid is None else pid,
                time.time(),
            ),
        )
        audit.member_change(
            db, user=user, command="slurm record", detail=f"Slurm job {job_id} ({name}): {command}"
        )


def _own(db: sqlite3.Connection, job_id: int, user: str | None) -> None:
    if user is None:
        return
    prior = db.execute("SELECT user FROM slurm_jobs WHERE id = ?", (job_id,)).fetchone()
    if prior is not None and prior[0] != user:
        raise PermissionDenied(f"Slurm job {job_id} is {prior[0]}'s; only its launcher records it.")


@operation("slurm.started", args={"job_id": int}, fill={"user": "user"}, may="own")
def mark_started(store: Store, job_id: int, *, user: str | None = None) -> None:
    """Record that Slurm job `job_id` started."""
    with store.transaction() as db:
        _own(db, job_id, user)
        db.execute(
            "UPDATE slurm_jobs SET state = 'RUNNING', started_at = ? WHERE id = ?",
            (time.time(), job_id),
        )
        if user is not None:
            audit.member_change(
                db, user=user, command="slurm start", detail=f"Slurm job {job_id} RUNNING"
            )


@operation(
    "slurm.ended",
    args={"job_id": int, "state": str, "code": int | None, "nodes": list[list[str]]},
    fill={"user": "user"},
    may="own",
)
def record_end(
    store: Store,
    job_id: int,
    state: str,
    code: int | None,
    nodes: list[list[str]],
    *,
    user: str | None = None,
) -> None:
    """Record how Slurm job `job_id` ended (once)."""
    with store.transaction() as db:
        _own(db, job_id, user)
        db.execute(
            "UPDATE slurm_jobs SET state = ?, exit_code = ?, nodes = ?, ended_at = ? "
            "WHERE id = ? AND ended_at IS NULL",
            (state[:32], code, json.dumps(nodes), time.time(), job_id),
        )
        if user is not None:
            audit.member_change(
                db,
                user=user,
                command="slurm end",
                detail=f"Slurm job {job_id} {state[:32]} ({code})",
            )


@operation("slurm.recorded", args={"job_id": int})
def recorded_job(store: Store, job_id: int) -> dict[str, object] | None:
    """The store's record of a Slurm job this host launched (None if unknown)."""
    with store.read() as db:
        have = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'slurm_jobs'")
        if not have.fetchone()[0]:
            return None
        cur = db.execute("SELECT * FROM slurm_jobs WHERE id = ?", (job_id,))
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row, strict=True))
