"""Pass 3 (pipelined), placement: every kernel a rectangle of PEs, sized to what feeds it.

1. Each kernel needs at least `ceil(bytes / usable PE memory)` PEs for its weights, optimizer
   state and in-flight activations (cost.py); if the sum exceeds the wafer the model does not
   fit: PlacementError with bytes needed, capacity and the fix (weight streaming).
2. Throughput is the slowest kernel's. For a target rate R a kernel gets max(its memory
   minimum, the PEs whose time per sample (arithmetic plus the vector ops they start) and
   whose ramps both keep up with R), never more than its knee (no vector op shorter than
   PIPE_OP_CYCLES x SIMD elements: cost.py knee_pes). R is the largest rate whose
   PEs fit the budget (bisection), and never more than what feeds the wafer: the ports routed
   to the input kernel (io.py) and, when known, the input cluster. So kernels are not grown
   past what feeds them.
3. The rectangles are laid out in serpentine bands: left to right along band 0, right to left
   along band 1, ..., so consecutive kernels always touch and activations flow between
   neighbours (the last kernel of a band spans its height to reach the next band). The input
   kernel sits at the west edge, where the ports are, in its natural shape (square tiles: as
   tall as wide), and takes the ports its edge touches: one port, or more when it needs more
   rows. If the bands waste too much to fit, the budget shrinks a little and 2-3 repeat.
4. Replicas (runconfig.multireplica): when the model fills a small part of the wafer, the
   wafer is cut into 2, 4, 8 ... horizontal slabs, one copy of the model each (data parallel,
   each with its own ports); the count with the best estimate wins, and more replicas must gain
   more than 1% (ties keep fewer copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cs2sim.runtime.compiler.cost import OpCost, Rates, rates
from cs2sim.runtime.compiler.errors import PlacementError
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.runtime.compiler.io import InputCluster, ports_touched
from cs2sim.system.hardware import WaferSpec

__all__ = [
    "Rect",
    "KernelPlacement",
    "Placement",
    "place_pipelined",
    "min_pes",
    "fmt_bytes",
    "REPLICA_GAIN",
    "wafer_sample_bytes",
]

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
    budget_rate: float  # the rate per replica the sizes aimed at (samples/s)
    needed_bytes: int  # sum of the kernels' on-wafer bytes (one replica)
    ports: float  # ports feeding each replica's input kernel


def fmt_bytes(n: float) -> str:
    """1.5 GB style (decimal units, as the hardware facts are quoted)."""
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{int(n)} B"


def wafer_sample_bytes(g: Graph) -> int:
    """Bytes of one sample through the ports: its input and labels in, one loss value out."""
    return g.input_bytes + 4


def min_pes(costs: tuple[OpCost, ...], wafer: WaferSpec) -> np.ndarray:
    """PEs each kernel needs for its bytes (at least one)."""
    b = np.array([c.min_bytes for c in costs], dtype=np.float64)
    per = max(1, wafer.usable_per_pe_bytes)
    return np.maximum(1, np.ceil(b / per)).astype(np.int64)


class _Need:
    """PEs each kernel needs to run at a rate R (vectorised over the kernels).

    A PE's time per sample is arith / p + op_cycles x ops(p) (cost.py): ops(p) = 4 sqrt(work / p)
    for a matrix kernel, 2 for a stream kernel; its ramp takes 4 sqrt(work / p) x positions
    (matrix) or wavelets x work / p (stream) wavelets. Both must fit in clock / R cycles."""

    def __init__(self, costs: tuple[OpCost, ...], m: np.ndarray, r: Rates) -> None:
        self.m = m
        self.cap = np.array([c.max_pes for c in costs], dtype=np.int64)
        self.arith = np.array([c.pipe_arith for c in costs], dtype=np.float64)
        self.mat = np.array([c.dataflow == "matrix" for c in costs])
        self.work = np.array([c.work for c in costs], dtype=np.float64)
        self.wav = np.array([c.wavelets for c in costs])
        self.pos = np.array([c.positions for c in costs], dtype=np.float64)
        self.c0 = r.op_cycles
        self.clock = r.clock_hz

    def __call__(self, R: float) -> np.ndarray:
        C = self.clock / max(R, 1e-300)  # cycles a sample may take
        # matrix: arith y^2 + 4 c0 sqrt(work) y <= C with y = 1 / sqrt(p)
        B = 4.0 * self.c0 * np.sqrt(self.work)
        A = np.maximum(self.arith, 1e-300)
        y = (-B + np.sqrt(B * B + 4.0 * A * C)) / (2.0 * A)
        p_mat = 1.0 / np.maximum(y, 1e-300) ** 2
        # stream: arith / p + 2 c0 <= C (beyond that no count of PEs is enough: the cap)
        spare = C - 2.0 * self.c0
        p_str = np.where(spare > 0, self.arith / np.maximum(spare, 1e-300), np.inf)
        comp = np.where(self.mat, p_mat, p_str)
        links = np.where(self.mat, self.work * (4.0 * self.pos / C) ** 2, self.wav * self.work / C)
        want = np.ceil(np.minimum(np.maximum(comp, links), 1e18))
        pes: np.ndarray = np.maximum(self.m, np.minimum(self.cap, want)).astype(np.int64)
        return pes

    def per_sample(self, p: np.ndarray) -> np.ndarray:
        """Cycles per sample of each kernel on p PEs: the slower of its PEs' time and ramp."""
        p = np.maximum(p, 1).astype(np.float64)
        tile = np.maximum(self.work / p, 1.0)
        ops = np.where(self.mat, 4.0 * np.sqrt(tile), 2.0)
        pe = self.arith / p + self.c0 * ops
        ramp = np.where(self.mat, 4.0 * np.sqrt(tile) * self.pos, np.maximum(self.wav, 1.0) * tile)
        cycles: np.ndarray = np.maximum(pe, ramp)
        return cycles

    def top(self) -> float:
        """The fastest rate the kernels can reach at their useful PEs."""
        p = np.maximum(self.cap, self.m)
        return float(np.min(self.clock / self.per_sample(p)))


