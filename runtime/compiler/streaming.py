"""Pass 3+4 (weight streaming): one layer at a time on the whole wafer, weights from MemoryX.

Cerebras' Weight Streaming Execution page (docs/sources.md): per layer, MemoryX streams its weights
in (SwarmX broadcasts them to every CS-X), the wafer computes the forward for its share of the batch
and keeps the layer's output; after the loss, per layer in reverse: weights in again (the output
layer's stay from its forward), the backward, gradients out to SwarmX (summed over the systems) and
MemoryX (which updates).

1. Batch. Each of the num_csx systems takes b = ceil(batch / num_csx) samples. When the
   activations of b samples do not fit on the wafer with the layers' weights, b is split into
   the FEWEST micro-batches of m samples that fit (gradients accumulate over them); each
   micro-batch streams every layer's weights again (that extra streaming is charged).
2. Memory (usable SRAM: 48 KiB less the program's reserve per PE). While a layer runs the wafer
   holds its weights and the next layer's (double buffering, when both fit; else streaming
   cannot overlap compute), its FP32 gradient, and its working set: the inputs its backward
   needs (dense: x for dW; attention: q, k, v; elementwise ops are recomputed) for m samples.
   Every layer's output is kept for the backward: on the wafer while room is left, the rest is
   offloaded to MemoryX through the ports and read back in the backward (charged as stream).
   A layer whose own weights and gradient cannot fit is refused, naming it.
3. Time of a layer pass (forward, or backward with the forward recomputed), per micro-batch:
     compute = sum over its ops of PE-cycles x m / (PEs x clock x KERNEL_PEAK_SHARE)
               + a fill/drain of the fabric per op ((width + height) hops)
     stream  = weights in (and, backward, FP32 gradients out: full duplex, the longer counts)
               at the ports' line rate less framing, plus the activations offloaded
     fixed   = LAYER_PASS_SECONDS (calibration.py): starting the layer's stream, the wafer's
               fill and drain for it
     time    = max(compute, stream) + fixed   (streaming overlaps compute when double buffered)
   Each pass names its bound: compute, stream, or fabric (the fixed cost dominates).
4. Several systems: SwarmX broadcasts the same weights to all (no faster than one system's
   ports) and sums their gradients through a tree of ceil(log2 n) levels, each a store-and-
   forward of one RoCE message; every system computes only its b samples, but the fixed costs
   and the streaming do not shrink, so n systems are less than n times as fast.
Samples/s = batch / (micro-batches x sum of pass times), at most the input cluster's rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.calibration import LAYER_PASS_SECONDS
from cs2sim.runtime.compiler.cost import OpCost, Rates, rates
from cs2sim.runtime.compiler.errors import PlacementError
from cs2sim.runtime.compiler.estimate import Estimate
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.runtime.compiler.io import InputCluster
from cs2sim.runtime.compiler.placement import fmt_bytes
from cs2sim.system.hardware import ROCE_OVERHEAD_BYTES, ROCE_PAYLOAD_BYTES, WaferSpec

__all__ = ["LayerPlan", "StreamPlan", "plan_streaming", "MEMORY_COST"]

MEMORY_COST = 1.10  # micro-batching that costs more than 10% names "memory" as the bound


@dataclass(frozen=True)
class LayerPlan:
    """One layer (block) of the schedule; times in seconds per micro-batch pass."""

    name: str
    block: str
    weight_bytes: int
    grad_bytes: int
    fwd_compute: float
    fwd_stream: float
    bwd_compute: float
    bwd_stream: float
    fixed: float  # per pass (forward or backward)
    overlap: bool  # streaming overlaps compute (two layers' weights fit)
    retained: bool  # weights kept on the wafer from forward to backward (the output layer)
    kept_bytes: int  # its output for one micro-batch, kept for the backward
    offloaded_bytes: int  # the part of kept_bytes that goes to MemoryX and back

    def _pass(self, compute: float, stream: float) -> float:
        return (max(compute, stream) if self.overlap else compute + stream) + self.fixed

    @property
    def fwd_seconds(self) -> float:
        """Forward pass time."""
        return self._pass(self.fwd_compute, self.fwd_stream)

    @property
    def bwd_seconds(self) -> float:
        """Backward pass time (the forward recomputed, then the backward)."""
        return self._pass(self.bwd_compute, self.bwd_stream)

    @staticmethod
    def _bound(compute: float, stream: float, fixed: float) -> str:
        return max((compute, "compute"), (stream, "stream"), (fixed, "fabric"))[1]

    @property
    def fwd_bound(self) -> str:
        """What limits the forward pass."""
        return self._bound(self.fwd_compute, self.fwd_stream, self.fixed)

    @property
    def bwd_bound(self) -> str:
        """What limits the backward pass."""
        return self._bound(self.bwd_compute, self.bwd_stream, self.fixed)

    @property
    def bound(self) -> str:
        """What limits the layer over a step (forward + backward)."""
        return self._bound(
            self.fwd_compute + self.bwd_compute, self.fwd_stream + self.bwd_stream, 2 * self.fixed
        )


@dataclass(frozen=True)
class StreamPlan:
    """The weight-streaming schedule and its estimate."""

    layers: tuple[LayerPlan, ...]
    num_csx: int
    batch_per_system: int
    micro_batch_size: int
    micro_batches: int
    activation_bytes: int  # layer outputs kept on one wafer, one micro-batch
    offloaded_bytes: int  # layer outputs offloaded to MemoryX, one micro-batch
    working_bytes: int  # the largest layer's working set, one micro-batch
    weights_bytes: int  # weight and gradient buffers on the wafer
    reduce_seconds: float  # SwarmX tree latency per step
    estimate: Estimate


@dataclass(frozen=True)
class _Layer:
    block: str
    ops: tuple[OpCost, ...]
    w: int  # weight bytes
    gr: int  # gradient bytes
    out: int  # output bytes per sample
    keep: int  # working set per sample (inputs its backward needs)


def _layers(g: Graph, costs: tuple[OpCost, ...]) -> list[_Layer]:
    by: dict[str, list[OpCost]] = {}
    for c in costs:
        by.setdefault(c.block, []).append(c)
    out = []
    for blk in g.blocks:
        ops = by.get(blk)
        if not ops:
            continue
        params = g.block_params(blk)
        out.append(
            _Layer(
                blk,
                tuple(ops),
                params * g.act_bytes,
                params * 4,
                ops[-1].boundary_bytes,
                sum(o.keep_bytes for o in ops),
            )
        )
    return out


def _buffers(layers: list[_Layer]) -> tuple[int, int, str]:
    """(single-buffered bytes, double-buffered bytes, the largest layer) for weights + grads."""
    big = max(layers, key=lambda ly: ly.w + ly.gr)
    top_w = sorted((ly.w for ly in layers), reverse=True)
    second = top_w[1] if len(top_w) > 1 else 0
    return big.w + big.gr, big.w + big.gr + second, big.block


def _compute(ops: tuple[OpCost, ...], m: int, N: int, r: Rates, backward: bool) -> float:
    t = 0.0
    for o in ops:
        cycles = o.fwd_cycles + (o.bwd_cycles if backward else 0.0)
        pes = min(N, o.ws_units * m)
        t += cycles * m / (pes * r.clock_hz * r.peak_share)
        t += r.fill_seconds * (2 if backward else 1)
    return t


def _schedule(
    g: Graph,
    layers: list[_Layer],
    wafer: WaferSpec,
    r: Rates,
    m: int,
    capacity: int,
    single: int,
    double: int,
) -> tuple[list[LayerPlan], int, int, int]:
    """The passes for micro-batches of m samples: (plans, kept on wafer, offloaded, working)."""
    N = wafer.pes
    working = max(ly.keep for ly in layers) * m
    overlap = double + working <= capacity
    room = max(0, capacity - (double if overlap else single) - working)
    kept_total = sum(ly.out for ly in layers) * m
    kept = min(kept_total, room)
    offload_share = (kept_total - kept) / kept_total if kept_total else 0.0
    io = r.io_bytes_s
    weighted = [ly.block for ly in layers if ly.w > 0]
    out_layer = weighted[-1] if weighted else None
    plans = []
    for ly in layers:
        retained = ly.block == out_layer
        off = int(ly.out * m * offload_share)
        fwd_stream = max(ly.w, off) / io  # weights in, offloaded output out (full duplex)
        bwd_stream = max((0 if retained else ly.w) + off, ly.gr) / io
        plans.append(
            LayerPlan(
                name=ly.block,
                block=ly.block,
                weight_bytes=ly.w,
                grad_bytes=ly.gr,
                fwd_compute=_compute(ly.ops, m, N, r, False),
                fwd_stream=fwd_stream,
                bwd_compute=_compute(ly.ops, m, N, r, True),
                bwd_stream=bwd_stream,
                fixed=LAYER_PASS_SECONDS,
                overlap=overlap,
                retained=retained,
                kept_bytes=ly.out * m,
                offloaded_bytes=off,
            )
        )
    return plans, kept, kept_total - kept, working


def _step(plans: list[LayerPlan], k: int, reduce_s: float) -> float:
    return k * sum(p.fwd_seconds + p.bwd_seconds for p in plans) + reduce_s


def plan_streaming(
    g: Graph,
    costs: tuple[OpCost, ...],
    wafer: WaferSpec,
    num_csx: int = 1,
    input_cluster: InputCluster | None = None,
) -> StreamPlan:
    """Pass 3+4 (weight streaming): the per-layer schedule and its estimate."""
    r = rates(wafer)
    layers = _layers(g, costs)
    capacity = wafer.usable_sram_bytes
    single, double, biggest = _buffers(layers)
    _refuse_an_unstreamable_layer(g, layers, wafer, single, biggest)
    b = max(1, math.ceil(g.batch_size / num_csx))
    per_sample = max(ly.keep for ly in layers)
    if single + per_sample > capacity:
        raise PlacementError(
            f"{g.model} in weight streaming cannot hold even one sample: the working set of one "
            f"sample ({fmt_bytes(per_sample)}) plus a layer's weights exceeds the "
            f"{fmt_bytes(capacity)} of the {wafer.name}; lower max_sequence_length."
        )
    k = math.ceil(b / ((capacity - single) // per_sample))  # the fewest micro-batches that fit
    m = math.ceil(b / k)
    depth = math.ceil(math.log2(num_csx)) if num_csx > 1 else 0
    msg_s = (ROCE_PAYLOAD_BYTES + ROCE_OVERHEAD_BYTES) / r.port_bytes_s
    # per layer: one broadcast level and one reduce level per tree level, every micro-batch
    reduce_s = k * len(layers) * 2 * depth * msg_s
    plans, kept, offloaded, working = _schedule(g, layers, wafer, r, m, capacity, single, double)
    step = _step(plans, k, reduce_s)
    B = g.batch_size
    comp = k * sum(p.fwd_compute + p.bwd_compute for p in plans)
    strm = k * sum(p.fwd_stream + p.bwd_stream for p in plans)
    flops = sum(c.fwd_flops + c.bwd_flops for c in costs) * b
    peak = wafer.pes * r.flops_per_cycle * r.clock_hz
    wafer_rate = B / step if step else math.inf
    bound = _busiest(plans)  # what the passes spend most time on, over the step
    if k > 1:
        one, *_ = _schedule(g, layers, wafer, r, b, 10**30, single, double)
        if step > MEMORY_COST * _step(one, 1, reduce_s / k):
            bound = "memory"
    rate = wafer_rate
    in_rate = input_cluster.samples_per_sec if input_cluster else None
    if in_rate is not None and in_rate < rate:
        rate, bound = in_rate, "input"
    est = Estimate(
        samples_per_sec=rate,
        compute_samples_per_sec=B / comp if comp else math.inf,
        transmission_samples_per_sec=B / strm if strm else math.inf,
        active_pes=wafer.pes,
        total_pes=wafer.pes,
        compute_utilization=min(1.0, flops / (step * peak)) if step else 0.0,
        bound=bound,
        input_samples_per_sec=in_rate,
        wafer_samples_per_sec=wafer_rate,
    )
    return StreamPlan(
        tuple(plans),
        num_csx,
        b,
        m,
        k,
        kept,
        offloaded,
        working,
        double if plans and plans[0].overlap else single,
        reduce_s,
        est,
    )


def _refuse_an_unstreamable_layer(
    g: Graph, layers: list[_Layer], wafer: WaferSpec, single: int, biggest: str
) -> None:
    """PlacementError when the biggest layer's weights and gradient alone overflow the wafer's
    data memory: weight streaming runs one whole layer at a time."""
    capacity = wafer.usable_sram_bytes
    if single > capacity:
        big = next(ly for ly in layers if ly.block == biggest)
        raise PlacementError(
            f"layer '{biggest}' of {g.model} cannot be streamed: its weights "
            f"({fmt_bytes(big.w)}) and FP32 gradient ({fmt_bytes(big.gr)}) do not fit the "
            f"{fmt_bytes(capacity)} the {wafer.name} holds for data, and weight streaming runs "
            "one whole layer at a time; make that layer smaller (hidden_size, filter_size or "
            "vocab_size)."
        )


def _busiest(plans: list[LayerPlan]) -> str:
    """The bound the passes spend most time on, summed over the layers."""
    spent: dict[str, float] = {}
    for p in plans:
        for bound, t in ((p.fwd_bound, p.fwd_seconds), (p.bwd_bound, p.bwd_seconds)):
            spent[bound] = spent.get(bound, 0.0) + t
    bound = max(spent, key=lambda key: spent[key])
    return bound
