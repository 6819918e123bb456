"""Pass 4 (pipelined), estimate: samples/s of every placed kernel and of the whole wafer.

Per kernel, over its replicas, four limits (cost.py, io.py):
  compute  clock / the cycles a PE spends per sample: its share of the arithmetic (at
           PIPE_PEAK_SHARE of the roofline) plus PIPE_OP_CYCLES for every vector op it starts
  fabric   the busiest PE's ramp (its tile's inputs and partial sums) and the links to its
           neighbours: link_width x a wavelet per cycle / values per sample over that edge
           (activations forward, gradients back: one direction each)
  io       the input kernel only: the ports its west edge touches x line rate less framing /
           bytes of one sample (input and labels in, a loss value out)
  input    the input kernel only, when the job's input cluster is known: workers x the rate
           one worker delivers
kernel samples/s = the least of them, and its bound names which; overall = min over kernels
(the slowest stage sets the pace). "Compute Samples/s" and "Transmission Samples/s" of the
report are the least compute and the least fabric/io figures; Active PEs = the kernels'
rectangles / the wafer. Compute Utilization of a kernel = the share of its PEs' time that goes
to arithmetic at the pipeline's pace (neither waiting for the slowest kernel nor starting vector
ops); overall = the PE-weighted mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.cost import OpCost, rates
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.runtime.compiler.io import InputCluster
from cs2sim.runtime.compiler.placement import Placement, Rect, wafer_sample_bytes
from cs2sim.system.hardware import WaferSpec

__all__ = [
    "KernelEstimate",
    "Estimate",
    "estimate_pipelined",
    "shared_edge",
    "link_width",
    "BOUNDS",
]

# what can limit a kernel or a layer pass, as the report names it
BOUNDS = ("compute", "fabric", "io", "input", "stream", "memory")


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
    bound: str = "compute"
    ports: float = 0.0


@dataclass(frozen=True)
class Estimate:
    """The overall figures of compile_report.txt."""

    samples_per_sec: float
    compute_samples_per_sec: float
    transmission_samples_per_sec: float
    active_pes: int
    total_pes: int
    compute_utilization: float
    bound: str  # one of BOUNDS
    kernels: tuple[KernelEstimate, ...] = ()
    input_samples_per_sec: float | None = None  # the input cluster's rate, when known
    wafer_samples_per_sec: float = 0.0  # without the input cluster's bound
    ports_used: float = 0.0  # pipelined: ports feeding the input kernels, all replicas
    io_samples_per_sec: float | None = None  # pipelined: what those ports could carry


def shared_edge(a: Rect, b: Rect) -> int:
    """PEs along the boundary two rectangles share (0 when they do not touch)."""
    if a.x + a.w == b.x or b.x + b.w == a.x:
        return max(0, min(a.y + a.h, b.y + b.h) - max(a.y, b.y))
    if a.y + a.h == b.y or b.y + b.h == a.y:
        return max(0, min(a.x + a.w, b.x + b.w) - max(a.x, b.x))
    return 0


def link_width(a: Rect, b: Rect) -> int:
    """Parallel links a stream between two consecutive kernels can use.

    Their shared edge; where two kernels meet only across a band turn (a short overlap), the
    stream may leave over the longer side of each and bend through the routers around the turn
    (wavelets pass other PEs' routers without their compute), so the narrower of the two longer
    sides bounds it.
    """
    return max(shared_edge(a, b), min(max(a.w, a.h), max(b.w, b.h)))


def _pick(limits: dict[str, float]) -> tuple[float, str]:
    bound = min(limits, key=lambda k: limits[k])
    return limits[bound], bound


def estimate_pipelined(
    g: Graph,
    costs: tuple[OpCost, ...],
    pl: Placement,
    wafer: WaferSpec,
    input_cluster: InputCluster | None = None,
) -> Estimate:
    """Pass 4 (pipelined): the Estimate of a placement."""
    r = rates(wafer)
    n = pl.replicas
    io_rate = n * pl.ports * r.port_bytes_s / wafer_sample_bytes(g)
    in_rate = input_cluster.samples_per_sec if input_cluster else None
    rows: list[tuple[float, float, float, str]] = []  # compute, transmission, overall, bound
    for i, (k, c) in enumerate(zip(pl.kernels, costs, strict=True)):
        comp, ramp = (n * x for x in c.samples_per_sec(k.pes, r))
        rect = k.rect
        edges = [math.inf]
        if i > 0 and c.in_link_bytes:
            e = link_width(pl.kernels[i - 1].rect, rect)
            edges.append(n * e * r.link_bytes_s / c.in_link_bytes)
        if i + 1 < len(pl.kernels) and c.out_link_bytes:
            e = link_width(rect, pl.kernels[i + 1].rect)
            edges.append(n * e * r.link_bytes_s / c.out_link_bytes)
        limits = {"compute": comp, "fabric": min(ramp, *edges)}
        if i == 0:
            limits["io"] = io_rate
            if in_rate is not None:
                limits["input"] = in_rate
        rate, bound = _pick(limits)
        trans = min(v for key, v in limits.items() if key in ("fabric", "io"))
        rows.append((comp, trans, rate, bound))
    compute_all = min(cr for cr, _, _, _ in rows)
    trans_all = min(tr for _, tr, _, _ in rows)
    overall = min(rate for _, _, rate, _ in rows)
    bound = min(rows, key=lambda row: row[2])[3]
    kernels: list[KernelEstimate] = []
    weighted, active = 0.0, 0
    for i, ((cr, tr, rate, kb), k, c) in enumerate(zip(rows, pl.kernels, costs, strict=True)):
        pes = k.pes * n
        util = c.arith_share(k.pes, overall / n, r)
        weighted += util * pes
        active += pes
        kernels.append(
            KernelEstimate(
                k.name,
                k.block,
                k.kernel,
                pes,
                rate,
                cr,
                tr,
                util,
                kb,
                n * pl.ports if i == 0 else 0.0,
            )
        )
    wafer_rate = min(min(cr, tr) for cr, tr, _, _ in rows)
    return Estimate(
        samples_per_sec=overall,
        compute_samples_per_sec=compute_all,
        transmission_samples_per_sec=trans_all,
        active_pes=active,
        total_pes=wafer.pes,
        compute_utilization=weighted / active if active else 0.0,
        bound=bound,
        kernels=tuple(kernels),
        input_samples_per_sec=in_rate,
        wafer_samples_per_sec=wafer_rate,
        ports_used=n * pl.ports,
        io_samples_per_sec=io_rate,
    )
