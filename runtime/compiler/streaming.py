"""Pass 3+4 (weight streaming): one layer at a time on the whole wafer, weights from MemoryX.

Seed 004: per layer, MemoryX streams its weights in (SwarmX broadcasts them to every CS-X), the
wafer computes the forward for its share of the batch and keeps the activations; after the loss,
per layer in reverse: weights in again (the output layer's are kept from its forward), the
backward, gradients out to SwarmX (summed over the systems) and MemoryX (which updates).

Per layer (a model block), for b = ceil(batch / num_csx) samples on each system:
  compute  = sum over its ops of cycles x b / (min(wafer PEs, useful PEs x b) x clock);
             the backward also recomputes the layer's forward (only layer outputs are kept)
  stream   = weight bytes / system I/O (forward); weights + gradients / system I/O (backward)
  time     = max(compute, stream): streaming overlaps compute, the slower one bounds the layer
Samples/s = batch / sum of layer times; compute and transmission samples/s are the same with
only compute or only streaming counted. The wafer must hold the activations kept between layers
for b samples plus two layers' weights (one computing, the next streaming in).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.cost import OpCost, rates
from cs2sim.runtime.compiler.errors import PlacementError
from cs2sim.runtime.compiler.estimate import Estimate
from cs2sim.runtime.compiler.graph import Graph
from cs2sim.runtime.compiler.placement import fmt_bytes
from cs2sim.system.hardware import WaferSpec

__all__ = ["LayerPlan", "StreamPlan", "plan_streaming"]


@dataclass(frozen=True)
class LayerPlan:
    """One layer (block) of the weight-streaming schedule; times in seconds per step."""

    name: str
    block: str
    weight_bytes: int
    fwd_compute: float
    fwd_stream: float
    bwd_compute: float
    bwd_stream: float
    retained: bool  # weights kept on the wafer from forward to backward (the output layer)

    @property
    def fwd_seconds(self) -> float:
        """Forward time: the slower of compute and streaming."""
        return max(self.fwd_compute, self.fwd_stream)

    @property
    def bwd_seconds(self) -> float:
        """Backward time: the slower of compute and streaming."""
        return max(self.bwd_compute, self.bwd_stream)

    @property
    def bound(self) -> str:
        """"stream" when streaming takes longer than compute over the layer's step."""
        return ("stream" if self.fwd_stream + self.bwd_stream > self.fwd_compute + self.bwd_compute
                else "compute")


@dataclass(frozen=True)
class StreamPlan:
    """The weight-streaming schedule and its estimate."""

    layers: tuple[LayerPlan, ...]
    num_csx: int
    batch_per_system: int
    activation_bytes: int  # kept on one wafer between layers
    estimate: Estimate


def plan_streaming(g: Graph, costs: tuple[OpCost, ...], wafer: WaferSpec,
                   num_csx: int = 1) -> StreamPlan:
    """Pass 3+4 (weight streaming): the per-layer schedule and its estimate."""
    r = rates(wafer)
    b = math.ceil(g.batch_size / num_csx)
    N = wafer.pes
    by_block: dict[str, list[OpCost]] = {}
    for c in costs:
        by_block.setdefault(c.block, []).append(c)
    blocks = [blk for blk in g.blocks if blk in by_block]
    weighted = [blk for blk in blocks if g.block_params(blk) > 0]
    out_layer = weighted[-1] if weighted else None
    layers: list[LayerPlan] = []
    keep = 0
    for blk in blocks:
        ops = by_block[blk]
        fwd_c = bwd_c = 0.0
        for c in ops:
            pes = min(N, c.max_pes * b)
            fwd_c += c.fwd_cycles * b / (pes * r.clock_hz)
            bwd_c += (c.fwd_cycles + c.bwd_cycles) * b / (pes * r.clock_hz)
        w = g.block_params(blk) * g.act_bytes
        retained = blk == out_layer
        fwd_s = w / r.io_bytes_s
        bwd_s = ((0 if retained else w) + w) / r.io_bytes_s
        layers.append(LayerPlan(blk, blk, w, fwd_c, fwd_s, bwd_c, bwd_s, retained))
        keep += ops[-1].boundary_bytes * b
    biggest = max((lp.weight_bytes for lp in layers), default=0)
    need = keep + 2 * biggest
    if need > wafer.fabric_sram_bytes:
        raise PlacementError(
            f"{g.model} in weight streaming needs {fmt_bytes(need)} on each wafer (activations "
            f"of {b} samples kept between layers plus two layers' weights), more than the "
            f"{fmt_bytes(wafer.fabric_sram_bytes)} of the {wafer.name}; lower "
            "train_input.batch_size or raise runconfig.num_csx to split the batch over more "
            "systems.")
    step = sum(lp.fwd_seconds + lp.bwd_seconds for lp in layers)
    comp = sum(lp.fwd_compute + lp.bwd_compute for lp in layers)
    strm = sum(lp.fwd_stream + lp.bwd_stream for lp in layers)
    B = g.batch_size
    flops = sum(c.fwd_flops + c.bwd_flops for c in costs) * b
    peak = N * r.flops_per_cycle * r.clock_hz
    est = Estimate(
        samples_per_sec=B / step if step else math.inf,
        compute_samples_per_sec=B / comp if comp else math.inf,
        transmission_samples_per_sec=B / strm if strm else math.inf,
        active_pes=N, total_pes=N,
        compute_utilization=min(1.0, flops / (step * peak)) if step else 0.0,
        bound="compute" if comp >= strm else "transmission")
    return StreamPlan(tuple(layers), num_csx, b, keep, est)