def _sizes(need: _Need, budget: int, r_hi: float) -> tuple[np.ndarray, float]:
    """PEs per kernel for the largest rate R <= r_hi whose PEs fit `budget` (bisection)."""
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

    Bands are at most twice as tall as the largest kernel is wide when square (a small model
    does not become a row of one-PE-wide columns). Kernels sit top-aligned along a band; the
    last kernel of a band spans the band's height, so
    it touches the first kernel of the next band, which starts at the same end (the band broke
    because that kernel did not fit beside it, so the two overlap in x). The first kernel (the
    input kernel, at the west edge) keeps square tiles: it is at least as wide as tall.
    """
    # bands no taller than twice the side of the largest kernel's square: kernels keep tiles
    # near square instead of becoming one-PE-wide columns
    side = math.isqrt(max(int(p.max()) - 1, 0)) + 1
    for k in range(max(1, -(-H // (2 * side))), H + 1):
        hb = H // k
        w = -(-p // hb)  # ceil
        w[0] = max(int(w[0]), math.isqrt(max(int(p[0]) - 1, 0)) + 1)  # square-ish input kernel
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
            placed.append((band, x, wi, min(hb, -(-pi // wi))))
            used += wi
        if len(placed) == len(p):
            return [Rect(x, y0 + b * hb, wi, hi) for b, x, wi, hi in placed]
    return None


def _place_replica(
    need: _Need, wafer: WaferSpec, W: int, H: int, r_hi: float
) -> tuple[list[Rect], float] | None:
    """Rectangles of one replica in a W x H slab at y=0, and the rate they aim at."""
    budget = W * H
    while budget >= int(need.m.sum()):
        p, rate = _sizes(need, budget, r_hi)
        rects = _pack(p, W, H, 0)
        if rects is not None:
            return rects, rate
        budget = int(budget * 0.97)
    return None


def _feed(
    g: Graph,
    need: _Need,
    wafer: WaferSpec,
    r: Rates,
    W: int,
    H: int,
    n: int,
    input_rate: float | None,
) -> tuple[list[Rect], float, float] | None:
    """Placement of one replica aimed at what feeds it: (rects, aimed rate, ports)."""
    per_sample = wafer_sample_bytes(g)
    top = need.top()
    if input_rate is not None:
        top = min(top, input_rate / n)
    best: tuple[list[Rect], float, float] | None = None
    q = 1
    max_ports = max(1, wafer.ports // n) if n <= wafer.ports else 1
    while q <= max_ports:
        share = ports_touched(0, 1, wafer, n) if n > wafer.ports else q
        aim = min(top, share * r.port_bytes_s / per_sample)
        got = _place_replica(need, wafer, W, H, aim)
        if got is None:
            break
        rects, rate = got
        have = ports_touched(0, rects[0].h, wafer, n)
        if best is not None and have < q:
            break  # the input kernel is too short to take another port
        best = (rects, rate, min(have, float(q)) if n <= wafer.ports else have)
        if aim >= top or rate < aim * 0.999:
            break  # compute, not the ports, is the limit now
        q += 1
    return best


def place_pipelined(
    g: Graph,
    costs: tuple[OpCost, ...],
    wafer: WaferSpec,
    replicas: int | None = None,
    multireplica: bool = False,
    input_cluster: InputCluster | None = None,
) -> Placement:
    """Pass 3 (pipelined): a Placement, or PlacementError when the model does not fit."""
    m = min_pes(costs, wafer)
    needed = int(sum(c.min_bytes for c in costs))
    capacity = wafer.usable_sram_bytes
    if int(m.sum()) > wafer.pes:
        raise PlacementError(
            f"{g.model} needs {fmt_bytes(needed)} of on-wafer memory in pipelined mode (weights, "
            f"optimizer state and in-flight activations of {g.num_params:,} parameters), more "
            f"than the {fmt_bytes(capacity)} the {wafer.name}'s {wafer.pes:,} PEs hold for data "
            f"({wafer.usable_per_pe_bytes // 1024} KiB each); compile it for weight streaming "
            "with `python-ws run.py ...` on a system an admin has switched to weight streaming "
            "(`config execmode setup`)."
        )
    r = rates(wafer)
    need = _Need(costs, m, r)
    input_rate = input_cluster.samples_per_sec if input_cluster else None
    counts = [replicas] if replicas else [1]
    if not replicas and multireplica:
        n = 2
        while n <= 64 and int(m.sum()) * n <= wafer.pes:
            counts.append(n)
            n *= 2
    best: tuple[float, int, list[Rect], float, float] | None = None
    for n in counts:
        H = wafer.height // n
        got = _feed(g, need, wafer, r, wafer.width, H, n, input_rate)
        if got is None:
            continue
        rects, aim, ports = got
        comp = min(min(c.samples_per_sec(rc.pes, r)) for rc, c in zip(rects, costs, strict=True))
        rate = n * min(comp, ports * r.port_bytes_s / wafer_sample_bytes(g))
        if input_rate is not None:
            rate = min(rate, input_rate)
        if best is None or rate > best[0] * REPLICA_GAIN:
            best = (rate, n, rects, aim, ports)
    if best is None:
        raise PlacementError(
            f"{g.model} needs {fmt_bytes(needed)} in pipelined mode and its {len(costs)} "
            f"kernels cannot be laid out as rectangles on the {wafer.name} "
            f"({fmt_bytes(capacity)} for data); compile it for weight streaming with "
            "`python-ws run.py ...` on a system an admin has switched to weight streaming "
            "(`config execmode setup`)."
        )
    _, n, rects, aim, ports = best
    H = wafer.height // n
    kernels = tuple(
        KernelPlacement(
            c.name,
            c.block,
            c.kernel,
            rc.pes,
            tuple(Rect(rc.x, rc.y + j * H, rc.w, rc.h) for j in range(n)),
        )
        for rc, c in zip(rects, costs, strict=True)
    )
    return Placement(
        kernels=kernels,
        replicas=n,
        region=(wafer.width, H),
        budget_rate=aim,
        needed_bytes=needed,
        ports=ports,
    )
