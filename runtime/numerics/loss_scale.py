"""Loss scaling: static, and dynamic exactly as Model Zoo's CSDynamicLossScale (docs/sources.md).

The model's backward pass computes the gradients of `scale * loss`, so small gradients stay above
the 16-bit formats' underflow; `unscale_` divides them back in place and reports whether they are
finite, with their global norm (which gradient clipping then reuses, as the TF Trainer does). The
trainer skips the optimizer step when they are not.

Dynamic loss scaling, per step (TF `CSDynamicLossScale.update`):

    1) steps_since_rescale += 1; overflows_since_rescale += (not isfinite)
    2) if overflows_since_rescale / steps_since_rescale > overflow_tolerance:
           scale /= 2 and both counters reset to 0
    3) if steps_since_rescale >= steps_per_increase:      (the step count reached the period)
           scale *= 2 and both counters reset to 0
    4) scale = clip(scale, min_loss_scale, max_loss_scale)

So the scale doubles after `steps_per_increase` steps without too many overflows (overflowed steps
count, as long as the tolerance is not exceeded), and halves as soon as the overflow ratio
exceeds the tolerance (with the default 0.05, the first overflow after a rescale halves it unless
at least 20 steps have passed). TF writes step 3 as a multiplication by
max(steps - period + 1, 0) + 1, which is the same while the counter never passes the period; we
double, so a period shortened on resume cannot multiply by 3.

Defaults (when a key is unset): `initial_loss_scale` and `max_loss_scale` are 2^15 (TF) -- except
for cbfloat16, where they are cstorch's 2^31, since cbfloat16's largest value is ~4.29e9 = 2^32
(Model Zoo's CSDynamicLossScale and cerebras.pytorch's GradScaler, docs/sources.md).
`min_loss_scale` 2^-14, `steps_per_increase` 2000, `overflow_tolerance` 0.05 (TF; cstorch uses 0.0).
The multiplier is 2.0 only.
`loss_scaling_factor: "tf_dynamic"` (TF's own DynamicLossScale) is treated as "dynamic": on a CS
system TF swapped it for CSDynamicLossScale.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from cs2sim.runtime.numerics.clipping import Grads, as_arrays, global_norm
from cs2sim.system.errors import ConfigError, RuntimeFailure

__all__ = ["StaticLossScaler", "DynamicLossScaler", "build_loss_scaler", "loss_scale_defaults"]

log = logging.getLogger("cs2sim.run")

_FP32_MAX = float(np.finfo(np.float32).max)
_MIN_LOSS_SCALE = 2.0**-14
_STATE_KEYS = ("loss_scale", "steps_since_rescale", "overflows_since_rescale")


class StaticLossScaler:
    """A fixed loss scale (`loss_scaling_factor: <number>`; 1.0 is no scaling)."""

    dynamic = False

    def __init__(self, scale: float = 1.0) -> None:
        if isinstance(scale, bool) or not (math.isfinite(scale) and scale > 0):
            raise ConfigError(
                "optimizer.loss_scaling_factor must be a positive number or 'dynamic', "
                f"not {scale!r}."
            )
        self.scale = float(scale)

    def unscale_(self, grads: Grads) -> tuple[bool, float]:
        """Divide `grads` by the scale in place; returns (all finite, global norm of the result)."""
        if self.scale != 1.0:
            inv = 1.0 / self.scale  # TF multiplies by the reciprocal (exact for powers of two)
            with np.errstate(over="ignore"):  # an overflow here is what the check below reports
                for g in as_arrays(grads):
                    np.multiply(g, inv, out=g)
        norm = global_norm(grads)
        return math.isfinite(norm), norm

    def update(self, isfinite: bool) -> None:
        """A static scale never changes."""

    def state_dict(self) -> dict[str, float | int]:
        """Nothing to save: the scale comes from the params file."""
        return {}

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Nothing to restore (a dynamic run's state is ignored)."""


