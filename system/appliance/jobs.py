"""A wsjob and the cluster server's book of them (its own SQLite file, one transaction per change).

A wsjob is a compile job (CPU nodes only) or an execute job (num_csx CS-2 systems and the nodes
of its coordinator, weight servers, activation servers and input workers). Its id is `wsjob-`
and 22 lowercase alphanumerics, as the real cluster's; its logs live under its remote log path
`<CS2_HOME>/wsjob/workdir/job-operator/<id>`. Phases are the real ones: QUEUED (the client says
"Queueing"), RUNNING, then SUCCEEDED, FAILED or CANCELLED, each end with a reason.

The book is the server's alone (a file under $CS2_HOME/wsjob, 0600), so the store's schema is
untouched; systems and nodes are reserved through the scheduler like any launcher job.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import string
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "PHASES",
    "ENDED",
    "PRIORITIES",
    "KINDS",
    "WsJob",
    "JobBook",
    "new_id",
    "log_root",
    "job_log_dir",
    "ID_RE",
    "label_problem",
]

PHASES = ("QUEUED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
ENDED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
PRIORITIES = ("p1", "p2", "p3")  # p1 first; equal priority: the older job first
KINDS = ("compile", "execute")
_ALPHABET = string.ascii_lowercase + string.digits
ID_RE = r"wsjob-[a-z0-9]{22}"

SCHEMA = """
CREATE TABLE IF NOT EXISTS wsjobs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, user TEXT NOT NULL, uid INTEGER NOT NULL,
    priority TEXT NOT NULL, created REAL NOT NULL, started REAL, ended REAL,
    phase TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '', labels TEXT NOT NULL DEFAULT '{}',
    systems TEXT NOT NULL DEFAULT '[]', num_csx INTEGER NOT NULL DEFAULT 0,
    spec TEXT NOT NULL DEFAULT '{}', exit_code INTEGER, epoch INTEGER NOT NULL,
    compile_hash TEXT NOT NULL DEFAULT '', sched_job TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS wsjobs_phase ON wsjobs (phase);
