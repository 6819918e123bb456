"""The embedded scheduler's state: jobs and node allocations in the system store.

Every change is one store transaction (BEGIN IMMEDIATE), so launchers in different terminals
share one FIFO queue without a daemon: whoever touches the queue (submit, poll, finish, the
`jobs` view) runs the scheduling pass inside its transaction and hands free nodes to the oldest
pending jobs; each launcher sees its own job become RUNNING at its next poll.

Liveness, as system/jobs.py does it: a job records its launcher's pid, start tick and host; a
job of this host whose launcher is gone (kill -9) is reaped by the next pass: RUNNING -> FAILED,
PENDING -> CANCELLED, its nodes freed. So no node ever leaks.

The tables are created on first use (`_ensure`) rather than by a store schema bump: they belong
to this package, and a store without them is simply a cluster on which nothing was launched yet.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cs2sim.system.errors import PermissionDenied, ResourceError, UsageError
from cs2sim.system.jobs import process_alive, process_start, this_host
from cs2sim.system.sched.fit import NodeInfo, Pending, fifo_pass, never_fits
from cs2sim.system.sched.request import Component, JobRequest

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = [
    "SCHEMA",
    "QueueJob",
    "NeverFits",
    "cluster_nodes",
    "submit",
    "poll",
    "finish",
    "cancel",
    "jobs",
    "schedule",
]

STATES = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS sched_jobs (
        id INTEGER PRIMARY KEY,                 -- the (het leader) job id
        het_size INTEGER NOT NULL,              -- components: ids id .. id+het_size-1
        name TEXT NOT NULL,
        user TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED')),
        reason TEXT NOT NULL DEFAULT '',
        request TEXT NOT NULL,                  -- JSON: components and excluded nodes
        command TEXT NOT NULL,
        pid INTEGER NOT NULL,                   -- the launcher (srun) process
        pid_start TEXT,
        host TEXT NOT NULL,
        submitted_at REAL NOT NULL,
        started_at REAL,
        ended_at REAL,
        nodes TEXT NOT NULL DEFAULT '[]',       -- JSON: node names per component
        exit_code INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS sched_jobs_by_state ON sched_jobs (state, id)",
    """CREATE TABLE IF NOT EXISTS sched_alloc (
        node TEXT PRIMARY KEY,
        job_id INTEGER NOT NULL
    )""",
)
_COLS = (
    "id, het_size, name, user, state, reason, request, command, pid, host, submitted_at,"
    " started_at, ended_at, nodes, exit_code"
)
_ready: set[str] = set()


@dataclass(frozen=True)
class QueueJob:
    """One job of the queue (a row of `jobs show`)."""

    id: int
    het_size: int
    name: str
    user: str
    state: str
    reason: str
    components: tuple[Component, ...]
    command: str
    pid: int
    host: str
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    nodes: tuple[tuple[str, ...], ...]
    exit_code: int | None

    @property
    def node_count(self) -> int:
        return sum(c.nodes for c in self.components)


def _ensure(store: Store) -> None:
    key = str(store.path)
    if key in _ready:
        return
    with store.read() as db:
        have = db.execute(
            "SELECT count(*) FROM sqlite_master WHERE name IN ('sched_jobs', 'sched_alloc')"
        ).fetchone()[0]
    if have < 2:
        with store.transaction() as db:
            for statement in SCHEMA:
                db.execute(statement)
    _ready.add(key)


def cluster_nodes(store: Store) -> list[NodeInfo]:
    """The cluster's CPU nodes in configured order; the GRES node carries the site's GRES."""
    from cs2sim.system.cluster import cluster_source, load_cluster

    cluster = load_cluster(cluster_source(store.home))
    site = cluster.site
    return [
        NodeInfo(n.name, n.cpus, site.gres_resource if n.name == site.gres_node else "")
        for n in cluster.nodes
    ]


def _encode(request: JobRequest) -> str:
    return json.dumps(
        {
            "components": [
                [c.nodes, c.tasks_per_node, c.cpus_per_task, c.cyclic, c.gres, c.exclusive]
                for c in request.components
            ],
            "exclude": list(request.exclude),
        }
    )


def _decode(text: str) -> tuple[tuple[Component, ...], frozenset[str]]:
    data = json.loads(text)
    comps = tuple(Component(*c) for c in data["components"])
    return comps, frozenset(data.get("exclude", ()))


def _job(row: tuple[object, ...]) -> QueueJob:
    (id_, size, name, user, state, reason, request, command, pid, host, sub, start, end,
     nodes, code) = row
    comps, _ = _decode(str(request))
    return QueueJob(
        int(id_), int(size), str(name), str(user), str(state), str(reason), comps,  # type: ignore[call-overload]
        str(command), int(pid), str(host), float(sub), start, end,  # type: ignore[call-overload,arg-type]
        tuple(tuple(p) for p in json.loads(str(nodes))), code,  # type: ignore[arg-type]
    )


def submit(
    store: Store, request: JobRequest, *, user: str, pid: int | None = None,
    nodes: list[NodeInfo] | None = None, now: float | None = None,
) -> int:
    """Queue `request` (PENDING) and run a pass; its job id. ResourceError (Slurm's
    `Unable to allocate resources: ...` reason + the cluster's size) if it can never fit."""
    _ensure(store)
    nodes = cluster_nodes(store) if nodes is None else nodes
    why = never_fits(request.components, nodes, frozenset(request.exclude))
    if why is not None:
        raise NeverFits(why, _never_fits_hint(why, request, nodes))
    pid = os.getpid() if pid is None else pid
    now = time.time() if now is None else now
    with store.transaction() as db:
        next_id = db.execute("SELECT COALESCE(MAX(id + het_size), 1) FROM sched_jobs").fetchone()[0]
        db.execute(
            f"INSERT INTO sched_jobs ({_COLS.replace(', exit_code', '')}, pid_start)"
            " VALUES (?, ?, ?, ?, 'PENDING', 'None', ?, ?, ?, ?, ?, NULL, NULL, '[]', ?)",
            (next_id, len(request.components), request.job_name, user, _encode(request),
             " ".join(request.command), pid, this_host(), now, process_start(pid)),
        )
        schedule(db, nodes, now)
    return int(next_id)


class NeverFits(ResourceError):
    """The request cannot run even on an idle cluster: Slurm's reason and our one-line hint."""

    def __init__(self, reason: str, hint: str) -> None:
        super().__init__(f"Unable to allocate resources: {reason}; {hint}")
        self.reason = reason
        self.hint = hint


def _never_fits_hint(why: str, request: JobRequest, nodes: list[NodeInfo]) -> str:
    usable = [n for n in nodes if n.name not in request.exclude]
    biggest = max((n.cpus for n in usable), default=0)
    if why.startswith("Node count"):
        hint = (f"this cluster has {len(usable)} usable node(s) and the job asks for "
                f"{request.nodes}: ask for at most {len(usable)} with --total-nodes, or add "
                "nodes to cluster.yaml.")
    else:
        hint = (f"no node of this cluster can hold one of its components (the largest has "
                f"{biggest} cpus, and only one node has the CS-2's GRES): lower "
                "--tasks-per-node x --cpus-per-task.")
    return hint


class _Alive:
    """Launcher liveness, asked at most once per (pid, start) in a pass (a /proc read each)."""

    def __init__(self) -> None:
        self.host = this_host()
        self.seen: dict[tuple[int, str | None], bool] = {}

    def __call__(self, pid: int, start: str | None, host: str) -> bool:
        if host != self.host:
            return True  # another host's launcher: only that host can tell
        key = (pid, start)
        if key not in self.seen:
            self.seen[key] = process_alive(pid, start)
        return self.seen[key]


def _reap(db: sqlite3.Connection, now: float, state: str, alive: _Alive) -> int:
    """End the jobs in `state` whose launcher on this host is gone; how many."""
    rows = db.execute(
        "SELECT id, pid, pid_start, host FROM sched_jobs WHERE state = ? ORDER BY id", (state,)
    ).fetchall()
    n = 0
    for job_id, pid, start, host in rows:
        if not alive(pid, start, host):
            end = "FAILED" if state == "RUNNING" else "CANCELLED"
            db.execute(
                "UPDATE sched_jobs SET state = ?, reason = 'LauncherDied', ended_at = ?"
                " WHERE id = ?", (end, now, job_id))
            db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
            n += 1
    return n


def schedule(db: sqlite3.Connection, nodes: list[NodeInfo], now: float | None = None) -> int:
    """One FIFO pass inside the caller's transaction; how many jobs started.

    Cost: O(nodes) to find the free ones + O(1) per job examined. Dead launchers are reaped
    where it matters: a pending job is checked when the pass reaches it (a dead one is dropped
    and the pass goes on), and running jobs only when the head of the queue does not fit (their
    nodes might be free after all); the view (`jobs()`) reaps everything.
    """
    now = time.time() if now is None else now
    alive = _Alive()
    started, blocked = _pass(db, nodes, now, alive)
    if blocked and _reap(db, now, "RUNNING", alive):
        more, _ = _pass(db, nodes, now, alive)
        started += more
    return started


def _pass(
    db: sqlite3.Connection, nodes: list[NodeInfo], now: float, alive: _Alive
) -> tuple[int, bool]:
    """(jobs started, whether a pending job is left blocking the queue)."""
    held = db.execute("SELECT group_concat(node, char(10)) FROM sched_alloc").fetchone()[0]
    used = set(held.split("\n")) if held else set()
    free = [n for n in nodes if n.name not in used]
    cur = db.execute(
        "SELECT id, request, pid, pid_start, host FROM sched_jobs WHERE state = 'PENDING'"
        " ORDER BY id")
    dead: list[int] = []

    def pending() -> Iterator[Pending]:
        for job_id, request, pid, start, host in cur:
            if not alive(pid, start, host):
                dead.append(job_id)
                continue
            comps, exclude = _decode(request)
            yield Pending(job_id, comps, exclude)

    results = list(fifo_pass(pending(), free))
    cur.close()
    for job_id in dead:
        db.execute(
            "UPDATE sched_jobs SET state = 'CANCELLED', reason = 'LauncherDied', ended_at = ?"
            " WHERE id = ?", (now, job_id))
    started = 0
    blocked = False
    for job, placed in results:
        if placed is None:
            blocked = True
            db.execute(
                "UPDATE sched_jobs SET reason = 'Resources' WHERE id = ? AND reason != "
                "'Resources'", (job.job_id,))
            db.execute(
                "UPDATE sched_jobs SET reason = 'Priority' WHERE state = 'PENDING'"
                " AND id > ? AND reason = 'None'", (job.job_id,))
            continue
        db.execute(
            "UPDATE sched_jobs SET state = 'RUNNING', reason = 'None', started_at = ?,"
            " nodes = ? WHERE id = ?", (now, json.dumps(placed), job.job_id))
        db.executemany(
            "INSERT INTO sched_alloc (node, job_id) VALUES (?, ?)",
            [(n, job.job_id) for part in placed for n in part])
        started += 1
    return started, blocked


def poll(store: Store, job_id: int, nodes: list[NodeInfo]) -> QueueJob:
    """Run a pass and return the job as it stands."""
    with store.transaction() as db:
        schedule(db, nodes)
        row = db.execute(f"SELECT {_COLS} FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise UsageError(f"No job {job_id} in the queue; see `cs -c \"jobs show\"`.")
    return _job(row)


def finish(store: Store, job_id: int, state: str, exit_code: int | None,
           nodes: list[NodeInfo] | None = None) -> None:
    """End a job (COMPLETED / FAILED / CANCELLED), free its nodes, and start what now fits."""
    with store.transaction() as db:
        db.execute(
            "UPDATE sched_jobs SET state = ?, ended_at = ?, exit_code = ?"
            " WHERE id = ? AND state IN ('PENDING', 'RUNNING')",
            (state, time.time(), exit_code, job_id))
        db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
        if nodes is not None:
            schedule(db, nodes)


def cancel(store: Store, job_id: int, *, user: str, admin: bool) -> QueueJob:
    """Cancel a pending or running job (its owner or an admin): CANCELLED, nodes freed, and its
    launcher (on this host) sent SIGTERM so it stops its tasks."""
    _ensure(store)
    with store.transaction() as db:
        row = db.execute(f"SELECT {_COLS} FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise UsageError(f"No job {job_id}; see the queue with `jobs show`.")
        job = _job(row)
        if job.user != user and not admin:
            raise PermissionDenied(
                f"Job {job_id} belongs to {job.user}; only its owner or an admin may cancel it.")
        if job.state not in ("PENDING", "RUNNING"):
            raise UsageError(f"Job {job_id} has already ended ({job.state}); nothing to cancel.")
        db.execute(
            "UPDATE sched_jobs SET state = 'CANCELLED', reason = 'Cancelled', ended_at = ?"
            " WHERE id = ?", (time.time(), job_id))
        db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
        pid_start = db.execute(
            "SELECT pid_start FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()[0]
    if job.host == this_host() and process_alive(job.pid, pid_start) and job.pid != os.getpid():
        try:
            os.kill(job.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    return job


def jobs(store: Store, *, all_states: bool = False, limit: int = 200) -> list[QueueJob]:
    """The queue after a full reap and a pass: pending and running jobs (and, with
    `all_states`, the most recent ended ones), oldest first."""
    _ensure(store)
    nodes = cluster_nodes(store)
    with store.transaction() as db:
        now = time.time()
        alive = _Alive()
        _reap(db, now, "RUNNING", alive)
        _reap(db, now, "PENDING", alive)
        schedule(db, nodes, now)
        where = "" if all_states else "WHERE state IN ('PENDING', 'RUNNING')"
        rows = db.execute(
            f"SELECT {_COLS} FROM (SELECT * FROM sched_jobs {where} ORDER BY id DESC LIMIT ?)"
            " ORDER BY id", (limit,)).fetchall()
    return [_job(r) for r in rows]
