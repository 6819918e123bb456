"""The queue's rows: what a `sched_jobs` row holds (`QueueJob`), the launch request stored in
it, and reading rows defensively: one the scheduler cannot read (a hand-edited or damaged
store) is skipped with a warning in a listing, refused in one sentence when asked for by id, and
never scheduled (system/sched/queue.py's pass cancels it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cs2sim.system.errors import CsWarning, UsageError
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.store_ops import wire

__all__ = [
    "NAME_MAX",
    "COMMAND_MAX",
    "QueueJob",
    "MalformedRow",
    "COLS",
    "encode_request",
    "decode_request",
    "check_request",
    "readable",
    "one",
    "row_job",
]

NAME_MAX = (
    64  # a job's name as kept, characters (cut and marked beyond: `jobs show` stays readable)
)
COMMAND_MAX = 4096  # a job's command line as kept, characters
COLS = (
    "id, het_size, name, user, state, reason, request, command, pid, host, submitted_at,"
    " started_at, ended_at, nodes, exit_code, systems"
)


@wire
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
    systems: tuple[str, ...] = ()  # the CS-2 systems it reserves (held while RUNNING)

    @property
    def node_count(self) -> int:
        return sum(c.nodes for c in self.components)


def encode_request(request: JobRequest) -> str:
    return json.dumps(
        {
            "components": [
                [c.nodes, c.tasks_per_node, c.cpus_per_task, c.cyclic, c.gres, c.exclusive]
                for c in request.components
            ],
            "exclude": list(request.exclude),
        }
    )


def decode_request(text: str) -> tuple[tuple[Component, ...], frozenset[str]]:
    data = json.loads(text)
    comps = tuple(Component(*c) for c in data["components"])
    return comps, frozenset(data.get("exclude", ()))


class MalformedRow(CsWarning):
    """A queue row the scheduler could not read (a hand-edited or damaged store): skipped."""


def check_request(request: JobRequest) -> None:
    """UsageError unless `request` is one a launcher could have made: the queue never holds a
    request the scheduler cannot read back."""
    comps = request.components
    ok = (
        isinstance(comps, tuple)
        and 0 < len(comps) <= 64
        and all(
            isinstance(c, Component)
            and 0 < c.nodes <= 100_000
            and 0 < c.tasks_per_node <= 100_000
            and (c.cpus_per_task is None or 0 < c.cpus_per_task <= 100_000)
            and len(c.gres) <= 256
            for c in comps
        )
        and 0 < len(request.command) <= 4096
        and len(request.exclude) <= 100_000
        and len(request.systems) <= 1024
        and len(request.env) <= 4096
    )
    if not ok:
        raise UsageError(
            "The launch request is malformed (no components, a count out of range "
            "or a value too long); launch it with csrun_wse or csrun_cpu."
        )


def readable(rows: list[tuple[object, ...]]) -> list[QueueJob]:
    """The rows as jobs; a row that cannot be read is skipped with a warning, so one damaged
    row never breaks `jobs show` or a launcher."""
    import warnings

    out = []
    for r in rows:
        try:
            out.append(row_job(r))
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            warnings.warn(
                f"skipped queue job {str(r[0])[:20]} of the system store: its row is "
                f"malformed ({type(e).__name__}), so it is not listed; the other jobs "
                "are not affected",
                MalformedRow,
                stacklevel=2,
            )
    return out


def one(row: tuple[object, ...], job_id: int) -> QueueJob:
    try:
        return row_job(row)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        raise UsageError(
            f"Queue job {job_id} has a malformed row in the system store "
            f"({type(e).__name__}); it cannot be shown or run."
        ) from None


def row_job(row: tuple[Any, ...]) -> QueueJob:
    """A sched_jobs row (sqlite's values, untyped: converted here) -> QueueJob."""
    (
        id_,
        size,
        name,
        user,
        state,
        reason,
        request,
        command,
        pid,
        host,
        sub,
        start,
        end,
        nodes,
        code,
        systems,
    ) = row
    comps, _ = decode_request(str(request))
    return QueueJob(
        int(id_),
        int(size),
        str(name),
        str(user),
        str(state),
        str(reason),
        comps,
        str(command),
        int(pid),
        str(host),
        float(sub),
        start,
        end,
        tuple(tuple(p) for p in json.loads(str(nodes))),
        code,
        tuple(n for n in str(systems).split(",") if n),
    )
