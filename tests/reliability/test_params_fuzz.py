"""Params mutation fuzz: every mutated params file is either accepted or refused in
ONE sentence (a CsError), never a traceback; each one is read, validated and written back with
bounded time and memory.

Seeds are the published Model Zoo configs (tests/modelzoo/configs) and the project's own. Two
kinds of mutation: structural (hypothesis replaces, deletes or adds keys with hostile values:
huge and whole-number floats, inf/nan, 2**63, deep nesting, wrong types) and textual (the YAML
text itself is spliced with anchors/aliases, tags, control characters, truncation). Each example
goes through everything run.py does before training: load_params, validate_params,
apply_cli_overrides, resolve_precision, fill_resolved, check_optimizer_params, LoopConfig, the
host-memory check and write_params. `derandomize=True`: CI sees the same examples every time.
"""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs2sim.runtime.numerics.mixed_precision import resolve_precision
from cs2sim.runtime.numerics.optim import check_optimizer_params
from cs2sim.runtime.params import (
    apply_cli_overrides,
    fill_resolved,
    load_params,
    validate_params,
    write_params,
)
from cs2sim.runtime.training.runconfig import LoopConfig
from cs2sim.system.errors import CsError

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted((ROOT / "tests" / "modelzoo" / "configs").glob("*.yaml")) + sorted(
    (ROOT / "runtime" / "modelzoo").glob("*/configs/*.yaml")
)
SEED_TEXT = [(p, p.read_text()) for p in SEEDS]
MODEL_OF = {
    "fc": "fc_mnist",
    "gpt2": "gpt2",
    "gpt3": "gpt2",
    "gptj": "gptj",
    "bert": "bert",
    "llama": "llama",
    "params": None,
}

MAX_SECONDS = 5.0  # per example, on a loaded 2-core CI host; typical is a few milliseconds
MAX_PEAK_BYTES = 64 << 20  # per example, Python allocations (tracemalloc)

pytestmark = pytest.mark.slow  # every published params file mutated


def model_of(path: Path) -> str:
    """The model a seed file is for."""
    if path.parent.name == "configs" and path.parent.parent.parent.name == "modelzoo":
        return path.parent.parent.name  # runtime/modelzoo/<model>/configs
    return MODEL_OF[path.name.split("_")[0]]


hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**53, 2**53 + 1, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e308, -1e308, 1e30, 1e-320, 0.5, 2.0, float("inf"), float("nan")]),
    st.text(max_size=20),
    st.sampled_from(
        [
            "dynamic",
            "AdamW",
            "gelu",
            "relu",
            "float16",
            "cbfloat16",
            "1e-3",
            "",
            "\x1b[2J",
            "train",
            "CosineDecay",
        ]
    ),
)
hostile_values = st.recursive(
    hostile_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _paths(tree: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in tree.items():
        out.append((*prefix, k))
        if isinstance(v, dict):
            out += _paths(v, (*prefix, k))
    return out


@st.composite
def structural_mutation(draw) -> tuple[Path, str]:
    path, text = draw(st.sampled_from(SEED_TEXT))
    tree = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(tree)
        target = draw(st.sampled_from(paths)) if paths else ()
        parent = tree
        for k in target[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace" and target:
            parent[target[-1]] = draw(hostile_values)
        elif action == "delete" and target:
            del parent[target[-1]]
        else:
            parent[
                draw(
                    st.sampled_from(
                        [
                            "batch_size",
                            "learning_rate",
                            "max_steps",
                            "x",
                            "log_steps",
                            "data_dir",
                            "hidden_size",
                            "runconfig",
                        ]
                    )
                )
            ] = draw(hostile_values)
    return path, yaml.safe_dump(tree, allow_unicode=True)


SPLICES = [
    "&a [1, 2]",
    "*a",
    "!!python/object:os.system 'x'",
    "[[[[[[[[",
    "{a: *b}",
    "\t",
    "\x00",
    "\x1b[2J",
    ": : :",
    "- - -",
    "? x",
    "!!binary AAAA",
    "&b",
    "<<: *a",
    "1e308",
    "0x1F",
    ".nan",
    "~",
]


@st.composite
def textual_mutation(draw) -> tuple[Path, str]:
    path, text = draw(st.sampled_from(SEED_TEXT))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        if draw(st.booleans()):
            text = text[:at] + draw(st.sampled_from(SPLICES)) + text[at:]
        else:
            text = text[:at] + text[at + draw(st.integers(0, 40)) :]
    return path, text


def run_front_end(path: Path, text: str, tmp: Path) -> None:
    """What run.py does with a params file before the first step."""
    from cs2sim.runtime.training.trainer import Trainer

    f = tmp / "p.yaml"
    f.write_text(text, encoding="utf-8", errors="surrogatepass")
    model = model_of(path)
    raw = load_params(f)
    params, _ = validate_params(raw, model, source=str(f))
    params = apply_cli_overrides(params, {"max_steps": 3, "mode": "train"})
    half, _ = resolve_precision(params)
    fill_resolved(params, half)
    check_optimizer_params(params["optimizer"], half)
    LoopConfig.from_params(params)
    trainer = Trainer(model, params, tmp / "md", half=half)
    trainer.check_host_memory("train_and_eval")
    write_params(params, tmp / "md" / "train" / "params_train.yaml")


def check_one(path: Path, text: str, tmp_path_factory) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        run_front_end(path, text, tmp)
    except CsError as e:  # a refusal: one sentence, no traceback
        message = str(e)
        assert message and "\n" not in message and "Traceback" not in message, message
    finally:
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < MAX_SECONDS, (path.name, elapsed)
    assert peak < MAX_PEAK_BYTES, (path.name, peak)


# CS2SIM_FUZZ_EXAMPLES=5000 explores further (random, not derandomized) on a developer machine.
_EXAMPLES = int(os.environ.get("CS2SIM_FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=_EXAMPLES,
    deadline=None,
    derandomize=_EXAMPLES == 150,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@FUZZ
@given(structural_mutation())
def test_structural_mutations_never_trace_back(tmp_path_factory, case):
    check_one(*case, tmp_path_factory)


@FUZZ
@given(textual_mutation())
def test_textual_mutations_never_trace_back(tmp_path_factory, case):
    check_one(*case, tmp_path_factory)


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_every_seed_passes_the_front_end_or_is_refused_for_memory(tmp_path_factory, path):
    try:
        run_front_end(path, path.read_text(), tmp_path_factory.mktemp("seed"))
    except CsError as e:
        assert "on the host needs about" in str(e), (path, e)


def test_infinite_learning_rate_is_refused_before_anything_is_written(tmp_path_factory):
    path, text = SEED_TEXT[0]
    tmp = tmp_path_factory.mktemp("w")
    tree = yaml.safe_load(text)
    tree["optimizer"]["learning_rate"] = float("inf")
    with pytest.raises(CsError, match="must be a finite number, not inf"):
        run_front_end(path, yaml.safe_dump(tree), tmp)
    assert not (tmp / "md").exists()