class DynamicLossScaler(StaticLossScaler):
    """TF CSDynamicLossScale: x2 every `steps_per_increase` steps, /2 past the tolerance."""

    dynamic = True

    def __init__(
        self,
        initial_loss_scale: float = 2.0**15,
        steps_per_increase: float = 2000,  # a whole number (checked), as YAML may write it
        min_loss_scale: float = _MIN_LOSS_SCALE,
        max_loss_scale: float = 2.0**15,
        overflow_tolerance: float = 0.05,
        multiplier: float = 2.0,
    ) -> None:
        if not np.isclose(multiplier, 2.0):
            log.warning(
                f"Only a value of 2.0 is supported for dynamic loss scaling multiplier, but "
                f"{multiplier} was provided. Adjusting value to 2.0 instead."
            )
        _check_dynamic(
            initial_loss_scale,
            steps_per_increase,
            min_loss_scale,
            max_loss_scale,
            overflow_tolerance,
        )
        self.scale = float(initial_loss_scale)  # clamped by the first update, as in TF
        self.steps_per_increase = int(steps_per_increase)
        self.min_loss_scale = float(min_loss_scale)
        self.max_loss_scale = float(max_loss_scale)
        self.overflow_tolerance = float(overflow_tolerance)
        self.steps_since_rescale = 0
        self.overflows_since_rescale = 0

    def update(self, isfinite: bool) -> None:
        """Advance one step (see the module docstring for the four steps)."""
        # 1) count
        self.steps_since_rescale += 1
        self.overflows_since_rescale += 0 if isfinite else 1
        # 2) too many overflows: halve (the ratio and the comparison in float32, as TF's)
        ratio = np.float32(self.overflows_since_rescale) / np.float32(self.steps_since_rescale)
        if ratio > np.float32(self.overflow_tolerance):
            self.scale /= 2.0
            self.steps_since_rescale = self.overflows_since_rescale = 0
        # 3) a full period: double
        if self.steps_since_rescale >= self.steps_per_increase:
            self.scale *= 2.0
            self.steps_since_rescale = self.overflows_since_rescale = 0
        # 4) clamp
        self.scale = min(max(self.scale, self.min_loss_scale), self.max_loss_scale)

    def state_dict(self) -> dict[str, float | int]:
        """The scale and both counters, for checkpoints."""
        return {
            "loss_scale": self.scale,
            "steps_since_rescale": self.steps_since_rescale,
            "overflows_since_rescale": self.overflows_since_rescale,
        }

    def load_state_dict(self, d: Mapping[str, Any]) -> None:
        """Restore `state_dict()`; an empty dict (a static run's checkpoint) starts afresh."""
        if not any(k in d for k in _STATE_KEYS):
            return
        missing = [k for k in _STATE_KEYS if k not in d]
        if missing:
            raise RuntimeFailure(
                f"the checkpoint's loss-scale state lacks {', '.join(missing)}; "
                "resume from another checkpoint or start a new model_dir."
            )
        self.scale = float(d["loss_scale"])
        self.steps_since_rescale = int(d["steps_since_rescale"])
        self.overflows_since_rescale = int(d["overflows_since_rescale"])


def _check_dynamic(initial: float, period: float, lo: float, hi: float, tolerance: float) -> None:
    """One ConfigError per impossible dynamic-loss-scaling setting (TF's checks, plus ours)."""
    if not initial > 0:
        raise ConfigError(f"optimizer.initial_loss_scale must be > 0, not {initial}.")
    if isinstance(period, bool) or int(period) != period or period < 1:
        raise ConfigError(f"optimizer.steps_per_increase must be a positive integer, not {period}.")
    if lo < _MIN_LOSS_SCALE:
        raise ConfigError(
            f"min_loss_scale too small: optimizer.min_loss_scale must be >= 2**-14, not {lo}."
        )
    if hi > _FP32_MAX:
        raise ConfigError(
            f"Provided max_loss_scale value of {hi} exceeds FP32_MAX of {_FP32_MAX}: "
            "lower optimizer.max_loss_scale."
        )
    if lo > hi:
        raise ConfigError(
            f"optimizer.min_loss_scale ({lo}) must not exceed optimizer.max_loss_scale ({hi})."
        )
    if tolerance < 0:
        raise ConfigError(f"optimizer.overflow_tolerance must be >= 0, not {tolerance}.")


def loss_scale_defaults(half: str) -> dict[str, float]:
    """Dynamic-loss-scaling values used when unset: initial/max 2^31 for cbfloat16, else 2^15."""
    big = 2.0**31 if half == "cbfloat16" else 2.0**15
    return {
        "initial_loss_scale": big,
        "max_loss_scale": big,
        "min_loss_scale": _MIN_LOSS_SCALE,
        "overflow_tolerance": 0.05,
    }


def _number(v: object, key: str) -> float:
    """A YAML number (or a numeric string such as "1e-3", which YAML leaves a string)."""
    try:
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise ValueError
        return float(v)
    except (TypeError, ValueError):
        raise ConfigError(f"optimizer.{key} must be a number, not {v!r}.") from None


def build_loss_scaler(
    opt_params: Mapping[str, Any], half: str
) -> DynamicLossScaler | StaticLossScaler:
    """The loss scaler an optimizer section asks for, with the defaults for the `half` format."""
    factor = opt_params.get("loss_scaling_factor", 1.0)
    if factor is None:
        factor = 1.0
    if isinstance(factor, str) and factor.strip().lower() in ("dynamic", "tf_dynamic"):
        defaults = loss_scale_defaults(half)

        def get(key: str) -> float:
            v = opt_params.get(key)
            return defaults[key] if v is None else _number(v, key)

        period = opt_params.get("steps_per_increase")
        return DynamicLossScaler(
            initial_loss_scale=get("initial_loss_scale"),
            steps_per_increase=2000 if period is None else _number(period, "steps_per_increase"),
            min_loss_scale=get("min_loss_scale"),
            max_loss_scale=get("max_loss_scale"),
            overflow_tolerance=get("overflow_tolerance"),
        )
    try:
        if isinstance(factor, bool):
            raise ValueError
        value = float(factor)
    except (TypeError, ValueError):
        raise ConfigError(
            f"optimizer.loss_scaling_factor must be a positive number or 'dynamic', not {factor!r}."
        ) from None
    return StaticLossScaler(value)
