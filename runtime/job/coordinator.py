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
        log.info(
            f"The chief ended with exit code {e.status}{_why(e.text)} before this "
            "coordinator connected"
        )
        return e.status
    control = Control(conn.sock)
    control.thread.join()
    if control.ended is None:
        late = conn.ended()
        if late is not None:
            log.info(f"The chief ended with exit code {late.status}{_why(late.text)}")
            return late.status
        log.error(
            "the chief closed the connection without ending the job; this coordinator stops too."
        )
        return 1
    status = int(control.ended.get("status", 1))
    log.info(f"The chief ended with exit code {status}{_why(str(control.ended.get('text') or ''))}")
    return status


def _why(text: str) -> str:
    """The chief's failure, said again in this task's log: srun's --kill-on-bad-exit may end
    the chief before its own error line is written once this coordinator exits non-zero."""
    return f" ({text})" if text else ""
