"""Pass 3 (pipelined), placement: every kernel a rectangle of PEs, sized to balance the pipeline.

1. Each kernel needs at least `ceil(bytes / 48 KiB)` PEs for its weights, optimizer state and
   in-flight activations (cost.py); if the sum exceeds the wafer the model does not fit:
   PlacementError with bytes needed, capacity and the fix (weight streaming).
2. Throughput is the slowest kernel's, so PEs go where they raise it: for a target rate R a kernel
   gets max(its memory minimum, R x PE-seconds per sample), never more than its work can use;
   R is the largest rate whose PEs fit the budget (bisection), and never above the system I/O
   rate (more PEs cannot beat the input stream).
3. The rectangles are laid out in serpentine bands: left to right along band 0, right to left
   along band 1, ..., so consecutive kernels always touch and activations flow between
   neighbours (the last kernel of a band spans its height to reach the next band).
   If the bands waste too much to fit, the budget shrinks a little and 2-3 repeat.
4. Replicas: when the model fills a small part of the wafer, the wafer is cut into 2, 4, 8 ...
   horizontal slabs, one copy of the model each (data parallel); the count with the best
   estimate wins, and more replicas must gain more than 1% (ties keep fewer copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cs2sim.runtime.compiler.cost import OpCost, rates
from cs2sim.runtime.compiler.errors import PlacementError
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.system.hardware import WaferSpec

__all__ = ["Rect", "KernelPlacement", "Placement", "place_pipelined", "min_pes",
           "fmt_bytes", "REPLICA_GAIN"]

REPLICA_GAIN = 1.01  # more copies of the model must beat fewer by more than 1%


@dataclass(frozen=True)
class Rect:
    """x, y of the top-left PE, width, height (PEs)."""

    x: int
    y: int
    w: int
    h: int

    @property
    def pes(self) -> int:
        """PEs inside."""
        return self.w * self.h

    def as_list(self) -> list[int]:
        """[x, y, w, h]."""
        return [self.x, self.y, self.w, self.h]


@dataclass(frozen=True)
class KernelPlacement:
    """One kernel's rectangles (one per replica) and its PEs per replica."""

    name: str
    block: str
    kernel: str
    pes: int
    rects: tuple[Rect, ...]

    @property
    def rect(self) -> Rect:
        """The first replica's rectangle."""
        return self.rects[0]


@dataclass(frozen=True)
class Placement:
    """The pipelined placement of one model."""

    kernels: tuple[KernelPlacement, ...]
    replicas: int
    region: tuple[int, int]  # (width, height) of one replica's slab
    budget_rate: float  # the compute rate per replica the sizes aimed at (samples/s)
    needed_bytes: int  # sum of the kernels' on-wafer bytes (one replica)


def fmt_bytes(n: float) -> str:
    """1.5 GB style (decimal units, as the hardware facts are quoted)."""
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def min_pes(costs: tuple[OpCost, ...], wafer: WaferSpec) -> np.ndarray:
    """PEs each kernel needs for its bytes (at least one)."""
    b = np.array([c.min_bytes for c in costs], dtype=np.float64)
    return np.maximum(1, np.ceil(b / wafer.sram_per_pe_bytes)).astype(np.int64)


def _sizes(m: np.ndarray, cap: np.ndarray, sec: np.ndarray, budget: int,
           r_hi: float) -> tuple[np.ndarray, float]:
    """PEs per kernel for the largest rate R <= r_hi whose PEs fit `budget` (bisection)."""
    def need(R: float) -> np.ndarray:
        return np.maximum(m, np.minimum(cap, np.ceil(R * sec))).astype(np.int64)

    lo, hi = 0.0, r_hi
    if need(hi).sum() <= budget:
        return need(hi), hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if need(mid).sum() <= budget:
            lo = mid
        else:
            hi = mid
    return need(lo), lo


