"""Weight initializers, and the Model Zoo initializer dicts that name them.

An initializer is a function `(rng, shape) -> float32 array`. Everything draws from one seeded
`np.random.Generator` in a fixed order, so the same seed gives bit-identical weights.

Model Zoo writes initializers as dicts (or one-element lists of dicts, TF style), e.g.
`{name: truncated_normal, mean: 0.0, std: 0.02}` or
`[{name: variance_scaling, scale_type: wang_init}]`;
`from_config` turns those into functions. Names we know are in INITIALIZERS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from cs2sim.system.errors import ConfigError

__all__ = [
    "Init",
    "zeros",
    "ones",
    "normal",
    "truncated_normal",
    "glorot_uniform",
    "variance_scaling",
    "from_config",
    "INITIALIZERS",
    "GPT_INIT",
]

Init = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]

# TF's variance_scaling divides by the std of a unit normal truncated at +-2 so the kept values
# have the asked-for variance.
_TRUNC_STD = 0.87962566103423978


def zeros(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """All zeros (biases, layer-norm shifts)."""
    return np.zeros(shape, dtype=np.float32)


def ones(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """All ones (layer-norm gains)."""
    return np.ones(shape, dtype=np.float32)


def normal(std: float, mean: float = 0.0) -> Init:
    """N(mean, std^2)."""

    def init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        w = rng.standard_normal(shape, dtype=np.float32)  # shape
        w *= np.float32(std)
        w += np.float32(mean)
        return w

    return init


def truncated_normal(std: float, mean: float = 0.0) -> Init:
    """N(mean, std^2) with draws beyond 2 std redrawn (TF's truncated_normal)."""

    def init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        z = rng.standard_normal(shape, dtype=np.float32).reshape(-1)  # (n,)
        bad = np.flatnonzero(np.abs(z) > 2.0)  # ~4.6% of draws: redraw until none is left
        while bad.size:
            z[bad] = rng.standard_normal(bad.size, dtype=np.float32)
            bad = bad[np.abs(z[bad]) > 2.0]
        z *= np.float32(std)
        z += np.float32(mean)
        return z.reshape(shape)

    return init


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a (n_in, n_out) weight."""
    return (shape[0], shape[-1]) if len(shape) >= 2 else (shape[0], shape[0])


def glorot_uniform(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """U(-l, l), l = sqrt(6 / (fan_in + fan_out)): the Keras Dense default."""
    fan_in, fan_out = _fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    w = rng.random(shape, dtype=np.float32)  # shape, in [0, 1)
    w *= np.float32(2 * limit)
    w -= np.float32(limit)
    return w


def variance_scaling(
    scale: float = 1.0, mode: str = "fan_in", distribution: str = "truncated_normal"
) -> Init:
    """TF's VarianceScaling: variance scale / fan (fan_in, fan_out or their mean)."""

    def init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        fan_in, fan_out = _fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]
        var = scale / max(1.0, fan)
        if distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            w = rng.random(shape, dtype=np.float32)
            w *= np.float32(2 * limit)
            w -= np.float32(limit)
            return w
        if distribution == "normal":
            return normal(math.sqrt(var))(rng, shape)
        return truncated_normal(math.sqrt(var) / _TRUNC_STD)(rng, shape)

    return init


GPT_INIT = normal(0.02)  # the default of the LM layers (GPT-2's initializer_range)


def _std(cfg: dict[str, Any]) -> float:
    return float(cfg.get("std", cfg.get("stddev", 1.0)))


def _scaled_normal(cfg: dict[str, Any], ctx: dict[str, Any]) -> Init:
    """Model Zoo's scaled_init_normal: sigma / sqrt(key); key vocab_size or 2 num_hidden_layers."""
    key = cfg.get("key")
    div = {
        None: 1.0,
        "vocab_size": ctx["vocab_size"],
        "num_hidden_layers": 2 * ctx["num_hidden_layers"],
    }
    std = float(cfg.get("sigma", 1.0)) / math.sqrt(div[key])
    dist = (
        truncated_normal
        if cfg.get("distribution", "truncated_normal") == "truncated_normal"
        else normal
    )
    return dist(std, float(cfg.get("mean", 0.0)))


def _variance(cfg: dict[str, Any], ctx: dict[str, Any]) -> Init:
    """variance_scaling with Model Zoo's scale_type shorthands (small_init 2/5, wang_init 4/L^2)."""
    scale_types = {"small_init": 2.0 / 5.0, "wang_init": 4.0 / ctx["num_hidden_layers"] ** 2}
    scale = (
        scale_types[cfg["scale_type"]] if cfg.get("scale_type") else float(cfg.get("scale", 1.0))
    )
    return variance_scaling(
        scale, cfg.get("mode", "fan_in"), cfg.get("distribution", "truncated_normal")
    )


# name -> builder(cfg, ctx); ctx carries vocab_size and num_hidden_layers.
INITIALIZERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], Init]] = {
    "normal": lambda c, ctx: normal(_std(c), float(c.get("mean", 0.0))),
    "truncated_normal": lambda c, ctx: truncated_normal(_std(c), float(c.get("mean", 0.0))),
    "variance_scaling": _variance,
    "scaled_init_normal": _scaled_normal,
    "glorot_uniform": lambda c, ctx: glorot_uniform,
    "xavier_uniform": lambda c, ctx: glorot_uniform,
    "zeros": lambda c, ctx: zeros,
    "ones": lambda c, ctx: ones,
}


def from_config(cfg: Any, default: Init, ctx: dict[str, Any], key: str) -> Init:
    """The initializer a Model Zoo dict (or [dict]) names; `default` when `cfg` is None."""
    if cfg is None:
        return default
    if isinstance(cfg, list) and cfg:
        cfg = cfg[0]  # TF configs wrap the dict in a one-element list
    name = cfg.get("name") if isinstance(cfg, dict) else None
    if name not in INITIALIZERS:
        allowed = ", ".join(INITIALIZERS)
        raise ConfigError(
            f"model.{key} must be a dict whose name is one of {allowed}, not {cfg!r}."
        )
    try:
        return INITIALIZERS[name](cfg, ctx)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(
            f"model.{key} ({cfg!r}) is not a valid {name} initializer ({e}); fix its keys."
        ) from None
