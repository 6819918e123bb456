"""The embedded scheduler's state: jobs and node allocations in the system store.

Every change is one store transaction (BEGIN IMMEDIATE), so launchers in different terminals
share one FIFO queue without a daemon: whoever changes the queue (submit, finish, cancel, the
`jobs` view) runs the scheduling pass inside its transaction and hands free nodes to the oldest
pending jobs, then wakes the launchers of the jobs it started (system/sched/wake.py). A waiting
launcher sleeps until then: it never polls a locked transaction.

Order: strict FIFO by job id. The oldest pending job that does not fit blocks every job behind
it, even one that would fit now; this is what Slurm's main scheduler does, and what its backfill
also does for jobs without a time limit (they cannot be proven to end before the blocked job
could start). Job ids are shared with the system's jobs (system/jobs.py): a job launched here
and registered on a CS-2 by its chief has ONE id, the one `jobs show` lists.

Liveness, as system/jobs.py does it: a job records its launcher's pid, start tick, uid and host
(on a shared store, those of the process the store service verified as the caller, at that
moment); a job of this host whose launcher is gone (kill -9) is reaped by the next pass:
RUNNING -> FAILED, PENDING -> CANCELLED, its nodes freed. So no node ever leaks.

`jobs cancel` decides and records in the store, then signals the launcher from the canceller's
OWN process (never from the store service, on anyone's behalf), through a pidfd and only while
the launcher is the process recorded (system/procfs.py `signal_recorded`); a launcher the
canceller may not signal sees its job CANCELLED within half a second and stops by itself.

Bounded: a job's name is kept to `NAME_MAX` characters and its command to `COMMAND_MAX` (cut and
marked), so one submission cannot make `jobs show` unreadable for everyone.

The tables are created on first use (`_ensure`) rather than by a store schema bump: they belong
to this package, and a store without them is simply a cluster on which nothing was launched yet.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cs2sim.system import audit, procfs
from cs2sim.system.errors import (
    CsError,
    InvalidTransition,
    NoSuchJob,
    PermissionDenied,
    ResourceError,
    UsageError,
)
from cs2sim.system.jobs import (
    has_column,
    next_id,
    this_host,
)
from cs2sim.system.sched.fit import NodeInfo, never_fits
from cs2sim.system.sched.queue_rows import (
    COLS,
    COMMAND_MAX,
    NAME_MAX,
    MalformedRow,
    QueueJob,
    check_request,
    encode_request,
    one,
    readable,
)
from cs2sim.system.sched.request import JobRequest
from cs2sim.system.sched.scheduling import Alive, reap, schedule
from cs2sim.system.store_ops import operation, process_of, wire

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = [
    "SCHEMA",
    "QueueJob",
    "MalformedRow",
    "NeverFits",
    "NotQueued",
    "cluster_nodes",
    "submit",
    "poll",
    "finish",
    "cancel",
    "jobs",
    "listing",
    "Listing",
    "schedule",
    "state",
    "recheck",
    "kick",
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
        exit_code INTEGER,
        systems TEXT NOT NULL DEFAULT '',       -- CS-2 systems it holds while RUNNING
        pid_uid INTEGER                         -- the uid the launcher runs as
    )""",
    "CREATE INDEX IF NOT EXISTS sched_jobs_by_state ON sched_jobs (state, id)",
    """CREATE TABLE IF NOT EXISTS sched_alloc (
        node TEXT PRIMARY KEY,
        job_id INTEGER NOT NULL
    )""",
)
_ready: set[str] = set()  # stores whose queue tables this process has checked


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
    else:  # a queue made before jobs reserved CS-2 systems (or recorded uids) gets the column
        with store.read() as db:
            missing = [c for c in _ADDED if not has_column(db, "sched_jobs", c)]
        if missing:
            with store.transaction() as db:
                for column in missing:
                    if not has_column(db, "sched_jobs", column):
                        db.execute(f"ALTER TABLE sched_jobs ADD COLUMN {column} {_ADDED[column]}")
    _ready.add(key)