CREATE TABLE IF NOT EXISTS server (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


# Kubernetes' label syntax ("Labels and Selectors", kubernetes.io/docs/concepts/overview/
# working-with-objects/labels): a key is an optional DNS-subdomain prefix and "/", then a name of
# at most 63 characters, alphanumeric at both ends with "-", "_", "." between; a value is empty
# or the same as a name
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_problem(key: str, value: str) -> str | None:
    """Why `key=value` is not a valid label (one sentence), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"invalid label key {key!r}: its prefix must be a DNS subdomain (lowercase "
            "letters, digits, '-' and '.'), at most 253 characters, before one '/'."
        )
    if not _LABEL_NAME.fullmatch(name):
        return (
            f"invalid label key {key!r}: a name must be 1 to 63 characters, letters and digits "
            "at both ends, '-', '_' or '.' between (Kubernetes' label syntax)."
        )
    if value and not _LABEL_NAME.fullmatch(value):
        return (
            f"invalid label value {value!r} for {key}: it must be empty or 1 to 63 characters, "
            "letters and digits at both ends, '-', '_' or '.' between (Kubernetes' label syntax)."
        )
    return None


def new_id() -> str:
    """`wsjob-` + 22 lowercase alphanumerics from the OS's random source."""
    return "wsjob-" + "".join(secrets.choice(_ALPHABET) for _ in range(22))


def log_root(home: Path) -> Path:
    """Where every wsjob's remote log directory lives."""
    return Path(home) / "wsjob" / "workdir" / "job-operator"


def job_log_dir(home: Path, job_id: str) -> Path:
    return log_root(home) / job_id


@dataclass
class WsJob:
    """One wsjob as the book holds it."""

    id: str
    kind: str
    user: str
    uid: int
    priority: str
    created: float
    phase: str = "QUEUED"
    reason: str = ""
    started: float | None = None
    ended: float | None = None
    labels: dict[str, str] = field(default_factory=dict)
    systems: list[str] = field(default_factory=list)
    num_csx: int = 0
    spec: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    epoch: int = 0
    compile_hash: str = ""
    sched_job: str = ""  # the scheduler's job id of its launch ("" before it is submitted)

    _COLUMNS = (
        "id",
        "kind",
        "user",
        "uid",
        "priority",
        "created",
        "started",
        "ended",
        "phase",
        "reason",
        "labels",
        "systems",
        "num_csx",
        "spec",
        "exit_code",
        "epoch",
        "compile_hash",
        "sched_job",
    )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> WsJob:
        d = dict(zip(cls._COLUMNS, row, strict=True))
        for key in ("labels", "systems", "spec"):
            d[key] = json.loads(d[key])
        return cls(**d)

    def row(self) -> tuple[Any, ...]:
        d = {k: getattr(self, k) for k in self._COLUMNS}
        for key in ("labels", "systems", "spec"):
            d[key] = json.dumps(d[key], sort_keys=True)
        return tuple(d[k] for k in self._COLUMNS)

    def order_key(self) -> tuple[int, float, str]:
        """Scheduling order: priority (p1 first), then age (older first)."""
        return (PRIORITIES.index(self.priority), self.created, self.id)

    def public(self, home: Path) -> dict[str, Any]:
        """The job as `csctl get job NAME -o json` shows it (the real tool's field names)."""
        return {
            "meta": {
                "name": self.id,
                "labels": dict(self.labels),
                "createTime": _iso(self.created),
                "type": self.kind,
            },
            "spec": {
                "user": {"username": self.user, "uid": self.uid},
                "priority": self.priority,
                "numCsx": self.num_csx,
                **(
                    {
                        "mountDirs": list(self.spec.get("mount_dirs") or []),
                        "pythonPaths": list(self.spec.get("python_paths") or []),
                    }
                    if self.spec
                    else {}
                ),
            },
            "status": {
                "phase": self.phase,
                "reason": self.reason,
                "systems": list(self.systems),
                "startTime": _iso(self.started),
                "executionTime": _iso(self.started),
                "completionTime": _iso(self.ended),
                "exitCode": self.exit_code,
                "compileHash": self.compile_hash,
                "schedulerJob": self.sched_job,
                "logPath": str(job_log_dir(home, self.id)),
                **self._replicas(),
            },
        }

    def _replicas(self) -> dict[str, Any]:
        """An execute job's replicas (`.status.replicas[]`), when its spec was read."""
        if self.kind != "execute" or "shape" not in self.spec:
            return {}
        from cs2sim.system.appliance.replicas import plan_of
        from cs2sim.system.errors import CsError

        try:
            plan = plan_of(self.num_csx, self.spec)
        except CsError:
            return {}
        return {"replicas": plan.replicas(self.id, self.spec.get("placement"))}


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class JobBook:
    """The server's wsjobs in `<home>/wsjob/server.db` (WAL; every change one transaction)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        os.close(fd)
        self._db = sqlite3.connect(
            self.path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.RLock()  # one connection, shared by the server's threads
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def next_epoch(self) -> int:
        """A new server run's number (jobs remember which run owned them)."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM server WHERE key = 'epoch'").fetchone()
            epoch = int(row[0]) + 1 if row else 1
            db.execute(
                "INSERT OR REPLACE INTO server (key, value) VALUES ('epoch', ?)", (str(epoch),)
            )
        return epoch

    def add(self, job: WsJob) -> None:
        with self.transaction() as db:
            db.execute(
                f"INSERT INTO wsjobs VALUES ({','.join('?' * len(WsJob._COLUMNS))})", job.row()
            )

    def save(self, job: WsJob) -> None:
        """Write the job's state; its labels are `set_labels`'s alone (a label patched while
        the dispatcher saves a phase is not lost)."""
        cols = [c for c in WsJob._COLUMNS if c not in ("id", "labels")]
        values = dict(zip(WsJob._COLUMNS, job.row(), strict=True))
        with self.transaction() as db:
            db.execute(
                f"UPDATE wsjobs SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                [values[c] for c in cols] + [job.id],
            )

    def set_labels(self, job_id: str, labels: dict[str, str]) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE wsjobs SET labels = ? WHERE id = ?",
                (json.dumps(labels, sort_keys=True), job_id),
            )

    def get(self, job_id: str) -> WsJob | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM wsjobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else WsJob.from_row(row)

    def all(
        self, *, active_only: bool = False, since: float | None = None, with_spec: bool = True
    ) -> list[WsJob]:
        """Jobs by phase / age; without `with_spec` their specs (command line, environment)
        are not read, which a listing does not need."""
        cols = ", ".join(c if with_spec or c != "spec" else "'{}'" for c in WsJob._COLUMNS)
        sql, args = f"SELECT {cols} FROM wsjobs", []
        where = []
        if active_only:
            where.append("phase IN ('QUEUED', 'RUNNING')")
        if since is not None:
            where.append("(phase IN ('QUEUED', 'RUNNING') OR created >= ?)")
            args.append(since)
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql, args).fetchall()
        return [WsJob.from_row(r) for r in rows]

    def recover(self, epoch: int, now: float) -> list[WsJob]:
        """Jobs an earlier server run left QUEUED or RUNNING: FAILED now, with the reason (the
        processes of a running one died with that server: they are started with a parent-death
        signal)."""
        ended = []
        with self.transaction() as db:
            rows = db.execute(
                "SELECT * FROM wsjobs WHERE phase IN ('QUEUED', 'RUNNING') AND epoch != ?", (epoch,)
            ).fetchall()
            for r in rows:
                job = WsJob.from_row(r)
                job.phase, job.ended = "FAILED", now
                job.reason = "the cluster server stopped while the job was " + (
                    "running" if job.started else "queued"
                )
                db.execute(
                    "UPDATE wsjobs SET phase = ?, ended = ?, reason = ? WHERE id = ?",
                    (job.phase, job.ended, job.reason, job.id),
                )
                ended.append(job)
        return ended
