"""MemoryX: the weight store of weight streaming; it owns the weights and the optimizer.

Cerebras' MemoryX glossary page and Weight Streaming Execution page (docs/sources.md): MemoryX
"stores weights and optimizer state" and "performs the weight update (any optimizer)"; the CS-X
systems hold no weights between steps, they receive each layer from MemoryX through SwarmX and send
gradients back.

Here MemoryX holds the master fp32 weights (the arrays of the host model, which is only a
container for them: no layer of it computes in weight streaming), the gradient accumulators
SwarmX reduces into, the run's optimizer (any of runtime/numerics/optim.py), the loss scaler and the
clipping settings. `apply_update` is the CPU executor's steps 3-5 (unscale and check, clip,
optimizer step, loss-scale update), so an update here equals the host's update bit for bit on the
same gradients. Checkpoints read the weights and optimizer state from here (`state`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.artifacts.checkpoint import TrainState
from cs2sim.runtime.executors.base import rng_states
from cs2sim.runtime.numerics.clipping import build_clipper

if TYPE_CHECKING:  # runtime.data is imported by the runs that build a stream
    from cs2sim.runtime.data.stream import Stream

__all__ = ["MemoryX"]


class MemoryX:
    """Weights, gradient accumulators, optimizer and loss scaler of a weight-streaming run."""

    def __init__(
        self, model: Any, optimizer: Any, scaler: Any, optimizer_params: dict[str, Any]
    ) -> None:
        self.model = model
        self.weights: dict[str, np.ndarray] = model.parameters()  # name -> master fp32 array
        self.grads: dict[str, np.ndarray] = model.grads()  # name -> reduced gradient
        self.optimizer, self.scaler = optimizer, scaler
        self.clip = build_clipper(optimizer_params or {})

    @property
    def nbytes(self) -> int:
        """Bytes of weights plus optimizer state held."""
        state = self.optimizer.state_dict(copy=False) if self.optimizer is not None else {}
        return int(
            sum(w.nbytes for w in self.weights.values())
            + sum(v.nbytes for v in state.values() if isinstance(v, np.ndarray))
        )

    def apply_update(self, step: int) -> tuple[bool, float, float, float]:
        """Unscale and check, clip, update (skipped if not finite), update the loss scale.

        Returns (isfinite, global norm, learning rate, loss scale used)."""
        scale = float(self.scaler.scale)
        isfinite, norm = self.scaler.unscale_(self.grads)
        if isfinite:
            if self.clip.enabled:
                self.clip(self.grads, norm)
            self.optimizer.step(self.grads, step - 1)
        self.scaler.update(bool(isfinite))
        return bool(isfinite), float(norm), float(self.optimizer.lr_at(step - 1)), scale

    def state(self, step: int, stream: Stream, rng_model: Any) -> TrainState:
        """A checkpoint read from MemoryX (weights, optimizer, scaler) + data and RNG positions."""
        return TrainState(
            step=step,
            model={k: v.copy() for k, v in self.weights.items()},
            optimizer=self.optimizer.state_dict(),
            loss_scaler=copy.deepcopy(self.scaler.state_dict()),
            data=copy.deepcopy(stream.state_dict()) if stream is not None else None,
            rng=rng_states(rng_model),
        )
