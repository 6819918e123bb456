"""The host executor: every step runs on this machine's CPU, in numpy.

One step (global step `step`, 1 for the first step of a fresh run; the optimizer and its
learning-rate schedule count updates from 0, as TF's global_step before the increment, so they
see `step - 1`):
  1. forward_loss(batch) -> loss (fp32), caches for backward
  2. backward(loss_scale): gradients of loss_scale * loss, accumulated into zeroed grads
  3. scaler.unscale_(grads): grads /= scale in place -> (isfinite, global norm)
  4. if finite: clip (max_gradient_norm, reusing that norm as TF does, or max_gradient_value),
     then optimizer.step; else the update is skipped and the weights stay as they were
  5. scaler.update(isfinite): the loss-scale schedule of REFERENCE §6.3

Steps run in the producer thread of `QueuedExecutor`; numpy releases the GIL inside its kernels,
so the user-node loop keeps logging and writing checkpoints alongside.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cs2sim.runtime.executors.base import LoadReport, QueuedExecutor, StepResult
from cs2sim.runtime.numerics.clipping import build_clipper

__all__ = ["CpuExecutor"]


class CpuExecutor(QueuedExecutor):
    """Train on the host CPU."""

    device = "cpu"

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict) -> LoadReport:
        """Nothing to compile on the host: remember the objects and the clipping settings."""
        super().load(model, optimizer, scaler, params)
        self.clip = build_clipper(params.get("optimizer") or {})
        return LoadReport()

    def execute_step(self, batch: dict[str, np.ndarray], step: int) -> StepResult:
        """Forward, backward, unscale/check, clip, update (skipped when not finite)."""
        model, scaler = self.model, self.scaler
        model.zero_grad()
        loss = float(model.forward_loss(batch))  # 1)
        scale = float(scaler.scale)
        model.backward(scale)  # 2)
        grads = model.grads()
        isfinite, norm = scaler.unscale_(grads)  # 3)
        if isfinite:  # 4)
            if self.clip.enabled:
                self.clip(grads, norm)
            self.optimizer.step(grads, step - 1)
        scaler.update(bool(isfinite))  # 5)
        return StepResult(loss, float(self.optimizer.lr_at(step - 1)), scale, bool(isfinite),
                          float(norm))
