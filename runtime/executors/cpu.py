"""The host executor: every step runs on this machine's CPU, in numpy.

One step (global step `step`, 1 for the first step of a fresh run; the optimizer and its
learning-rate schedule count updates from 0, as TF's global_step before the increment, so they
see `step - 1`):
  1. forward_loss(batch) -> loss (fp32), caches for backward
  2. backward(loss_scale): gradients of loss_scale * loss, accumulated into zeroed grads
  3. scaler.unscale_(grads): grads /= scale in place -> (isfinite, global norm)
  4. if finite: clip (max_gradient_norm, reusing that norm as TF does, or max_gradient_value),
     then optimizer.step; else the update is skipped and the weights stay as they were
  5. scaler.update(isfinite): the loss-scale schedule of Model Zoo's CSDynamicLossScale,
  docs/sources.md

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

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict[str, Any]) -> LoadReport:
        """Nothing to compile on the host: remember the objects and the clipping settings."""
        super().load(model, optimizer, scaler, params)
        self.clip = build_clipper(params.get("optimizer") or {})
        return LoadReport()

    def begin_gradients(self) -> None:
        """Zero the model's gradients."""
        self.model.zero_grad()

    def compute_gradients(self, batch: dict[str, np.ndarray], step: int, scale: float) -> float:
        """Forward (1), backward of scale * loss into the gradients (2)."""
        loss = float(self.model.forward_loss(batch))  # 1)
        self.model.backward(scale)  # 2)
        return loss

    def apply_update(self, step: int, loss: float, scale: float) -> StepResult:
        """Unscale/check, clip, update (skipped when not finite), loss-scale update."""
        scaler = self.scaler
        grads = self.model.grads()
        isfinite, norm = scaler.unscale_(grads)  # 3)
        if isfinite:  # 4)
            if self.clip.enabled:
                self.clip(grads, norm)
            self.optimizer.step(grads, step - 1)
        scaler.update(bool(isfinite))  # 5)
        return StepResult(
            loss, float(self.optimizer.lr_at(step - 1)), scale, bool(isfinite), float(norm)
        )
