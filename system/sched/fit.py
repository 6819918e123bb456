"""The scheduling decision, pure and in memory: does a request fit the free nodes, and where.

Nodes are whole and exclusive (every csrun_wse component says --exclusive; csrun_cpu too). A
component fits a node when the node has the component's GRES (if it asks for one), is not
excluded, and holds tasks_per_node x cpus_per_task cpus. Components are placed in order on the
lowest-numbered free nodes that qualify (Slurm's default node order is the configured one);
components without a GRES take GRES nodes only when nothing else is left, so the CS-2's node stays
free for the chief of the next job.

`fifo_pass` is the queue: strict FIFO (the oldest pending job first; a job that does not fit
blocks those behind it, as Slurm's main scheduler does without backfill), so one pass costs
O(nodes handed out + 1 job examined) and the queue never starves a large job.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cs2sim.system.sched.request import Component
from cs2sim.system.store_ops import wire

__all__ = ["NodeInfo", "place", "never_fits", "fifo_pass"]


@wire
@dataclass(frozen=True)
class NodeInfo:
    name: str
    cpus: int
    gres: str = ""  # the GRES this node offers ("" for none)


def _cpus_needed(comp: Component) -> int:
    return comp.tasks_per_node * (comp.cpus_per_task or 1)


def place(
    components: tuple[Component, ...],
    free: list[NodeInfo],
    exclude: frozenset[str] = frozenset(),
) -> list[list[str]] | None:
    """Nodes for each component from `free` (in its order), or None if the request does not fit."""
    taken: set[str] = set()
    out: list[list[str]] = [[] for _ in components]
    # GRES components first: they have the fewest candidates
    order = sorted(range(len(components)), key=lambda k: 0 if components[k].gres else 1)
    for k in order:
        comp = components[k]
        need = _cpus_needed(comp)
        chosen: list[str] = []
        spare: list[str] = []  # GRES nodes a plain component may use last
        for node in free:
            if len(chosen) == comp.nodes:
                break
            if node.name in taken or node.name in exclude or node.cpus < need:
                continue
            if comp.gres:
                if node.gres == comp.gres:
                    chosen.append(node.name)
            elif node.gres:
                if len(spare) < comp.nodes:
                    spare.append(node.name)
            else:
                chosen.append(node.name)
        if len(chosen) < comp.nodes and not comp.gres:
            chosen.extend(spare[: comp.nodes - len(chosen)])
        if len(chosen) < comp.nodes:
            return None
        taken.update(chosen)
        out[k] = chosen
    return out


def never_fits(
    components: tuple[Component, ...], cluster: list[NodeInfo], exclude: frozenset[str]
) -> str | None:
    """Why the request cannot run even on an idle cluster (Slurm's wording), or None."""
    total = sum(c.nodes for c in components)
    usable = [n for n in cluster if n.name not in exclude]
    if total > len(usable):
        return "Node count specification invalid"
    if place(components, cluster, exclude) is None:
        return "Requested node configuration is not available"
    return None


@dataclass
class Pending:
    """A queued request as the pass sees it."""

    job_id: int
    components: tuple[Component, ...]
    exclude: frozenset[str] = frozenset()
    systems: tuple[str, ...] = ()  # CS-2 systems it reserves: all must be free


def fifo_pass(
    pending: Iterable[Pending], free: list[NodeInfo], held: set[str] | None = None
) -> Iterator[tuple[Pending, list[list[str]] | None]]:
    """Yield (job, nodes) for each job started, oldest first, then (head, None) for the job that
    blocks the queue (its reason is Resources; the rest wait on Priority). A job starts when its
    nodes fit `free` and none of its CS-2 systems is in `held`. `free` and `held` are consumed."""
    held = set() if held is None else held
    for job in pending:
        if held.intersection(job.systems):
            yield job, None
            return
        nodes = place(job.components, free, job.exclude)
        if nodes is None:
            yield job, None
            return
        used = {n for part in nodes for n in part}
        free[:] = [n for n in free if n.name not in used]
        held.update(job.systems)
        yield job, nodes
