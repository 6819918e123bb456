"""Coordinator tasks of a launched job: no work of their own here; each connects to the chief
(runtime/job/client.py) and ends with its outcome.

An execute wsjob's weight servers (MemoryX) and activation servers are such tasks too: real
processes on nodes the scheduler reserved for them, which join the job and wait for the chief's
end. The weight-streaming executor keeps the weights and reduces gradients inside the chief, so
they hold no weights of their own (docs/appliance.md says so).
"""

from __future__ import annotations

import logging
from pathlib import Path

from cs2sim.runtime.job.client import Control, StreamerConnection
from cs2sim.runtime.job.ended import ChiefEnded
from cs2sim.runtime.job.roles import TaskInfo

__all__ = ["coordinate"]

log = logging.getLogger("cs2sim.run")


def coordinate(info: TaskInfo, model_dir: Path) -> int:
    """A coordinator: no work of its own here; it ends with the chief's outcome."""
    log.info(f"{info.name} of job {info.job_id}: waiting for the chief's end")
    try:
        conn = StreamerConnection(info, model_dir, {"type": "coordinator"})
    except ChiefEnded as e:
        log.info(f"The chief ended with exit code {e.status} before this coordinator connected")
        _said(e.status, e.text)
        return e.status
    control = Control(conn.sock)
    control.thread.join()
    if control.ended is None:
        late = conn.ended()
        if late is not None:
            log.info(f"The chief ended with exit code {late.status}")
            _said(late.status, late.text)
            return late.status
        log.error(
            "the chief closed the connection without ending the job; this coordinator stops too."
        )
        return 1
    status = int(control.ended.get("status", 1))
    log.info(f"The chief ended with exit code {status}")
    _said(status, str(control.ended.get("text", "")))
    return status


def _said(status: int, text: str) -> None:
    """The chief's error sentence, in this task's log too: this coordinator's exit (with the
    chief's code) may end the step before the chief has printed it, so the job's log would
    otherwise keep only exit codes."""
    if status and text:
        log.error("error: " + (text.split(": ", 1)[1] if ": " in text else text))
