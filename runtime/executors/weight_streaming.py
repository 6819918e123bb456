"""The weight-streaming executor: one layer at a time on N CS-X systems, weights in MemoryX.

Cerebras' Weight Streaming Execution page (docs/sources.md): in weight streaming the model's weights
live in MemoryX, outside the systems; each layer's weights are streamed to the wafer(s) for its
forward and again for its backward, the activations stay on the wafer between layers, the output
layer's weights are kept from its forward to its backward, gradients stream back out, and MemoryX
applies the optimizer. With N systems SwarmX broadcasts every layer to all of them and sums their
gradients; each system trains on its 1/N share of the global batch (data parallel).

The compiled plan says what runs (runtime/compiler/plan.py): its `layers`, in order, are the
streamed layers (each one broadcast: a group of consecutive model blocks, a block the plan lists no
layer for joining the layer before it) and the one marked `retained` keeps its weights on the wafer
from its forward to its backward; when its activations do not fit one wafer the plan splits each
system's samples into `micro_batches` of `micro_batch_size`, which the step runs one after
another (gradient accumulation, runtime/executors/accumulate.py: the plan's micro-batch where the
params leave it to the compiler), every micro-batch streaming every layer again, its gradients
adding to the step's in MemoryX before the one update. Without a plan every model block is a
layer, the last one is retained, and the batch is one pass. `trace` records what was streamed:
(step, layer, "F" | "B", broadcast).

One global step (global batch B, N systems, layers as above, the last holding the loss head):
  forward   for each layer k: SwarmX broadcasts its weights; every system runs it on its shard
            (activations kept per system: a replica of the layers per system, replicas.py)
  loss      system i's loss head is seeded with loss_scale * b_i / B; the step's loss is
            sum_i loss_i * b_i / B, the host's mean over the batch
  backward  for each layer k from the last: SwarmX re-broadcasts its weights (not the output
            layer's, still resident), every system runs its backward, SwarmX adds each system's
            gradient into MemoryX
  update    MemoryX: unscale and check, clip, optimizer step, loss-scale update

The N systems run one after the other in this process (the host has few cores and numpy already
uses them inside each layer); the numbers are those of N systems all the same.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.artifacts.checkpoint import TrainState
from cs2sim.runtime.executors.base import LoadReport, QueuedExecutor, StepResult
from cs2sim.runtime.executors.memoryx import MemoryX
from cs2sim.runtime.executors.planview import PlanView
from cs2sim.runtime.executors.replicas import (
    MaskBank,
    Shard,
    block_param_names,
    make_replica,
    shard_batch,
)
from cs2sim.runtime.executors.swarmx import SwarmX
from cs2sim.system.errors import RuntimeFailure

if TYPE_CHECKING:  # runtime.data is imported by the runs that build a stream
    from cs2sim.runtime.data.stream import Stream

__all__ = ["WeightStreamingExecutor", "StreamedLayer", "streamed_layers"]

log = logging.getLogger("cs2sim.run")
TRACE_EVENTS = 100_000


@dataclass(frozen=True)
class StreamedLayer:
    """One layer of the schedule: the model blocks streamed together (one broadcast)."""

    name: str
    blocks: tuple[int, ...]  # indices into model.blocks, consecutive
    retained: bool  # its weights stay on the wafer from its forward to its backward


def _plan_layers(plan: PlanView | None) -> list[dict[str, Any]] | None:
    """The plan's `layers`, or None without a plan (or one with no layers)."""
    return list(plan.layers) if plan is not None and plan.layers else None


def streamed_layers(block_names: list[str], plan: PlanView | None) -> list[StreamedLayer]:
    """The plan's streamed layers over the model's blocks (see the module docstring)."""
    entries = _plan_layers(plan)
    if entries is None:
        last = len(block_names) - 1
        return [StreamedLayer(n, (i,), i == last) for i, n in enumerate(block_names)]
    where = {n: i for i, n in enumerate(block_names)}
    starts = [where.get(e["block"], -1) for e in entries]
    if -1 in starts or starts != sorted(set(starts)):
        bad = next((e["block"] for e, s in zip(entries, starts, strict=True) if s == -1), None)
        what = (
            f"streams block {bad!r}, which this model does not have"
            if bad is not None
            else "streams this model's blocks out of their order"
        )
        raise RuntimeFailure(
            f"The compiled plan {what}; the compile is for another model or config: compile "
            "again (drop --cs_ip's cached cs_* directory or change model_dir)."
        )
    starts[0] = 0  # blocks before the first planned layer (no kernel) join it
    ends = [*starts[1:], len(block_names)]
    return [
        StreamedLayer(
            str(e.get("name", e["block"])), tuple(range(lo, hi)), bool(e.get("retained", False))
        )
        for e, lo, hi in zip(entries, starts, ends, strict=True)
    ]


