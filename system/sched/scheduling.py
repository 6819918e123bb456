"""The embedded scheduler's pass: hand free nodes to the oldest pending jobs of the queue.

`schedule` runs inside the transaction of whoever changes the queue (system/sched/queue.py):
strict FIFO by job id over the tables `sched_jobs` and `sched_alloc`, the placement itself
decided by system/sched/fit.py. A job whose launcher on this host is gone is ended on the way
(RUNNING -> FAILED, PENDING -> CANCELLED), so no node leaks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from cs2sim.system.jobs import holders, process_alive, this_host
from cs2sim.system.sched.fit import NodeInfo, Pending, fifo_pass
from cs2sim.system.sched.guard import guard_running
from cs2sim.system.sched.queue_rows import decode_request

if TYPE_CHECKING:
    import sqlite3

__all__ = ["schedule", "Alive", "reap"]


class Alive:
    """Launcher liveness, asked at most once per (pid, start) in a pass (a /proc read each)."""

    def __init__(self) -> None:
        self.host = this_host()
        self.seen: dict[tuple[int, str | None], bool] = {}

    def __call__(self, pid: int, start: str | None, host: str) -> bool:
        if host != self.host:
            return True  # another host's launcher: only that host can tell
        key = (pid, start)
        if key not in self.seen:
            # a killed launcher's job lives on while its guard ends its processes (guard.py)
            self.seen[key] = process_alive(pid, start) or guard_running(pid)
        return self.seen[key]


def reap(db: sqlite3.Connection, now: float, state: str, alive: Alive) -> int:
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
                " WHERE id = ?",
                (end, now, job_id),
            )
            db.execute("DELETE FROM sched_alloc WHERE job_id = ?", (job_id,))
            n += 1
    return n


def schedule(
    db: sqlite3.Connection,
    nodes: list[NodeInfo],
    now: float | None = None,
    woken: list[int] | None = None,
) -> int:
    """One FIFO pass inside the caller's transaction; how many jobs started. The ids of the jobs
    it started are appended to `woken`: the caller wakes their launchers after its commit.

    Cost: O(nodes) to find the free ones + O(1) per job examined. Dead launchers are reaped
    where it matters: a pending job is checked when the pass reaches it (a dead one is dropped
    and the pass goes on), and running jobs only when the head of the queue does not fit (their
    nodes might be free after all); the view (`jobs()`) reaps everything.
    """
    now = time.time() if now is None else now
    woken = [] if woken is None else woken
    alive = Alive()
    started, blocked = _pass(db, nodes, now, alive, woken)
    if blocked and reap(db, now, "RUNNING", alive):
        more, _ = _pass(db, nodes, now, alive, woken)
        started += more
    return started


def _pass(
    db: sqlite3.Connection, nodes: list[NodeInfo], now: float, alive: Alive, woken: list[int]
) -> tuple[int, bool]:
    """(jobs started, whether a pending job is left blocking the queue)."""
    held = db.execute("SELECT group_concat(node, char(10)) FROM sched_alloc").fetchone()[0]
    used = set(held.split("\n")) if held else set()
    free = [n for n in nodes if n.name not in used]
    systems = set(holders(db))  # CS-2 systems held by running jobs and launches
    cur = db.execute(
        "SELECT id, request, pid, pid_start, host, systems FROM sched_jobs"
        " WHERE state = 'PENDING' ORDER BY id"
    )
    dead: list[int] = []

    def pending() -> Iterator[Pending]:
        for job_id, request, pid, start, host, wanted in cur:
            if not alive(pid, start, host):
                dead.append(job_id)
                continue
            try:
                comps, exclude = decode_request(request)
            except (ValueError, TypeError, KeyError, AttributeError):
                dead.append(job_id)  # a request no launcher made: it can never run
                continue
            yield Pending(job_id, comps, exclude, tuple(n for n in wanted.split(",") if n))

    results = list(fifo_pass(pending(), free, systems))
    cur.close()
    for job_id in dead:
        db.execute(
            "UPDATE sched_jobs SET state = 'CANCELLED', reason = 'LauncherDied', ended_at = ?"
            " WHERE id = ?",
            (now, job_id),
        )
    started = 0
    blocked = False
    for job, placed in results:
        if placed is None:
            blocked = True
            # waiting for a CS-2 another job holds: Slurm's reason for a license (one per
            # system, as on real Slurm) is Licenses; waiting for nodes is Resources
            why = "Licenses" if systems.intersection(job.systems) else "Resources"
            db.execute(
                "UPDATE sched_jobs SET reason = ? WHERE id = ? AND reason != ?",
                (why, job.job_id, why),
            )
            db.execute(
                "UPDATE sched_jobs SET reason = 'Priority' WHERE state = 'PENDING'"
                " AND id > ? AND reason = 'None'",
                (job.job_id,),
            )
            continue
        db.execute(
            "UPDATE sched_jobs SET state = 'RUNNING', reason = 'None', started_at = ?,"
            " nodes = ? WHERE id = ?",
            (now, json.dumps(placed), job.job_id),
        )
        db.executemany(
            "INSERT INTO sched_alloc (node, job_id) VALUES (?, ?)",
            [(n, job.job_id) for part in placed for n in part],
        )
        woken.append(job.job_id)
        started += 1
    return started, blocked
