"""Gradient accumulation: several micro-batches' gradients summed into ONE optimizer update.

The one place every executor takes it from (QueuedExecutor.run and .execute_step, base.py).
Model Zoo spells it three ways (runtime/params.py `grad_accumulation` checks them):
  optimizer.grad_accum_steps: k      k input batches of batch_size make one update
                                     (PyTorch R1.x, "64 * 4 = 256 with grad_accum_steps: 4")
  runconfig.use_cs_grad_accum: true  the CS-2 may run the batch as micro-batches; with
  + train_input.micro_batch_size: m  the batch of each of the N CS-X systems (B / N samples)
                                     runs as micro-batches of m samples (Release 2.1+)
  runconfig.use_cs_grad_accum alone  the compiler chooses (runtime/compiler/streaming.py: in
                                     weight streaming the fewest micro-batches whose activations
                                     fit the wafer; plan.json's micro_batches) and the CS-2
                                     executors run the plan's; on the host, and when the batch
                                     fits, the whole batch is one micro-batch
One update step:
  1. the step's batch: k input batches one after another (k B rows), or the input batch;
  2. micro-batches: contiguous row ranges of it (N m rows each: every system gets m; or, with
     grad_accum_steps alone, the k input batches);
  3. each micro-batch's loss is its rows' mean (the loss heads normalise by their own rows), so
     micro-batch i runs backward with loss_scale * b_i / (k B) and its gradients ADD to the
     step's; the step's loss is sum_i loss_i * b_i / (k B);
  4. one unscale / clip / optimizer update on the sum.
That is the update of one batch of k B rows, up to the order of float additions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.executors.planview import PlanView
from cs2sim.runtime.executors.replicas import Shard
from cs2sim.runtime.params import grad_accumulation

if TYPE_CHECKING:  # runtime.data is imported by the runs that build a stream
    from cs2sim.runtime.data.stream import Stream

__all__ = ["Accumulation", "NONE"]


@dataclass(frozen=True)
class Accumulation:
    """How one update's batch is gathered and split."""

    batches: int = 1  # input batches per update (optimizer.grad_accum_steps)
    micro_batch: int | None = None  # samples per micro-batch per CS-X (micro_batch_size)
    systems: int = 1  # CS-X systems sharing a micro-batch (num_csx)

    @classmethod
    def from_params(cls, params: dict[str, Any], plan: PlanView | None = None) -> Accumulation:
        """The accumulation the params ask for (ConfigError if it cannot be honoured), or the
        compiled plan's micro-batch where the params leave it to the compiler."""
        k, m, n = grad_accumulation(params)
        chosen = plan.micro_batch_size if plan is not None else None
        if m is None and plan is not None and plan.micro_batches > 1:
            m = chosen or None  # the compiler split the batch
        elif m is not None and chosen and chosen < m and plan is not None and plan.layers:
            m = int(chosen)  # the given micro-batch did not fit: the compiler split it again
        return cls(k, m, n)

    @property
    def active(self) -> bool:
        """Whether an update sums more than one micro-batch."""
        return self.batches > 1 or self.micro_batch is not None

    def next_batch(self, stream: Stream) -> dict[str, np.ndarray]:
        """The step's batch: `batches` input batches concatenated (StopIteration if the stream
        ends before all of them came)."""
        if self.batches == 1:
            return next(stream)
        parts = [next(stream) for _ in range(self.batches)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def split(self, batch: dict[str, np.ndarray]) -> list[tuple[dict[str, np.ndarray], Shard]]:
        """(micro-batch, its rows) in order; one (batch, all rows) without accumulation."""
        B = len(next(iter(batch.values())))
        if self.micro_batch is not None:
            rows = self.micro_batch * self.systems
        elif self.batches > 1:
            rows = -(-B // self.batches)
        else:
            return [(batch, Shard(0, B, B))]
        bounds = list(range(0, B, rows)) + [B]
        return [
            ({k: v[lo:hi] for k, v in batch.items()}, Shard(lo, hi, B))
            for lo, hi in zip(bounds, bounds[1:], strict=False)
        ]

    def describe(self, batch_size: int) -> str:
        """One phrase for the run's log."""
        if not self.active:
            return "no gradient accumulation"
        total = batch_size * self.batches
        if self.micro_batch is not None:
            n = total // (self.micro_batch * self.systems)
            return (
                f"gradient accumulation: {n} micro-batches of {self.micro_batch} samples "
                f"per CS-X x {self.systems} make each update of {total} samples"
            )
        return (
            f"gradient accumulation: {self.batches} input batches of {batch_size} "
            f"samples make each update of {total} samples"
        )


NONE = Accumulation()
