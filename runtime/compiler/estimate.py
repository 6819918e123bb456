"""Pass 4 (pipelined), estimate: samples/s of every placed kernel and of the whole wafer.

Per kernel (summed over replicas): compute samples/s = min(PEs, useful PEs) x clock / cycles per
sample; transmission samples/s = the narrower of its two edges x fabric bytes/s per PE / bytes
over that edge per sample (the first kernel's input edge is the system I/O, shared by all
replicas); kernel samples/s = min of the two; overall = min over kernels (REFERENCE §8).
Active PEs = the kernels' rectangles / the wafer. Compute Utilization of a kernel = the share of
time its PEs run kernel code at the pipeline's pace (overall / its compute samples/s); overall =
the PE-weighted mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.cost import OpCost, rates
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.runtime.compiler.placement import Placement, Rect
from cs2sim.system.hardware import WaferSpec

__all__ = ["KernelEstimate", "Estimate", "estimate_pipelined", "shared_edge"]


@dataclass(frozen=True)
class KernelEstimate:
    """One kernel's figures (all replicas)."""

    name: str
    block: str
    kernel: str
    active_pes: int
    samples_per_sec: float
    compute_samples_per_sec: float
    transmission_samples_per_sec: float
    compute_utilization: float


@dataclass(frozen=True)
class Estimate:
    """The overall figures of compile_report.txt."""

    samples_per_sec: float
    compute_samples_per_sec: float
    transmission_samples_per_sec: float
    active_pes: int
    total_pes: int
    compute_utilization: float
    bound: str  # "compute" | "transmission" (I/O or fabric)
    kernels: tuple[KernelEstimate, ...] = ()

    @property
    def active_share(self) -> float:
        """Active PEs / all PEs."""
        return self.active_pes / self.total_pes


def shared_edge(a: Rect, b: Rect) -> int:
    """PEs along the boundary two rectangles share (0 when they do not touch)."""
    if a.x + a.w == b.x or b.x + b.w == a.x:
        return max(0, min(a.y + a.h, b.y + b.h) - max(a.y, b.y))
    if a.y + a.h == b.y or b.y + b.h == a.y:
        return max(0, min(a.x + a.w, b.x + b.w) - max(a.x, b.x))
    return 0


def estimate_pipelined(g: Graph, costs: tuple[OpCost, ...], pl: Placement,
                       wafer: WaferSpec) -> Estimate:
    """Pass 4 (pipelined): the Estimate of a placement."""
    r = rates(wafer)
    n = pl.replicas
    io_total = r.io_bytes_s / (g.input_bytes + 4)
    rows: list[tuple[float, float]] = []
    for i, (k, c) in enumerate(zip(pl.kernels, costs, strict=True)):
        compute = n * min(k.pes, c.max_pes) * r.clock_hz / c.cycles if c.cycles else math.inf
        rect = k.rect
        if i == 0:
            t_in = io_total
        else:
            edge = shared_edge(pl.kernels[i - 1].rect, rect) or min(rect.w, rect.h)
            t_in = n * edge * r.fabric_bytes_s / c.in_link_bytes if c.in_link_bytes else math.inf
        if i + 1 < len(pl.kernels):
            edge = shared_edge(rect, pl.kernels[i + 1].rect) or min(rect.w, rect.h)
            t_out = (n * edge * r.fabric_bytes_s / c.out_link_bytes if c.out_link_bytes
                     else math.inf)
        else:
            t_out = math.inf  # one loss value a sample leaves through the I/O
        rows.append((compute, min(t_in, t_out)))
    compute_all = min(cr for cr, _ in rows)
    trans_all = min(tr for _, tr in rows)
    overall = min(compute_all, trans_all)
    pe_flops = r.flops_per_cycle * r.clock_hz
    kernels: list[KernelEstimate] = []
    weighted, active = 0.0, 0
    for (cr, tr), k, c in zip(rows, pl.kernels, costs, strict=True):
        pes = k.pes * n
        util = min(1.0, overall * (c.fwd_flops + c.bwd_flops) / (pes * pe_flops))
        weighted += util * pes
        active += pes
        kernels.append(KernelEstimate(k.name, k.block, k.kernel, pes, min(cr, tr), cr, tr,
                                      min(1.0, overall / cr) if cr else 0.0))
    return Estimate(
        samples_per_sec=overall, compute_samples_per_sec=compute_all,
        transmission_samples_per_sec=trans_all, active_pes=active, total_pes=wafer.pes,
        compute_utilization=weighted / active if active else 0.0,
        bound="compute" if compute_all < trans_all else "transmission",
        kernels=tuple(kernels))
