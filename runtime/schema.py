"""The vocabulary of params-YAML schemas: one `Key` per allowed key.

Each section of a Model Zoo params file (`train_input`, `eval_input`, `model`, `optimizer`,
`runconfig`, `csconfig`) is described by a table `dict[str, Key]`. The model files declare their
own `MODEL_SCHEMA`, runtime/sections.py the other sections'; runtime/params.py composes them
and validates a file against them, so the validator, the defaults written to
`params_train.yaml` and the docs all come from the same tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "REQUIRED",
    "Key",
    "Range",
    "Schema",
    "positive",
    "non_negative",
    "unit_interval",
    "shown",
]


class _Required:
    """Marker: the key has no default and must be given."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Key:
    """One allowed key: its type(s), default, allowed values and a one-line description.

    `check` returns None when a value is acceptable, else a short phrase saying what is allowed
    (e.g. "must be > 0"); the validator turns it into one sentence naming the key path and the
    value ("..., not -3."), unless the phrase already shows the bad value itself (a part deep
    inside a learning-rate schedule: "... must be a positive integer, not 'x'").
    `None` is accepted for any key whose default is None.
    """

    type: type | tuple[type, ...]
    default: Any = REQUIRED
    doc: str = ""
    choices: tuple[Any, ...] | None = None
    check: Callable[[Any], str | None] | None = None


Schema = dict[str, Key]


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Range:
    """Schema check: a number within bounds, each end closed (the default), open or absent.

    The bounds are data, not a closure, so the tests generate the boundary cases of every range
    in every schema (each end, and just past it). `below` / `above` replace the interval
    notation as the phrase for a value past that end.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    below: str | None = None
    above: str | None = None

    def __call__(self, v: Any) -> str | None:
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return self.below or self.text()
        if self.hi is not None and (v >= self.hi if self.hi_open else v > self.hi):
            return self.above or self.text()
        return None

    def text(self) -> str:
        """`must be in [lo, hi)`, `must be > lo`, ...: the interval in the usual notation."""
        if self.hi is None:
            return f"must be {'>' if self.lo_open else '>='} {_num(self.lo or 0)}"
        if self.lo is None:
            return f"must be {'<' if self.hi_open else '<='} {_num(self.hi)}"
        return (
            f"must be in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}"
            f"{')' if self.hi_open else ']'}"
        )


positive = Range(lo=0, lo_open=True)  # a number > 0
non_negative = Range(lo=0)  # a number >= 0
unit_interval = Range(0, 1, hi_open=True)  # 0 <= v < 1 (a dropout rate)


def shown(v: Any) -> str:
    """How a wrong value is shown in a message: `a mapping`, `a list`, `true`, or its repr
    (at most 40 characters)."""
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, (list, tuple)):
        return "a list"
    if isinstance(v, bool):
        return "true" if v else "false"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
