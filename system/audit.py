"""The audit log: who did what to which system, when, from which state, and how it ended.

Every attempt to change the machine leaves exactly one row: "ok" (done), "denied" (the role may
not), "refused" (the state does not allow it; nothing else changed) or "error" (it failed midway
and was rolled back). Time-based events are written by the user "system" (``booted``).
Rows are written inside the caller's transaction, so a row exists if and only if its change does.

Bounded: every text a row records is cut to `TEXT_LIMITS` characters (`cap`, marked where cut),
whoever sent it, so one request cannot write a row of megabytes; and the reads build their
answer row by row and stop at `ANSWER_CHARS` (the store service's answer limit) instead of
building the whole log first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cs2sim.system.errors import CsError
from cs2sim.system.store_ops import operation, wire

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = [
    "AuditEntry",
    "AuditQuery",
    "AuditRows",
    "OUTCOMES",
    "TEXT_LIMITS",
    "ANSWER_CHARS",
    "AnswerTooLarge",
    "cap",
    "member_change",
    "bounded_rows",
    "record",
    "entries",
    "query",
]

OUTCOMES = ("ok", "denied", "refused", "error")
# the longest text each column of a row keeps (characters; longer is cut and marked)
TEXT_LIMITS = {"user": 128, "system": 128, "command": 256, "detail": 2048}
ANSWER_CHARS = 4 * 1024 * 1024  # a read stops building its answer here (the service's limit)
ROW_OVERHEAD = 160  # what a row costs as sent beyond its texts (its tagged JSON: names, numbers)


class AnswerTooLarge(CsError):
    """A read whose answer would pass the limit a caller may be sent (ask for fewer rows)."""

    exit_code = 2


def cap(text: str, limit: int) -> str:
    """`text` if it has at most `limit` characters, else its start and a mark saying how much
    was cut, `limit` characters in all."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = limit
    for _ in range(3):  # the mark's length depends on the count it states: settle both
        mark = f" [... {len(text) - keep:,} characters cut]"
        keep = max(0, limit - len(mark))
    return (text[:keep] + f" [... {len(text) - keep:,} characters cut]")[:limit]


SQLITE_MAX_INT = 2**63 - 1  # the largest LIMIT sqlite takes


@wire
@dataclass(frozen=True)
class AuditEntry:
    """One row of the audit log."""

    id: int
    at: float  # epoch seconds
    user: str
    system: str  # "" for actions not tied to one system (user management, login)
    command: str  # the command words, e.g. "system standby"
    from_state: str
    to_state: str
    outcome: str  # one of OUTCOMES
    detail: str


def record(
    db: sqlite3.Connection,
    *,
    user: str,
    command: str,
    system: str = "",
    from_state: str = "",
    to_state: str = "",
    outcome: str = "ok",
    detail: str = "",
    at: float | None = None,
) -> int:
    """Append one row inside the caller's transaction; its id."""
    if outcome not in OUTCOMES:
        raise ValueError(f"audit outcome {outcome!r} is not one of {OUTCOMES}")
    cursor = db.execute(
        "INSERT INTO audit (at, user, system, command, from_state, to_state, outcome, detail)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            time.time() if at is None else at,
            cap(user, TEXT_LIMITS["user"]),
            cap(system, TEXT_LIMITS["system"]),
            cap(command, TEXT_LIMITS["command"]),
            str(from_state)[:32],
            str(to_state)[:32],
            outcome,
            cap(detail, TEXT_LIMITS["detail"]),
        ),
    )
    return int(cursor.lastrowid or 0)


def member_change(db: sqlite3.Connection, *, user: str, command: str, detail: str) -> None:
    """The audit row of a change a member of a shared store made through the store service
    (the operations that write no row of their own: a launch's submit and end, its Slurm
    records); nothing in the owner's own process, whose launches `jobs show` lists."""
    from cs2sim.system.store_ops import current_caller

    if current_caller() is not None:
        record(db, user=user, command=command, detail=detail)


@operation("audit.read", args={"last": int | None, "system": str | None})
def entries(store: Store, last: int | None = None, system: str | None = None) -> list[AuditEntry]:
    """The log, oldest first: the `last` N rows, of `system` plus system-less rows if given."""
    params: list[str | int] = [] if system is None else [system]
    where = "" if system is None else "WHERE system IN (?, '')"
    sql = f"SELECT * FROM audit {where} ORDER BY id DESC"
    if last is not None:
        sql += " LIMIT ?"
        params.append(min(max(0, int(last)), SQLITE_MAX_INT))  # --last 10**30 means "all"
    with store.read() as db:
        rows = bounded_rows(db.execute(sql, params))
    return [AuditEntry(*row) for row in reversed(rows)]


