"""Inverted dropout: zero a fraction `rate` of the activations and scale the rest by 1/(1-rate)."""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["Dropout"]


class Dropout(Module):
    """Inverted dropout drawing its masks from a shared seeded generator; identity in eval mode."""

    def __init__(self, rate: float, rng: np.random.Generator, policy: Policy = FP32) -> None:
        super().__init__(policy)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), not {rate}")
        self.rate = rate
        self.rng = rng  # the model's dropout generator: its state goes into checkpoints
        self.fixed_mask: np.ndarray | None = None  # tests pin the mask for gradient checks
        self.keep: np.ndarray | None = None

    @property
    def active(self) -> bool:
        """True when this forward drops anything."""
        return self.training and self.rate > 0.0

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (...) -> y (...)."""
        if not self.active:
            self.keep = None
            return x
        if self.fixed_mask is not None:
            keep = self.fixed_mask  # (...) bool
        else:
            u = self.rng.random(x.shape, dtype=np.float32)  # (...) uniform in [0, 1)
            keep = u >= self.rate  # (...) bool, P(keep) = 1 - rate
        y: np.ndarray = np.multiply(x, keep)  # (...)
        y *= 1.0 / (1.0 - self.rate)  # inverted: the expectation is unchanged, eval needs nothing
        self.policy.cast(y, out=y)
        self.keep = keep
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dy (...) -> dx (...): the same mask and scale."""
        if self.keep is None:
            return dy
        dx: np.ndarray = np.multiply(dy, self.keep)  # (...)
        dx *= 1.0 / (1.0 - self.rate)
        self.policy.cast(dx, out=dx)
        return dx

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "dropout" kernel (listed only when rate > 0)."""
        if self.rate == 0.0:
            return []
        return [
            make_spec(name, "dropout", in_shape, 2 * in_shape[-1], attrs=(("rate", self.rate),))
        ]