class WeightStreamingExecutor(QueuedExecutor):
    """Train on N simulated CS-X systems in weight-streaming mode."""

    device = "CSX"
    # the Weight Streaming Quickstart (docs/sources.md): weights are loaded, then checkpoint 0 is
    # saved, after "Completed weight initialization on CPU in: ..."
    checkpoint_before_load = False
    announce_weight_init = True

    def __init__(
        self,
        num_csx: int = 1,
        plan: PlanView | None = None,
        *,
        compile_time: float | None = None,
        est_samples_per_sec: float | None = None,
        queue_depth: int = 16,
        **kw: Any,
    ) -> None:
        super().__init__(queue_depth, **kw)
        if num_csx < 1:
            raise ValueError(f"num_csx must be >= 1, not {num_csx}")
        self.num_csx = int(num_csx)
        self.plan = plan
        self.compile_time, self.est_samples_per_sec = compile_time, est_samples_per_sec
        self.memoryx: MemoryX | None = None
        self.swarmx: SwarmX | None = None
        self.systems: list[Any] = []
        self.layers: list[StreamedLayer] = []
        self.trace: deque[tuple[int, str, str, bool]] = deque(maxlen=TRACE_EVENTS)
        self.keep_trace = True

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict[str, Any]) -> LoadReport:
        """MemoryX takes the weights and optimizer; SwarmX and the N systems are set up."""
        super().load(model, optimizer, scaler, params)
        t0 = time.perf_counter()
        self.memoryx = MemoryX(model, optimizer, scaler, params.get("optimizer") or {})
        self.layers = streamed_layers(list(model.block_names), self.plan)
        per_block = block_param_names(model)
        self.swarmx = SwarmX(
            self.memoryx,
            self.num_csx,
            [
                list(dict.fromkeys(n for b in lay.blocks for n in per_block[b]))
                for lay in self.layers
            ],
        )
        by_id = {id(a): n for n, a in model.parameters().items()}
        weights = {i: self.swarmx.weights[n] for i, n in by_id.items()}
        grads = {i: self.swarmx.grads[n] for i, n in by_id.items()}
        self.bank = MaskBank()
        self.shards = [Shard() for _ in range(self.num_csx)]
        scratch: dict[str, dict[str, Any]] = {}  # the systems run one after another: share scratch
        self.systems = [
            make_replica(model, weights, grads, bank=self.bank, shard=s, scratch=scratch)
            for s in self.shards
        ]
        for system in self.systems:
            system.train()
        took = time.perf_counter() - t0
        log.info(f"Loading CPU pre-initialized weights took {took:.3f} seconds")
        log.debug(
            f"MemoryX holds {self.memoryx.nbytes} bytes; {self.num_csx} CS-X system(s), "
            f"{len(self.layers)} layers streamed per step"
        )
        return LoadReport(self.compile_time, took, self.est_samples_per_sec)

    def summary_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """MemoryX's master weights and reduced gradients."""
        assert self.memoryx is not None, "load() first"
        return self.memoryx.weights, self.memoryx.grads

    def begin_gradients(self) -> None:
        """A new step: the first contribution to each of MemoryX's accumulators replaces it."""
        assert self.swarmx is not None, "load() first"
        self.swarmx.begin_step()

    def end_gradients(self) -> None:
        """Zero the accumulators no layer contributed to."""
        assert self.swarmx is not None
        self.swarmx.end_step()

    def apply_update(self, step: int, loss: float, scale: float) -> StepResult:
        """MemoryX's update: unscale and check, clip, optimizer step, loss scale."""
        assert self.memoryx is not None, "load() first"
        isfinite, norm, lr, used = self.memoryx.apply_update(step)
        return StepResult(loss, lr, used, isfinite, norm)

    def compute_gradients(self, batch: dict[str, np.ndarray], step: int, scale: float) -> float:
        """Forward and backward of one (micro-)batch over the N systems, the plan's layers one at
        a time: adds the gradient of scale * loss into MemoryX's accumulators; returns the
        batch's loss. (The plan's micro-batches are the step's: base.py, accumulate.py.)"""
        mx, sx = self.memoryx, self.swarmx
        assert mx is not None and sx is not None, "load() first"
        parts, shards = shard_batch(batch, self.num_csx)
        n = len(parts)
        for holder, s in zip(self.shards, shards, strict=False):
            holder.lo, holder.hi, holder.total = s.lo, s.hi, s.total
        self.bank.reset(shards[0].total)
        systems = self.systems[:n]
        inputs = [sys_.inputs(part) for sys_, part in zip(systems, parts, strict=True)]
        acts: list[Any] = [x for x, _ in inputs]
        losses = [0.0] * n
        last = len(self.model.blocks) - 1  # the loss head
        record = self.trace.append if self.keep_trace else None
        for k, layer in enumerate(self.layers):  # forward, one streamed layer at a time
            sx.broadcast(k)
            if record:
                record((step, layer.name, "F", True))
            for i, sys_ in enumerate(systems):
                x = acts[i]
                for b in layer.blocks:
                    if b == last:
                        losses[i] = float(sys_.blocks[b].forward(x, inputs[i][1]))
                    else:
                        x = sys_.blocks[b].forward(x)
                acts[i] = x
        for k in range(len(self.layers) - 1, -1, -1):  # backward; the retained layer's weights
            layer = self.layers[k]  # are still on the wafer
            if not layer.retained:
                sx.broadcast(k)
            if record:
                record((step, layer.name, "B", not layer.retained))
            for i, sys_ in enumerate(systems):
                d = acts[i]
                for b in reversed(layer.blocks):
                    d = (
                        sys_.blocks[b].backward(scale * shards[i].weight)
                        if b == last
                        else sys_.blocks[b].backward(d)
                    )
                acts[i] = d
                sx.reduce(k)
        return float(np.float32(sum(lo * s.weight for lo, s in zip(losses, shards, strict=True))))

    def snapshot(self, step: int, stream: Stream) -> TrainState:
        """A checkpoint read from MemoryX."""
        assert self.memoryx is not None
        return self.memoryx.state(step, stream, self.model)
