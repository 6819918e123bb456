"""Formatting shared by several commands: times, durations, aligned key/value lines, job rows.

Pure functions of values: nothing here draws or knows the session (csshell/context.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cs2sim.system.jobs import Job

__all__ = [
    "short_clock",
    "clock",
    "ago",
    "seconds",
    "kv_lines",
    "job_rows",
    "JOB_COLUMNS",
    "job_dict",
]

JOB_COLUMNS = ("job", "user", "mode", "started", "pid", "host", "nodes", "command")


def clock(epoch: float | None) -> str:
    """Local wall-clock time, `2024-05-01 12:00:03`; `-` when unknown."""
    if epoch is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def short_clock(epoch: float, now: float | None = None) -> str:
    """`12:00:03` for today, `2024-05-01 12:00` for earlier days."""
    moment, today = time.localtime(epoch), time.localtime(now)
    if moment[:3] == today[:3]:
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M", moment)


def seconds(value: float) -> str:
    """A duration for people: `4 s`, `3 min 2 s`, `2 h 5 min`, `3 d 4 h`."""
    s = max(0, int(round(value)))
    for unit, size, sub, subsize in (
        ("d", 86400, "h", 3600),
        ("h", 3600, "min", 60),
        ("min", 60, "s", 1),
    ):
        if s >= size:
            major, rest = divmod(s, size)
            minor = rest // subsize
            return f"{major} {unit} {minor} {sub}" if minor else f"{major} {unit}"
    return f"{s} s"


def ago(epoch: float, now: float | None = None) -> str:
    """`12 s ago`."""
    return f"{seconds((now if now is not None else time.time()) - epoch)} ago"


def kv_lines(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """`Label     : value` lines with the colons aligned."""
    width = max((len(k) for k, _ in pairs), default=0)
    return [f"{k:<{width}} : {v}" for k, v in pairs]


def job_rows(jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
    """One table row per job, in JOB_COLUMNS order."""
    return [
        (
            j.id,
            j.user,
            j.mode,
            clock(j.started_at),
            j.pid if j.pid is not None else "-",
            j.host,
            ",".join(j.nodes) or "-",
            j.command,
        )
        for j in jobs
    ]


def job_dict(job: Job) -> dict[str, Any]:
    """A job as JSON-ready data."""
    return {
        "id": job.id,
        "system": job.system,
        "user": job.user,
        "mode": str(job.mode),
        "command": job.command,
        "state": job.state,
        "pid": job.pid,
        "host": job.host,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "nodes": list(job.nodes),
    }