def bounded_rows(cursor: sqlite3.Cursor) -> list[Any]:
    """The cursor's rows, read one by one; in the store service (for a member), AnswerTooLarge as
    soon as their size as sent passes ANSWER_CHARS (a read is stopped while it builds its
    answer, not after). The owner's own process reads what it asks for."""
    from cs2sim.system.store_ops import current_caller

    if current_caller() is None:
        return cursor.fetchall()
    rows: list[Any] = []
    size = 0
    for row in cursor:
        size += ROW_OVERHEAD + sum(len(v) for v in row if isinstance(v, str))
        if size > ANSWER_CHARS:
            raise AnswerTooLarge(
                f"the store service refused the request: its answer is over {ANSWER_CHARS:,} "
                f"characters after {len(rows):,} rows, more than the {ANSWER_CHARS:,} the "
                "service sends; ask for less."
            )
        rows.append(row)
    return rows


@wire
@dataclass(frozen=True)
class AuditQuery:
    """Which rows `query` returns: every given condition holds (None: no condition)."""

    user: str | None = None
    command: str | None = None  # words anywhere in the command (`standby`, `user add`)
    outcome: str | None = None  # one of OUTCOMES
    since: float | None = None  # epoch seconds, inclusive
    until: float | None = None  # epoch seconds, exclusive
    system: str | None = None  # this system's rows and the system-less ones; None: all systems
    last: int | None = None  # the newest N of the matching rows; None: all of them


@operation("audit.query", args={"q": AuditQuery})
def query(store: Store, q: AuditQuery) -> tuple[list[AuditEntry], int]:
    """The matching rows, oldest first (at most `q.last`, the newest), and how many matched
    in all. One scan of the table (about 10 ms per 100,000 rows on a small host)."""
    where, params = _where(q)
    limit = -1 if q.last is None else min(max(0, int(q.last)), SQLITE_MAX_INT)
    with store.read() as db:
        total = int(db.execute(f"SELECT count(*) FROM audit {where}", params).fetchone()[0])
        rows = bounded_rows(  # a member's answer stops at the service's limit
            db.execute(f"SELECT * FROM audit {where} ORDER BY id DESC LIMIT ?", [*params, limit])
        )
    return [AuditEntry(*row) for row in reversed(rows)], total


STREAM_BLOCK = 1000  # rows fetched at a time by AuditRows


class AuditRows:
    """The rows `query` returns, read as they are iterated (a block at a time, in one read
    snapshot) instead of as one list: 100,000 rows reach a pipe or a pager as they are read.
    `total` (how many matched in all) is known once iteration has begun. A member's store
    (served by its owner's store service) answers with `query`'s list."""

    def __init__(self, store: Store, q: AuditQuery) -> None:
        self.store, self.q = store, q
        self.total = 0

    def __iter__(self) -> Iterator[AuditEntry]:
        if self.store.remote is not None:
            rows, self.total = query(self.store, self.q)
            yield from rows
            return
        where, params = _where(self.q)
        q = self.q
        if q.last is None:
            sql, args = f"SELECT * FROM audit {where} ORDER BY id", params
        else:
            limit = min(max(0, int(q.last)), SQLITE_MAX_INT)
            sql = (
                f"SELECT * FROM (SELECT * FROM audit {where} ORDER BY id DESC LIMIT ?) ORDER BY id"
            )
            args = [*params, limit]
        with self.store.read() as db:
            self.total = int(
                db.execute(f"SELECT count(*) FROM audit {where}", params).fetchone()[0]
            )
            cursor = db.execute(sql, args)
            while block := cursor.fetchmany(STREAM_BLOCK):
                for row in block:
                    yield AuditEntry(*row)


def _where(q: AuditQuery) -> tuple[str, list[str | float | int]]:
    """The WHERE clause of `q`'s conditions (as `query` builds it) and its parameters."""
    clauses: list[str] = []
    params: list[str | float | int] = []
    for sql, value in (
        ("user = ?", q.user),
        ("instr(command, ?) > 0", q.command),
        ("outcome = ?", q.outcome),
        ("at >= ?", q.since),
        ("at < ?", q.until),
        ("system IN (?, '')", q.system),
    ):
        if value is not None:
            clauses.append(sql)
            params.append(value)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params
