"""Every range check of every params schema, at its boundaries: each end, and just past it.

The cases are generated from the schemas themselves (`Range` keeps its bounds as data), so a
range added to a schema is covered without a line here, and a check that drifts from its bounds
(`between(lo, hi)` excluding `hi`, `>` for `>=`) fails a case.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from cs2sim.runtime import params, registry, sections
from cs2sim.runtime.schema import Key, Range


def schemas() -> Iterator[tuple[str, dict[str, Key]]]:
    """(name, schema) for every section of the params file and every registered model."""
    yield "train_input", sections.INPUT_SCHEMA
    yield "eval_input", sections.EVAL_INPUT_SCHEMA
    yield "runconfig", sections.RUNCONFIG_SCHEMA
    yield "csconfig", sections.CSCONFIG_SCHEMA
    yield "optimizer", sections.optimizer_schema()
    for name in registry.names():
        yield f"model({name})", sections.model_schema(name)


def integral(key: Key) -> bool:
    types = key.type if isinstance(key.type, tuple) else (key.type,)
    return float not in types


def cases() -> list[tuple[str, Range, Any, bool]]:
    """(key path, its Range, a value, whether it is allowed) at and just past each end."""
    out = []
    seen: set[tuple[str, Range]] = set()  # models share keys (GPT-J's are GPT-2's): once each
    for section, schema in schemas():
        for name, key in schema.items():
            r = key.check
            if not isinstance(r, Range) or (name, r) in seen:
                continue
            seen.add((name, r))
            path = f"{section}.{name}"
            if integral(key):

                def step_down(x: Any) -> Any:
                    return x - 1

                def step_up(x: Any) -> Any:
                    return x + 1
            else:

                def step_down(x: Any) -> Any:
                    return math.nextafter(x, -math.inf)

                def step_up(x: Any) -> Any:
                    return math.nextafter(x, math.inf)

            if r.lo is not None:
                out.append((path, r, r.lo, not r.lo_open))
                out.append((path, r, step_down(r.lo), False))  # just past the low end
                if r.lo_open:
                    out.append((path, r, step_up(r.lo), True))  # just inside it
            if r.hi is not None:
                out.append((path, r, r.hi, not r.hi_open))
                out.append((path, r, step_up(r.hi), False))  # just past the high end
                if r.hi_open:
                    out.append((path, r, step_down(r.hi), True))
    return out


CASES = cases()


def test_the_schemas_hold_the_ranges_this_file_is_about() -> None:
    paths = {c[0] for c in CASES}
    # between(lo, hi) (both ends closed), at_most, an open interval, and a model's own ranges
    assert {
        "runconfig.seed",
        "train_input.num_workers",
        "runconfig.keep_checkpoint_max",
        "train_input.batch_size",
    } <= paths
    assert any(p.startswith("model(") for p in paths)
    assert any(r.lo_open and r.hi_open for _, r, _, _ in CASES)
    assert any(r.hi_open and not r.lo_open for _, r, _, _ in CASES)


@pytest.mark.parametrize(
    ("path", "check", "value", "allowed"), CASES, ids=[f"{p}={v!r}" for p, _, v, _ in CASES]
)
def test_each_end_of_each_range(path: str, check: Range, value: Any, allowed: bool) -> None:
    phrase = check(value)
    if allowed:
        assert phrase is None, f"{path} = {value!r} is inside its range but refused: {phrase}"
    else:
        assert phrase and phrase.startswith("must be"), f"{path} = {value!r} is past its end"


def test_a_value_past_an_end_is_refused_by_validation_naming_the_key() -> None:
    """The generated cases reach users through the validator: one sentence naming the key."""
    from cs2sim.system.errors import CsError

    raw = {
        "train_input": {"batch_size": 4},
        "model": {},
        "optimizer": {"optimizer_type": "sgd", "learning_rate": 0.1},
        "runconfig": {"max_steps": 1, "keep_checkpoint_max": sections.MAX_KEEP_CHECKPOINTS + 1},
    }
    with pytest.raises(CsError, match=r"runconfig\.keep_checkpoint_max"):
        params.validate_params(raw, "fc_mnist")
    raw["runconfig"]["keep_checkpoint_max"] = sections.MAX_KEEP_CHECKPOINTS  # the end is allowed
    params.validate_params(raw, "fc_mnist")


def test_between_includes_both_ends_and_at_most_excludes_zero() -> None:
    assert sections.between(3, 7)(3) is None and sections.between(3, 7)(7) is None
    assert sections.between(3, 7)(2) == sections.between(3, 7)(8) == "must be in [3, 7]"
    assert sections.at_most(5)(5) is None and sections.at_most(5)(1) is None
    assert (sections.at_most(5)(0), sections.at_most(5)(6)) == ("must be > 0", "must be at most 5")