_ADDED = {"systems": "TEXT NOT NULL DEFAULT ''", "pid_uid": "INTEGER"}


def cluster_nodes(store: Store) -> list[NodeInfo]:
    """The cluster's CPU nodes in configured order; the GRES node carries the site's GRES."""
    from cs2sim.system.cluster import cluster_source, gres_nodes, load_cluster

    cluster = load_cluster(cluster_source(store.home))
    site = cluster.site
    wired = gres_nodes(site)
    return [
        NodeInfo(n.name, n.cpus, site.gres_resource if n.name in wired else "")
        for n in cluster.nodes
    ]


@operation(
    "queue.submit",
    args={"request": JobRequest},
    fill={"user": "user", "pid": "pid", "nodes": "nodes", "now": "none"},
    may="own",
)
def submit(
    store: Store,
    request: JobRequest,
    *,
    user: str,
    pid: int | None = None,
    nodes: list[NodeInfo] | None = None,
    now: float | None = None,
) -> int:
    """Queue `request` (PENDING) and run a pass; its job id. ResourceError (Slurm's
    `Unable to allocate resources: ...` reason + the cluster's size) if it can never fit."""
    _ensure(store)
    check_request(request)
    nodes = cluster_nodes(store) if nodes is None else nodes
    why = never_fits(request.components, nodes, frozenset(request.exclude))
    if why is not None:
        raise NeverFits(why, _never_fits_hint(why, request, nodes))
    pid = os.getpid() if pid is None else pid
    proc = process_of(pid)  # verified now (the service: still the process that connected)
    now = time.time() if now is None else now
    name = audit.cap(request.job_name, NAME_MAX)
    command = audit.cap(" ".join(request.command), COMMAND_MAX)
    woken: list[int] = []
    with store.transaction() as db:
        next_id = next_job_id(db)
        db.execute(
            f"INSERT INTO sched_jobs ({COLS.replace(', exit_code', '')}, pid_start, pid_uid)"
            " VALUES (?, ?, ?, ?, 'PENDING', 'None', ?, ?, ?, ?, ?, NULL, NULL, '[]', ?, ?, ?)",
            (
                next_id,
                len(request.components),
                name,
                user,
                encode_request(request),
                command,
                pid,
                this_host(),
                now,
                ",".join(request.systems),
                None if proc is None else proc.start,
                None if proc is None else proc.uid,
            ),
        )
        audit.member_change(
            db, user=user, command="launch submit", detail=f"job {next_id} ({name}): {command}"
        )
        schedule(db, nodes, now, woken)
    _wake(store, [j for j in woken if j != next_id])
    return int(next_id)


def next_job_id(db: sqlite3.Connection) -> int:
    """The next job id, above every queue job (and its het components) and every system job, so
    a launched job keeps its queue id when its chief registers it on a CS-2 (system/jobs.py)."""
    return next_id(db)


def _wake(store: Store, job_ids: list[int]) -> None:
    """Wake the launchers of jobs a committed pass decided (best effort: a hint, see wake.py)."""
    if job_ids:
        from cs2sim.system.sched.wake import wake

        with contextlib.suppress(OSError):
            wake(store.home, job_ids)


class NotQueued(UsageError):
    """No job of the queue has this id (it may still be a job started without a launcher)."""


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
        hint = (
            f"this cluster has {len(usable)} usable node(s) and the job asks for "
            f"{request.nodes}: ask for at most {len(usable)} with --total-nodes, or add "
            "nodes to cluster.yaml."
        )
    else:
        hint = (
            f"no node of this cluster can hold one of its components (the largest has "
            f"{biggest} cpus, and only one node has the CS-2's GRES): lower "
            "--tasks-per-node x --cpus-per-task."
        )
    return hint