def _pack(p: np.ndarray, W: int, H: int, y0: int) -> list[Rect] | None:
    """Serpentine bands: the fewest bands (tallest) that hold every kernel, or None.

    Kernels sit top-aligned along a band; the last kernel of a band spans the band's height, so
    it touches the first kernel of the next band, which starts at the same end (the band broke
    because that kernel did not fit beside it, so the two overlap in x).
    """
    for k in range(1, H + 1):
        hb = H // k
        w = -(-p // hb)  # ceil
        if int(w.max()) > W or int(w.sum()) > k * W:
            continue
        placed: list[tuple[int, int, int, int]] = []  # (band, x, w, h)
        band, used = 0, 0
        for pi, wi in zip(p.tolist(), w.tolist(), strict=True):
            if used + wi > W:
                band, used = band + 1, 0
                if band >= k:
                    break
                b0, x0, w0, _ = placed[-1]
                placed[-1] = (b0, x0, w0, hb)  # turn the corner: full band height
            x = used if band % 2 == 0 else W - used - wi
            placed.append((band, x, wi, -(-pi // wi)))
            used += wi
        if len(placed) == len(p):
            return [Rect(x, y0 + b * hb, wi, hi) for b, x, wi, hi in placed]
    return None


def _place_replica(costs: tuple[OpCost, ...], m: np.ndarray, wafer: WaferSpec, W: int, H: int,
                   r_io: float) -> tuple[list[Rect], float] | None:
    """Rectangles of one replica in a W x H slab at y=0, and the rate they aim at."""
    r = rates(wafer)
    sec = np.array([c.cycles / r.clock_hz for c in costs])  # PE-seconds per sample
    cap = np.array([c.max_pes for c in costs], dtype=np.int64)
    r_hi = min(r_io, float(np.min(np.maximum(cap, m) / np.maximum(sec, 1e-30))))
    budget = W * H
    while budget >= int(m.sum()):
        p, rate = _sizes(m, cap, sec, budget, r_hi)
        rects = _pack(p, W, H, 0)
        if rects is not None:
            return rects, rate
        budget = int(budget * 0.97)
    return None


def place_pipelined(g: Graph, costs: tuple[OpCost, ...], wafer: WaferSpec,
                    replicas: int | None = None) -> Placement:
    """Pass 3 (pipelined): a Placement, or PlacementError when the model does not fit."""
    m = min_pes(costs, wafer)
    needed = int(sum(c.min_bytes for c in costs))
    capacity = wafer.fabric_sram_bytes
    if int(m.sum()) > wafer.pes:
        raise PlacementError(
            f"{g.model} needs {fmt_bytes(needed)} of on-wafer memory in pipelined mode (weights, "
            f"optimizer state and in-flight activations of {g.num_params:,} parameters), more "
            f"than the {fmt_bytes(capacity)} of the {wafer.name} ({wafer.pes:,} PEs x "
            f"{wafer.sram_per_pe_bytes // 1024} KiB); compile it for weight streaming with "
            "`python-ws run.py ...` on a system an admin has switched to weight streaming "
            "(`config execmode setup`).")
    r = rates(wafer)
    io_total = r.io_bytes_s / (g.input_bytes + 4)  # samples in, one loss value out
    counts = [replicas] if replicas else [1]
    if not replicas:
        n = 2
        while n <= 64 and int(m.sum()) * n <= wafer.pes:
            counts.append(n)
            n *= 2
    best: tuple[float, int, list[Rect], float] | None = None
    for n in counts:
        H = wafer.height // n
        got = _place_replica(costs, m, wafer, wafer.width, H, io_total / n)
        if got is None:
            continue
        rects, _ = got
        rate = n * min(min(rc.pes, c.max_pes) * r.clock_hz / c.cycles if c.cycles else math.inf
                       for rc, c in zip(rects, costs, strict=True))
        rate = min(rate, io_total)
        if best is None or rate > best[0] * REPLICA_GAIN:
            best = (rate, n, rects, got[1])
    if best is None:
        raise PlacementError(
            f"{g.model} needs {fmt_bytes(needed)} in pipelined mode and its {len(costs)} "
            f"kernels cannot be laid out as rectangles on the {wafer.name} "
            f"({fmt_bytes(capacity)}); compile it for weight streaming with `python-ws run.py "
            "...` on a system an admin has switched to weight streaming (`config execmode "
            "setup`).")
    _, n, rects, aim = best
    H = wafer.height // n
    kernels = tuple(
        KernelPlacement(c.name, c.block, c.kernel, rc.pes,
                        tuple(Rect(rc.x, rc.y + j * H, rc.w, rc.h) for j in range(n)))
        for rc, c in zip(rects, costs, strict=True))
    return Placement(kernels=kernels, replicas=n, region=(wafer.width, H), budget_rate=aim,
                     needed_bytes=needed)
