"""Jobs that run on a system, and the nodes they hold.

A job is registered by its launcher (pid, host, nodes) when it starts and finished by it when it
ends. Its id is the one the user sees everywhere: a job launched through a scheduler is
registered under the scheduler's job id (SLURM_JOB_ID, the id `jobs show` lists and `jobs cancel`
takes); one started without a launcher gets the next id of the same sequence as the embedded
queue's (system/sched/queue.py), so the two never collide. A launcher killed with SIGKILL cannot
finish its job, so liveness is read lazily, like
ACTIVATING: a RUNNING job on this host whose process no longer exists (or is a zombie, or whose
pid now belongs to a younger process) is marked FAILED by the next reader, and its nodes freed.
These functions work inside the caller's transaction; system/machine.py is the entry point.

A job holds its CS-2 systems exclusively: `systems` lists them (the first is `system`, the one
its --cs_ip names; a weight-streaming job over num_csx systems holds num_csx). A system is held
while a live record says so: a RUNNING job here, or a RUNNING launch of the embedded queue whose
request reserved it (system/sched/queue.py, its `systems` column), so a launched job holds its
systems from the moment the queue starts it, before its chief registers it (`holders`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cs2sim.system import procfs
from cs2sim.system.state import ExecMode
from cs2sim.system.store_ops import wire

if TYPE_CHECKING:
    import sqlite3

__all__ = [
    "Job",
    "JOB_STATES",
    "END_STATES",
    "this_host",
    "process_start",
    "process_alive",
    "running",
    "dead",
    "insert",
    "finish",
    "get",
    "next_id",
    "pid_start",
    "describe",
    "holders",
    "on_system",
    "node_conflict",
    "has_column",
]

JOB_STATES = ("RUNNING", "COMPLETED", "FAILED", "CANCELLED")
END_STATES = ("COMPLETED", "FAILED", "CANCELLED")
_COLUMNS = "id, system, user, mode, command, state, pid, host, started_at, ended_at, nodes, systems"


@wire
@dataclass(frozen=True)
class Job:
    """A job registered on a system."""

    id: int
    system: str
    user: str
    mode: ExecMode
    command: str
    state: str  # one of JOB_STATES
    pid: int | None
    host: str
    started_at: float
    ended_at: float | None
    nodes: tuple[str, ...]
    systems: tuple[str, ...] = ()  # every CS-2 system it holds, `system` first


def this_host() -> str:
    """The host name jobs started here are recorded with."""
    import socket  # lazy: only jobs need it

    return socket.gethostname()


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux /proc), None if unknown."""
    st = procfs.read_stat(pid)
    return st.starttime if st is not None else None