@operation("queue.poll", args={"job_id": int}, fill={"nodes": "nodes"})
def poll(store: Store, job_id: int, nodes: list[NodeInfo]) -> QueueJob:
    """Run a pass and return the job as it stands."""
    woken: list[int] = []
    with store.transaction() as db:
        schedule(db, nodes, None, woken)
        row = db.execute(f"SELECT {COLS} FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
    _wake(store, [j for j in woken if j != job_id])
    if row is None:
        raise NoSuchJob(f'No job {job_id} in the queue; see `cs -c "jobs show"`.')
    return one(row, job_id)


@operation("queue.kick", args={})
def kick(store: Store) -> None:
    """Run a pass if launches are waiting (something they wait for may be free now: a CS-2
    system whose job ended outside the queue) and wake the launchers of the jobs it starts."""
    with store.read() as db:
        has = db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'sched_jobs'").fetchone()[
            0
        ]
        waiting = (
            has
            and db.execute("SELECT 1 FROM sched_jobs WHERE state = 'PENDING' LIMIT 1").fetchone()
        )
    if not waiting:
        return
    _ensure(store)
    woken: list[int] = []
    with store.transaction() as db:
        schedule(db, cluster_nodes(store), None, woken)
    _wake(store, woken)


@operation(
    "queue.finish",
    args={"job_id": int, "state": str, "exit_code": int | None},
    fill={"nodes": "nodes", "user": "user", "admin": "admin"},
    may="owner-or-admin",
)
def finish(
    store: Store,
    job_id: int,
    state: str,
    exit_code: int | None,
    nodes: list[NodeInfo] | None = None,
    *,
    user: str | None = None,
    admin: bool = False,
) -> None:
    """End a job (COMPLETED / FAILED / CANCELLED), free its nodes, and start what now fits (the
    launchers of the jobs that start are woken). `user`: the account asking (a shared store's
    member): only the job's owner or an admin may end it (None: this process launched it)."""
    if state not in ("COMPLETED", "FAILED", "CANCELLED"):
        raise UsageError(f"Job state {state!r} is not COMPLETED, FAILED or CANCELLED.")
    nodes = cluster_nodes(store) if nodes is None else nodes
    woken: list[int] = []
    with store.transaction() as db:
        if user is not None and not admin:
            owner = db.execute("SELECT user FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
            if owner is not None and owner[0] != user:
                raise PermissionDenied(
                    f"Job {job_id} belongs to {owner[0]}; only its owner or an admin may end it."
                )
        ended = db.execute(
            "UPDATE sched_jobs SET state = ?, ended_at = ?, exit_code = ?"
            " WHERE id = ? AND state IN ('PENDING', 'RUNNING')",
            (state, time.time(), exit_code, job_id),
        ).rowcount
        db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
        if ended and user is not None:
            audit.member_change(
                db, user=user, command="launch end", detail=f"job {job_id} {state} ({exit_code})"
            )
        schedule(db, nodes, None, woken)
    _wake(store, woken)


def cancel(store: Store, job_id: int, *, user: str, admin: bool) -> QueueJob:
    """Cancel a pending or running job (its owner or an admin): CANCELLED, nodes freed, and the
    jobs the freed nodes let start are started. A running job's launcher (on this host) gets
    SIGTERM from THIS process, only while it is the process recorded (pidfd, start tick, uid),
    so it stops its tasks; one this process may not signal (another user's) sees CANCELLED and
    stops by itself; a queued one is woken and leaves as srun does (exit 1)."""
    job, start, uid = _cancel_record(store, job_id, user=user, admin=admin)
    if job.state == "RUNNING" and job.host == this_host():
        with contextlib.suppress(PermissionError):
            procfs.signal_recorded(job.pid, start, uid, signal.SIGTERM)
    return job


@operation(
    "queue.cancel",
    args={"job_id": int},
    fill={"user": "user", "admin": "admin"},
    may="owner-or-admin",
)
def _cancel_record(
    store: Store, job_id: int, *, user: str, admin: bool
) -> tuple[QueueJob, str | None, int | None]:
    """Judge, record and audit a cancel (its owner or an admin): the job as it was, and its
    launcher's recorded start tick and uid (what the canceller's process checks before its
    signal)."""
    _ensure(store)
    nodes = cluster_nodes(store)
    woken: list[int] = []
    with store.transaction() as db:
        row = db.execute(f"SELECT {COLS} FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise NotQueued(f"No job {job_id}; see the queue with `jobs show`.")
        job = one(row, job_id)
        refusal: CsError | None = None
        if job.user != user and not admin:
            refusal = PermissionDenied(
                f"Job {job_id} belongs to {job.user}; only its owner or an admin may cancel it."
            )
        elif job.state not in ("PENDING", "RUNNING"):
            refusal = InvalidTransition(  # a refusal of the job's state (exit 1), not a usage error
                f"Job {job_id} has already ended ({job.state}); nothing to cancel."
            )
        if refusal is None:
            db.execute(
                "UPDATE sched_jobs SET state = 'CANCELLED', reason = 'Cancelled', ended_at = ?"
                " WHERE id = ?",
                (time.time(), job_id),
            )
            db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
        # a refusal is audited too (committed); the change and its row commit together
        audit.record(
            db,
            user=user,
            command="jobs cancel",
            outcome="ok"
            if refusal is None
            else "denied"
            if isinstance(refusal, PermissionDenied)
            else "refused",
            detail=str(refusal)
            if refusal
            else f"job {job_id} ({job.user}: {job.command}) cancelled while {job.state}",
        )
        start, uid = db.execute(
            "SELECT pid_start, pid_uid FROM sched_jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if refusal is None:
            schedule(db, nodes, None, woken)
    if refusal is not None:
        raise refusal
    _wake(store, [job_id, *woken])
    return job, (None if start is None else str(start)), (None if uid is None else int(uid))


@operation("queue.jobs", args={"all_states": bool, "limit": int | None})
def jobs(store: Store, *, all_states: bool = False, limit: int | None = None) -> list[QueueJob]:
    """The queue after a full reap and a pass: pending and running jobs (and, with
    `all_states`, ended ones too), oldest first; the newest `limit` if given."""
    _ensure(store)
    woken: list[int] = []
    with store.transaction() as db:
        _settle(db, cluster_nodes(store), woken)
        where = "" if all_states else "WHERE state IN ('PENDING', 'RUNNING')"
        rows = audit.bounded_rows(  # a member's answer stops at the service's limit
            db.execute(
                f"SELECT {COLS} FROM (SELECT * FROM sched_jobs {where} ORDER BY id DESC LIMIT ?)"
                " ORDER BY id",
                (-1 if limit is None else limit,),
            )
        )
    _wake(store, woken)
    return readable(rows)


def _settle(db: sqlite3.Connection, nodes: list[NodeInfo], woken: list[int]) -> None:
    """Reap every dead launcher's job, then run a pass (inside the caller's transaction)."""
    now = time.time()
    alive = Alive()
    reap(db, now, "RUNNING", alive)
    reap(db, now, "PENDING", alive)
    schedule(db, nodes, now, woken)


@wire
@dataclass(frozen=True)
class Listing:
    """What `jobs show` lists: running jobs, then pending ones in queue order, then (with
    --all) ended ones, most recent first; and how many of each it leaves out."""

    jobs: tuple[QueueJob, ...]
    hidden_pending: int = 0
    hidden_ended: int = 0

    @property
    def hidden(self) -> int:
        return self.hidden_pending + self.hidden_ended


def arrange(rows: list[QueueJob], *, all_states: bool, limit: int | None) -> Listing:
    """Order `rows` as `jobs show` lists them and keep at most `limit` (running jobs always:
    they hold the nodes); the rest is counted, never dropped silently."""
    running = sorted((j for j in rows if j.state == "RUNNING"), key=lambda j: j.id)
    pending = sorted((j for j in rows if j.state == "PENDING"), key=lambda j: j.id)
    ended = sorted(
        (j for j in rows if j.state not in ("RUNNING", "PENDING")),
        key=lambda j: (j.ended_at or j.submitted_at, j.id),
        reverse=True,
    )
    if not all_states:
        ended = []
    room = None if limit is None else max(0, limit - len(running))
    shown_pending = pending if room is None else pending[:room]
    room = None if room is None else room - len(shown_pending)
    shown_ended = ended if room is None else ended[:room]
    return Listing(
        tuple(running + shown_pending + shown_ended),
        len(pending) - len(shown_pending),
        len(ended) - len(shown_ended),
    )


@operation("queue.listing", args={"all_states": bool, "limit": int | None})
def listing(store: Store, *, all_states: bool = False, limit: int | None = 200) -> Listing:
    """The queue as `jobs show` lists it (see `arrange`), after a full reap and a pass. Reads at
    most `limit` rows of each kind, so a store with 100,000 ended jobs lists as fast as one."""
    _ensure(store)
    woken: list[int] = []
    cap = -1 if limit is None else limit
    with store.transaction() as db:
        _settle(db, cluster_nodes(store), woken)
        rows = audit.bounded_rows(
            db.execute(f"SELECT {COLS} FROM sched_jobs WHERE state = 'RUNNING'")
        )
        rows += audit.bounded_rows(
            db.execute(
                f"SELECT {COLS} FROM sched_jobs WHERE state = 'PENDING' ORDER BY id LIMIT ?",
                (cap,),
            )
        )
        n_pending = db.execute(
            "SELECT count(*) FROM sched_jobs WHERE state = 'PENDING'"
        ).fetchone()[0]
        n_ended = 0
        if all_states:
            rows += audit.bounded_rows(
                db.execute(
                    f"SELECT {COLS} FROM sched_jobs WHERE state NOT IN ('PENDING', 'RUNNING')"
                    " ORDER BY COALESCE(ended_at, submitted_at) DESC, id DESC LIMIT ?",
                    (cap,),
                )
            )
            n_ended = db.execute(
                "SELECT count(*) FROM sched_jobs WHERE state NOT IN ('PENDING', 'RUNNING')"
            ).fetchone()[0]
    _wake(store, woken)
    got = arrange(readable(rows), all_states=all_states, limit=limit)
    shown_pending = sum(1 for j in got.jobs if j.state == "PENDING")
    shown_ended = sum(1 for j in got.jobs if j.state not in ("PENDING", "RUNNING"))
    return Listing(got.jobs, n_pending - shown_pending, n_ended - shown_ended)


@operation("queue.state", args={"job_id": int})
def state(store: Store, job_id: int) -> QueueJob:
    """The job as it stands, read without the write lock (what a waiting launcher checks)."""
    _ensure(store)  # a new store has no queue yet: then no job has this id (not a damaged store)
    with store.read() as db:
        row = db.execute(f"SELECT {COLS} FROM sched_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise NoSuchJob(f'No job {job_id} in the queue; see `cs -c "jobs show"`.')
    return one(row, job_id)


@operation("queue.recheck", args={"job_id": int}, fill={"nodes": "nodes"})
def recheck(store: Store, job_id: int, nodes: list[NodeInfo]) -> int:
    """A waiting launcher's slow safety re-check, for peers that crashed without waking anyone;
    returns how many pending jobs are ahead of `job_id` (the caller spaces its re-checks by it).

    Unlocked reads first: only when something needs the write lock does it take it. The head
    of the queue runs a pass (nodes freed by a launcher killed with SIGKILL, or by a finish
    whose wake-up was lost, go to it); a job behind a dead head runs the pass that drops it.
    """
    alive = Alive()
    with store.read() as db:
        ahead = db.execute(
            "SELECT count(*) FROM sched_jobs WHERE state = 'PENDING' AND id < ?", (job_id,)
        ).fetchone()[0]
        head = db.execute(
            "SELECT pid, pid_start, host FROM sched_jobs WHERE state = 'PENDING' AND id < ?"
            " ORDER BY id LIMIT 1",
            (job_id,),
        ).fetchone()
    if ahead == 0 or (head is not None and not alive(*head)):
        woken: list[int] = []
        with store.transaction() as db:
            schedule(db, nodes, None, woken)
        _wake(store, [j for j in woken if j != job_id])
    return int(ahead)
