"""What a backend hands back for a granted job (`Allocation`) and where it reports srun's lines
(`Events`): shared by the embedded backend (backend.py) and the Slurm one (slurm.py), which
therefore need not import each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cs2sim.system.sched.request import JobRequest

__all__ = ["Allocation", "Events"]


@dataclass(frozen=True)
class Allocation:
    """Nodes granted to a job: one list per heterogeneous component."""

    job_id: int
    nodes: tuple[tuple[str, ...], ...]
    request: JobRequest


class Events(Protocol):
    """Where a backend reports what srun would print on stderr (one line each, no newline)."""

    def __call__(self, line: str) -> None: ...
