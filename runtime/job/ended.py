"""The ended-run record: how a chief's outcome reaches the tasks that are not connected to it.

Whatever its exit code, a chief that ends writes `ended.json` (its outcome) into the job's
rendezvous directory (runtime/job/rendezvous.py) before it stops listening, then removes
`chief.json`. A streamer or coordinator that has not connected yet (or whose connection closes)
looks there at every try and exits at once with it: a chief that finds nothing to do (the rerun
of a completed run) ends the whole job in seconds, not after the rendezvous timeout. Streamers
exit 0 (they did nothing wrong), coordinators with the chief's exit code, as when the chief says
goodbye over the socket. A record older than the task itself by more than ENDED_FRESH_S is
another job's with the same id (a store made anew, same model_dir): it is ignored, and a chief
removes it when it starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.job import rendezvous
from cs2sim.runtime.job.roles import TaskInfo
from cs2sim.system import procfs
from cs2sim.system.errors import CsError

__all__ = [
    "ENDED_FILE",
    "ENDED_FRESH_S",
    "ChiefEnded",
    "write_ended",
    "read_ended",
    "prune",
    "exit_status",
]

ENDED_FILE = "ended.json"
ENDED_FRESH_S = 120.0  # an ended record this much older than the reading task is another job's
ENDED_KEEP_S = 86400.0  # a chief removes other jobs' rendezvous directories ended this long ago


def write_ended(directory: Path, info: TaskInfo, status: int, text: str = "") -> None:
    """The chief's ended record: where late streamers and coordinators find its outcome."""
    with contextlib.suppress(OSError):
        atomic_write(
            directory / ENDED_FILE,
            json.dumps(
                {
                    "job": info.job_id,
                    "status": int(status),
                    "text": text,
                    "at": time.time(),
                    "pid": os.getpid(),
                    "node": info.node,
                }
            )
            + "\n",
            mode=0o600,
        )


class ChiefEnded(Exception):
    """The chief of this task's job has ended (its record): status and text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"the chief ended with exit code {status}")
        self.status = status
        self.text = text


def read_ended(directory: Path, job_id: str) -> ChiefEnded | None:
    """This job's chief's ended record, if it has written one (see ENDED_FRESH_S)."""
    raw = rendezvous.read_own(directory / ENDED_FILE)  # ours, bounded, not a symlink
    try:
        record = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    try:
        if str(record["job"]) != str(job_id) or float(record["at"]) < _started() - ENDED_FRESH_S:
            return None
        return ChiefEnded(int(record["status"]), str(record.get("text", "")))
    except (KeyError, TypeError, ValueError):
        return None


def _started() -> float:
    """When this process started (epoch seconds; /proc), else when this module was imported."""
    started = procfs.started_at()
    return started if started is not None else _IMPORTED


_IMPORTED = time.time()


def prune(parent: Path) -> None:
    """Remove other jobs' rendezvous directories whose chief ended over ENDED_KEEP_S ago."""
    cutoff = time.time() - ENDED_KEEP_S
    with contextlib.suppress(OSError):
        for d in parent.iterdir():
            ended = d / ENDED_FILE
            with contextlib.suppress(OSError):
                if ended.stat().st_mtime < cutoff and not (d / rendezvous.ADDR_FILE).exists():
                    ended.unlink()
                    d.rmdir()


def exit_status(exc: BaseException | None) -> int:
    """The exit code run.py gives for `exc` (cli.main's mapping)."""
    if exc is None:
        return 0
    if isinstance(exc, CsError):
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1
