"""The weight-streaming executor: one layer at a time on N CS-X systems, weights in MemoryX.

Seed 004: in weight streaming the model's weights live in MemoryX, outside the systems; each
layer's weights are streamed to the wafer(s) for its forward and again for its backward, the
activations stay on the wafer between layers, the output layer's weights are kept from its
forward to its backward, gradients stream back out, and MemoryX applies the optimizer. With N
systems SwarmX broadcasts every layer to all of them and sums their gradients; each system
trains on its 1/N share of the global batch (data parallel).

One global step (global batch B, N systems, layers = model.blocks, the last the loss head):
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
from typing import Any

import numpy as np

from cs2sim.runtime.artifacts.checkpoint import TrainState
from cs2sim.runtime.executors.base import LoadReport, QueuedExecutor, StepResult
from cs2sim.runtime.executors.memoryx import MemoryX
from cs2sim.runtime.executors.replicas import (
    MaskBank,
    Shard,
    block_param_names,
    make_replica,
    shard_batch,
)
from cs2sim.runtime.executors.swarmx import SwarmX

__all__ = ["WeightStreamingExecutor"]

log = logging.getLogger("cs2sim.run")


class WeightStreamingExecutor(QueuedExecutor):
    """Train on N simulated CS-X systems in weight-streaming mode."""

    device = "CSX"
    checkpoint_before_load = False  # seed 002: weights are loaded, then checkpoint 0 is saved
    announce_weight_init = True  # seed 002: "Completed weight initialization on CPU in: ..."

    def __init__(self, num_csx: int = 1, plan: Any = None, *, compile_time: float | None = None,
                 est_samples_per_sec: float | None = None, queue_depth: int = 16,
                 **kw: Any) -> None:
        super().__init__(queue_depth, **kw)
        if num_csx < 1:
            raise ValueError(f"num_csx must be >= 1, not {num_csx}")
        self.num_csx = int(num_csx)
        self.plan = plan
        self.compile_time, self.est_samples_per_sec = compile_time, est_samples_per_sec
        self.memoryx: MemoryX | None = None
        self.swarmx: SwarmX | None = None
        self.systems: list[Any] = []

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict) -> LoadReport:
        """MemoryX takes the weights and optimizer; SwarmX and the N systems are set up."""
        super().load(model, optimizer, scaler, params)
        t0 = time.perf_counter()
        self.memoryx = MemoryX(model, optimizer, scaler, params.get("optimizer") or {})
        self.swarmx = SwarmX(self.memoryx, self.num_csx, block_param_names(model))
        by_id = {id(a): n for n, a in model.parameters().items()}
        weights = {i: self.swarmx.weights[n] for i, n in by_id.items()}
        grads = {i: self.swarmx.grads[n] for i, n in by_id.items()}
        self.bank = MaskBank()
        self.shards = [Shard() for _ in range(self.num_csx)]
        scratch: dict[str, dict] = {}  # the systems run one after another: share scratch
        self.systems = [make_replica(model, weights, grads, bank=self.bank, shard=s,
                                     scratch=scratch) for s in self.shards]
        for system in self.systems:
            system.train()
        took = time.perf_counter() - t0
        log.info(f"Loading CPU pre-initialized weights took {took:.3f} seconds")
        log.debug(f"MemoryX holds {self.memoryx.nbytes} bytes; {self.num_csx} CS-X system(s), "
                  f"{len(model.blocks)} layers streamed per step")
        return LoadReport(self.compile_time, took, self.est_samples_per_sec)

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
        """Forward and backward of one (micro-)batch over the N systems: adds the gradient of
        scale * loss into MemoryX's accumulators; returns the batch's loss."""
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
        last = len(self.model.blocks) - 1
        for k in range(last + 1):  # forward, one layer at a time
            sx.broadcast(k)
            for i, sys_ in enumerate(systems):
                if k == last:
                    losses[i] = float(sys_.blocks[k].forward(acts[i], inputs[i][1]))
                else:
                    acts[i] = sys_.blocks[k].forward(acts[i])
        for k in range(last, -1, -1):  # backward, the output layer's weights still resident
            if k != last:
                sx.broadcast(k)
            for i, sys_ in enumerate(systems):
                if k == last:
                    acts[i] = sys_.blocks[k].backward(scale * shards[i].weight)
                else:
                    acts[i] = sys_.blocks[k].backward(acts[i])
                sx.reduce(k)
        return float(np.float32(sum(lo * s.weight for lo, s in zip(losses, shards, strict=True))))

    def snapshot(self, step: int, stream: Any) -> TrainState:
        """A checkpoint read from MemoryX."""
        assert self.memoryx is not None
        return self.memoryx.state(step, stream, self.model)
