"""Learning-rate schedules from the params YAML, in Model Zoo's form.

`optimizer.learning_rate` is one of (Model Zoo R1.6 TF `Trainer.get_learning_rate` and PyTorch
`PyTorchBaseModel._configure_lr_scheduler`, read for this file):

* a number -- a constant rate (a string such as "1e-4", which YAML leaves a string, is accepted);
* a dict with `scheduler:` and that scheduler's keys;
* a list of such dicts, run one after the other: each but the last lasts its `steps`, and the last
  one runs for the rest of training. A later schedule sees the step counted from its own start
  unless `optimizer.disable_lr_steps_reset: True` (then every schedule sees the global step, as
  TF does to replicate BERT's overlapping schedules).

Schedulers (names are case-insensitive; a trailing "LR", as in Model Zoo 2.x's LinearLR, is
ignored). t is the step within the schedule, 0 for the first update:

    Constant     learning_rate [, steps]
                 lr
    Linear       initial_learning_rate, end_learning_rate, steps
                 (init - end) * (1 - min(t, steps) / steps) + end
    Polynomial   as Linear, + power (default 1), cycle (default False)
                 (init - end) * (1 - min(t, steps) / steps) ** power + end
    Cosine       initial_learning_rate, decay_steps, and end_learning_rate (PyTorch CosineDecay)
    CosineDecay  or alpha (TF cosine_decay: end = alpha * initial; default 0)
                 end + (init - end) * 0.5 * (1 + cos(pi * min(t, decay_steps) / decay_steps))
    Exponential  initial_learning_rate, decay_steps, decay_rate [, staircase]
                 init * decay_rate ** (t / decay_steps)   (exponent floored if staircase)
    PiecewiseConstant  values (n + 1), boundaries (n, increasing)
                 values[i] while t <= boundaries[i], as TF's piecewise_constant

How long a schedule lasts, when another follows it: `steps`; else `total_iters` (Model Zoo 2.x);
else `decay_steps` (the PyTorch Model Zoo counts it for every scheduler; TF only for Cosine).
The decay length of Linear/Polynomial is found the same way (TF names it `steps`, PyTorch accepts
`decay_steps` too). Unknown keys inside a schedule are ignored, as Model Zoo does.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Mapping
from typing import Any

from cs2sim.system.errors import ConfigError

__all__ = ["Schedule", "SCHEDULERS", "build_schedule", "check_learning_rate"]

LrFn = Callable[[int], float]


class Schedule:
    """The learning rate as a function of the global step (0 = the first update)."""

    def __init__(self, fn: LrFn, text: str) -> None:
        self._fn = fn
        self.text = text

    def __call__(self, step: int) -> float:
        return float(self._fn(int(step)))

    def __repr__(self) -> str:
        return f"Schedule({self.text})"


class _Bad(Exception):
    """A problem at a sub-path of the learning_rate value: (sub_path, what is wrong)."""


# -- values -------------------------------------------------------------------------------------


def _num(p: Mapping[str, Any], key: str, at: str) -> float:
    """A finite number at p[key] (numeric strings accepted)."""
    if key not in p:
        raise _Bad(at, f"needs {key}")
    v = p[key]
    try:
        if isinstance(v, bool):
            raise ValueError
        x = float(v)
    except (TypeError, ValueError):
        raise _Bad(f"{at}.{key}", f"must be a number, not {v!r}") from None
    if not math.isfinite(x):
        raise _Bad(f"{at}.{key}", f"must be a finite number, not {v!r}")
    return x


def _rate(p: Mapping[str, Any], key: str, at: str) -> float:
    """A learning rate: a number >= 0."""
    x = _num(p, key, at)
    if x < 0:
        raise _Bad(f"{at}.{key}", f"must be >= 0, not {p[key]!r}")
    return x


def _count(v: Any, at: str) -> int:
    """A positive whole number of steps."""
    whole = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    if not whole or v != int(v) or v < 1:
        raise _Bad(at, f"must be a positive integer, not {v!r}")
    return int(v)


def _length(p: Mapping[str, Any], at: str) -> int | None:
    """How long the schedule lasts: steps, else total_iters, else decay_steps; None if none."""
    for key in ("steps", "total_iters", "decay_steps"):
        if p.get(key) is not None:
            return _count(p[key], f"{at}.{key}")
    return None


def _needed_length(p: Mapping[str, Any], at: str, name: str) -> int:
    n = _length(p, at)
    if n is None:
        raise _Bad(at, f"needs steps (or decay_steps) for the {name} scheduler")
    return n


# -- schedulers: each takes the dict and its path, returns lr(t) --------------------------------


def _constant(p: Mapping[str, Any], at: str) -> LrFn:
    lr = _rate(p, "learning_rate", at)
    return lambda t: lr


def _polynomial(p: Mapping[str, Any], at: str, linear: bool = False) -> LrFn:
    init, end = _rate(p, "initial_learning_rate", at), _rate(p, "end_learning_rate", at)
    steps = _needed_length(p, at, "Linear" if linear else "Polynomial")
    power = 1.0 if linear else _num({"power": 1.0, **p}, "power", at)
    if power < 0:
        raise _Bad(f"{at}.power", f"must be >= 0, not {p['power']!r}")
    cycle = bool(p.get("cycle", False))

    def lr(t: int) -> float:
        if cycle:  # TF polynomial_decay: the decay length grows to the next multiple of steps
            span = steps * max(1, math.ceil(t / steps))
        else:
            span, t = steps, min(t, steps)
        return float((init - end) * (1.0 - t / span) ** power + end)

    return lr


def _linear(p: Mapping[str, Any], at: str) -> LrFn:
    return _polynomial(p, at, linear=True)


def _cosine(p: Mapping[str, Any], at: str) -> LrFn:
    init = _rate(p, "initial_learning_rate", at)
    steps = (
        _count(p["decay_steps"], f"{at}.decay_steps")
        if "decay_steps" in p
        else _needed_length(p, at, "Cosine")
    )
    if "end_learning_rate" in p and "alpha" in p:
        raise _Bad(at, "sets both end_learning_rate and alpha; keep one")
    end = (
        _rate(p, "end_learning_rate", at)
        if "end_learning_rate" in p
        else init * _num({"alpha": 0.0, **p}, "alpha", at)
    )

    def lr(t: int) -> float:
        return end + (init - end) * 0.5 * (1.0 + math.cos(math.pi * min(t, steps) / steps))

    return lr


def _exponential(p: Mapping[str, Any], at: str) -> LrFn:
    init = _rate(p, "initial_learning_rate", at)
    if "decay_steps" not in p:
        raise _Bad(at, "needs decay_steps")
    period = _count(p["decay_steps"], f"{at}.decay_steps")
    rate = _rate(p, "decay_rate", at)
    if rate > 1:
        raise _Bad(f"{at}.decay_rate", f"must be in [0, 1], not {p['decay_rate']!r}")
    staircase = bool(p.get("staircase", False))

    def lr(t: int) -> float:
        e = t / period
        return init * rate ** (math.floor(e) if staircase else e)

    return lr


def _piecewise(p: Mapping[str, Any], at: str) -> LrFn:
    values, bounds = p.get("values"), p.get("boundaries")
    if (
        not isinstance(values, list)
        or not isinstance(bounds, list)
        or len(values) != len(bounds) + 1
    ):
        raise _Bad(at, "needs values (a list) and boundaries (a list one shorter)")
    vals = [_rate({"v": v}, "v", f"{at}.values[{i}]") for i, v in enumerate(values)]
    ends = [_count(b, f"{at}.boundaries[{i}]") for i, b in enumerate(bounds)]
    if ends != sorted(set(ends)):
        raise _Bad(f"{at}.boundaries", "must be increasing")
    return lambda t: vals[bisect_left(ends, t)]  # t <= ends[i] -> values[i]


SCHEDULERS: dict[str, Callable[[Mapping[str, Any], str], LrFn]] = {
    "constant": _constant,
    "linear": _linear,
    "polynomial": _polynomial,
    "cosine": _cosine,
    "cosinedecay": _cosine,
    "exponential": _exponential,
    "piecewiseconstant": _piecewise,
}
_NAMES = "Constant, Linear, Polynomial, Cosine (CosineDecay), Exponential, PiecewiseConstant"


def _one(p: Any, at: str) -> LrFn:
    if not isinstance(p, Mapping):
        raise _Bad(at, f"must be a schedule (a mapping with a scheduler key), not {p!r}")
    if "scheduler" not in p:
        raise _Bad(at, f"needs scheduler (one of {_NAMES})")
    name = str(p["scheduler"]).strip().lower()
    if name.endswith("lr") and name[:-2] in SCHEDULERS:
        name = name[:-2]
    if name not in SCHEDULERS:
        raise _Bad(f"{at}.scheduler", f"must be one of {_NAMES}, not {p['scheduler']!r}")
    return SCHEDULERS[name](p, at)


def _build(value: Any, reset: bool) -> tuple[LrFn, str]:
    """lr(step) and a short description, or _Bad."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            rate = float(value)
        except ValueError:
            raise _Bad("", f"must be a number or a schedule, not {value!r}") from None
        if not (math.isfinite(rate) and rate >= 0):
            raise _Bad("", f"must be >= 0, not {value!r}")
        return (lambda t: rate), f"constant {rate:g}"
    if isinstance(value, Mapping):
        return _one(value, ""), str(value.get("scheduler"))
    if not isinstance(value, list) or not value:
        raise _Bad("", f"must be a number or a schedule, not {value!r}")
    fns = [_one(p, f"[{i}]") for i, p in enumerate(value)]
    starts, start = [], 0
    for i, p in enumerate(value[:-1]):
        n = _length(p, f"[{i}]")
        if n is None:
            raise _Bad(
                f"[{i}]",
                "needs steps: every schedule but the last must say how many steps it lasts",
            )
        starts.append(start)
        start += n
    starts.append(start)
    ends = starts[1:]  # step at which schedule i hands over to schedule i + 1

    def lr(t: int) -> float:
        i = bisect_left(ends, t + 1)  # the first schedule whose end is after t
        return fns[i](t - starts[i] if reset else t)

    text = " then ".join(str(p.get("scheduler")) for p in value)
    return lr, text


def build_schedule(
    value: Any, path: str = "optimizer.learning_rate", disable_lr_steps_reset: bool = False
) -> Schedule:
    """The Schedule for a learning_rate value; ConfigError naming the key path if it is invalid."""
    try:
        fn, text = _build(value, reset=not disable_lr_steps_reset)
    except _Bad as e:
        sub, problem = e.args
        sub = sub.lstrip(".")
        where = f"{path}{'' if not sub or sub.startswith('[') else '.'}{sub}"
        raise ConfigError(f"{where} {problem}.") from None
    return Schedule(fn, text)


def check_learning_rate(value: Any) -> str | None:
    """Schema check: None if `value` is a valid learning_rate, else what is wrong (a phrase)."""
    try:
        _build(value, reset=True)
    except _Bad as e:
        sub, problem = e.args
        sub = sub.lstrip(".")
        return problem if not sub else f"has a bad schedule: {sub} {problem}"
    return None