def process_alive(pid: int, start: str | None = None) -> bool:
    """True if `pid` exists, is not a zombie, and (if known) started at `start`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    st = procfs.read_stat(pid)
    if st is None:
        return not procfs.available()  # no /proc (not Linux): os.kill is all we know
    if st.state == "Z":
        return False  # exited, not yet reaped by its parent
    return start is None or st.starttime == start


def _job(row: tuple[Any, ...]) -> Job:
    try:
        return _read_job(row)
    except (ValueError, TypeError, AttributeError) as e:  # forced past the schema's checks
        from cs2sim.system.errors import StoreError

        raise StoreError(
            f"the system store holds a row for job {str(row[0])[:20]} that no cs2sim writes "
            f"({str(e)[:120]}); restore the store from a backup, or move it aside."
        ) from None


def _read_job(row: tuple[Any, ...]) -> Job:
    (id_, system, user, mode, command, state, pid, host, started, ended, nodes, held) = row
    return Job(
        id_,
        system,
        user,
        ExecMode(mode),
        command,
        state,
        pid,
        host,
        started,
        ended,
        tuple(n for n in nodes.split(",") if n),
        tuple(n for n in held.split(",") if n) or (system,),
    )


ON_SYSTEM = "(system = ? OR ',' || systems || ',' LIKE '%,' || ? || ',%')"  # holds it


def on_system(system: str) -> tuple[str, tuple[str, str]]:
    """The WHERE clause (and its parameters) of the jobs that hold `system`."""
    return ON_SYSTEM, (system, system)


def running(db: sqlite3.Connection, system: str) -> list[Job]:
    """The jobs recorded as RUNNING on `system` (among the systems they hold), oldest first
    (no liveness check)."""
    rows = db.execute(
        f"SELECT {_COLUMNS} FROM jobs WHERE state = 'RUNNING' AND {ON_SYSTEM} ORDER BY id",
        (system, system),
    ).fetchall()
    return [_job(row) for row in rows]


def holders(db: sqlite3.Connection, *, alive: bool = True) -> dict[str, int]:
    """System name -> the id of the job holding it: RUNNING jobs of this table (with `alive`,
    not those of this host whose process is gone: the next reader of their system marks them
    FAILED) and RUNNING launches of the embedded queue that reserved systems."""
    held: dict[str, int] = {}
    rows = db.execute(
        "SELECT id, system, systems FROM jobs WHERE state = 'RUNNING' ORDER BY id"
    ).fetchall()
    gone: set[int] = set()
    if alive and rows:
        running = [job for r in rows if (job := get(db, r[0])) is not None]  # None: deleted since
        gone = {j.id for j in dead(db, running)}
    for job_id, system, systems in rows:
        if job_id not in gone:
            for name in systems.split(",") if systems else [system]:
                held.setdefault(name, job_id)
    if has_column(db, "sched_jobs", "systems"):
        for job_id, systems in db.execute(
            "SELECT id, systems FROM sched_jobs WHERE state = 'RUNNING' AND systems != ''"
            " ORDER BY id"
        ):
            for name in systems.split(","):
                held.setdefault(name, job_id)
    return held


def has_column(db: sqlite3.Connection, table: str, column: str) -> bool:
    """Whether `table` has `column` (read from its CREATE statement: a member of a shared store
    may not run PRAGMAs, system/store_service.py)."""
    row = db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
    ).fetchone()
    return bool(row) and f" {column} " in str(row[0]).replace("\n", " ")


def get(db: sqlite3.Connection, job_id: int) -> Job | None:
    """The job with this id, or None."""
    row = db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return _job(row) if row else None


def dead(db: sqlite3.Connection, jobs: list[Job]) -> list[Job]:
    """The RUNNING jobs of this host whose process is gone."""
    if not any(job.state == "RUNNING" for job in jobs):
        return []  # the common case: skip this_host() (socket import) on every shell start
    host = this_host()
    out = []
    for job in jobs:
        if job.state == "RUNNING" and job.pid is not None and job.host == host:
            start = db.execute("SELECT pid_start FROM jobs WHERE id = ?", (job.id,)).fetchone()
            if not process_alive(job.pid, start[0] if start else None):
                out.append(job)
    return out


def insert(
    db: sqlite3.Connection,
    *,
    system: str,
    user: str,
    mode: ExecMode,
    command: str,
    pid: int,
    nodes: tuple[str, ...],
    now: float,
    job_id: int | None = None,
    systems: tuple[str, ...] = (),
) -> tuple[Job | None, str | None]:
    """Record a RUNNING job (under `job_id` if given and free, else the next id) and allocate
    its nodes; (None, why) if a node is taken. `systems`: every system it holds (default:
    `system` alone); the caller has checked that they are free."""
    taken = node_conflict(db, nodes)
    if taken:
        return None, taken
    host = this_host()
    if job_id is None or get(db, job_id) is not None:
        job_id = next_id(db)
    db.execute(
        "INSERT INTO jobs (id, system, user, mode, command, state, pid, pid_start, host,"
        " started_at, nodes, systems) VALUES (?, ?, ?, ?, ?, 'RUNNING', ?, ?, ?, ?, ?, ?)",
        (
            job_id,
            system,
            user,
            str(mode),
            command,
            pid,
            process_start(pid),
            host,
            now,
            ",".join(nodes),
            ",".join(systems) if len(systems) > 1 else "",
        ),
    )
    db.executemany(
        "INSERT INTO allocations (node, job_id) VALUES (?, ?)", [(node, job_id) for node in nodes]
    )
    return get(db, job_id), None


def node_conflict(db: sqlite3.Connection, nodes: tuple[str, ...]) -> str | None:
    """Why these nodes cannot be allocated (a bad name, a node another job holds), or None."""
    for node in nodes:
        if "," in node or not node:
            return f"Invalid node name {node!r}; node names are non-empty, without commas."
        holder = db.execute("SELECT job_id FROM allocations WHERE node = ?", (node,)).fetchone()
        if holder:
            return (
                f"Node {node} is allocated to job {holder[0]}; wait for it to finish "
                "or choose other nodes."
            )
    return None


def next_id(db: sqlite3.Connection) -> int:
    """The next id of the sequence this table shares with the embedded queue (sched_jobs, whose
    heterogeneous jobs hold one id per component)."""
    ours = db.execute("SELECT COALESCE(MAX(id) + 1, 1) FROM jobs").fetchone()[0]
    has_queue = db.execute(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sched_jobs'"
    ).fetchone()[0]
    queued = 1
    if has_queue:
        queued = db.execute("SELECT COALESCE(MAX(id + het_size), 1) FROM sched_jobs").fetchone()[0]
    return int(max(ours, queued))


def pid_start(db: sqlite3.Connection, job_id: int) -> str | None:
    """The recorded start time of a job's process (None if unknown)."""
    row = db.execute("SELECT pid_start FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def describe(job: Job) -> str:
    """`job 12 (alice: python-ws run.py ...)`: how a message names a job."""
    return f"job {job.id} ({job.user}: {job.command})"


def finish(db: sqlite3.Connection, job_id: int, state: str, now: float | None = None) -> bool:
    """Mark a RUNNING job ended in `state` and free its nodes; False if it was not RUNNING."""
    if state not in END_STATES:
        raise ValueError(f"job end state {state!r} is not one of {END_STATES}")
    cur = db.execute(
        "UPDATE jobs SET state = ?, ended_at = ? WHERE id = ? AND state = 'RUNNING'",
        (state, time.time() if now is None else now, job_id),
    )
    db.execute("DELETE FROM allocations WHERE job_id = ?", (job_id,))
    return cur.rowcount == 1
