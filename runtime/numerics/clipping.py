"""Gradient clipping: by global norm or by value (Model Zoo's clipping keys, docs/sources.md).

Model Zoo's TF Trainer: `max_gradient_norm` rescales all gradients together when their global L2
norm exceeds it (tf.clip_by_global_norm), reusing the global norm that dynamic loss scaling already
computed ("mimics the CS1 dynamic loss scaling kernel implementation"); `max_gradient_value` clips
every element to [-v, v]. 0 (the default) or None means off; the two are mutually exclusive.

Gradients are float32 arrays updated in place; they are given as a dict (name -> array, as
`Module.grads()` returns) or any iterable of arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cs2sim.system.errors import ConfigError

__all__ = [
    "Grads",
    "as_arrays",
    "global_norm",
    "clip_by_global_norm",
    "clip_by_value",
    "check_clipping",
    "Clipper",
    "build_clipper",
]

Grads = Mapping[str, np.ndarray] | Iterable[np.ndarray]

_CHUNK = 1 << 16  # elements per float32 dot: short enough that float32 accumulation stays accurate


def as_arrays(grads: Grads) -> list[np.ndarray]:
    """The arrays of a dict of gradients, or of any iterable of them."""
    return list(grads.values()) if isinstance(grads, Mapping) else list(grads)


def _sum_squares(g: np.ndarray) -> float:
    """Sum of squares of one array: float32 BLAS dots over chunks, accumulated in float64."""
    flat = g.reshape(-1)  # (n,) a view for the contiguous arrays gradients are
    total = 0.0
    with np.errstate(over="ignore", invalid="ignore"):  # inf / NaN are answers here
        for i in range(0, flat.size, _CHUNK):
            part = flat[i : i + _CHUNK]
            s = float(np.dot(part, part))
            if not math.isfinite(s):
                if not np.isfinite(part).all():
                    return math.inf
                wide = part.astype(np.float64)  # finite values whose squares pass float32's max
                s = float(np.dot(wide, wide))
            total += s
    return total


def global_norm(grads: Grads) -> float:
    """sqrt(sum of squares) over all arrays; inf if any value is inf or NaN."""
    total = 0.0
    for g in as_arrays(grads):
        total += _sum_squares(g)
        if total == math.inf:
            return math.inf
    return math.sqrt(total)


def clip_by_global_norm(grads: Grads, max_norm: float, norm: float | None = None) -> float:
    """Scale all arrays in place by max_norm / norm when norm > max_norm; returns the norm.

    `norm` is the already computed global norm (the loss scaler's), as TF's `use_norm`. A
    non-finite norm leaves the arrays alone: that step is skipped anyway.
    """
    if norm is None:
        norm = global_norm(grads)
    if math.isfinite(norm) and norm > max_norm:
        scale = max_norm / norm
        for g in as_arrays(grads):
            np.multiply(g, scale, out=g)
    return norm


def clip_by_value(grads: Grads, v: float) -> None:
    """Clip every element to [-v, v] in place (NaN stays NaN)."""
    for g in as_arrays(grads):
        np.clip(g, -v, v, out=g)


def check_clipping(max_gradient_norm: float | None, max_gradient_value: float | None) -> None:
    """Raise ConfigError, with Model Zoo's messages, for both set or a negative value."""
    if max_gradient_norm and max_gradient_value:
        raise ConfigError("Do not set both max_gradient_norm and max_gradient_value.")
    for key, v in (
        ("max_gradient_norm", max_gradient_norm),
        ("max_gradient_value", max_gradient_value),
    ):
        if v is not None and v < 0:
            raise ConfigError(f"{key} cannot be negative. Got {v}.")


@dataclass(frozen=True)
class Clipper:
    """The clipping the optimizer section asks for; calling it clips in place."""

    max_norm: float = 0.0
    max_value: float = 0.0

    def __post_init__(self) -> None:
        check_clipping(self.max_norm, self.max_value)

    @property
    def enabled(self) -> bool:
        """True when either clip is on."""
        return bool(self.max_norm or self.max_value)

    def __call__(self, grads: Grads, norm: float | None = None) -> float | None:
        """Clip `grads` in place; returns the global norm when clipping by norm, else None."""
        if self.max_norm:
            return clip_by_global_norm(grads, self.max_norm, norm)
        if self.max_value:
            clip_by_value(grads, self.max_value)
        return None


def build_clipper(opt_params: Mapping[str, Any]) -> Clipper:
    """The Clipper for an optimizer section (`max_gradient_norm`, `max_gradient_value`)."""
    return Clipper(
        float(opt_params.get("max_gradient_norm") or 0.0),
        float(opt_params.get("max_gradient_value") or 0.0),
    )
