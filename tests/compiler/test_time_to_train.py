"""Time to train (runtime/compiler/timetrain.py): programming + steps at the estimate +
checkpoint saves. Linear in steps and in each checkpoint; fewer hours on more systems."""

from __future__ import annotations

import math

from compiler_helpers import ZOO, params
from hypothesis import given
from hypothesis import strategies as st

from cs2sim.runtime.compiler import compile_run
from cs2sim.runtime.compiler.timetrain import (
    CHECKPOINT_SECONDS_PER_BILLION,
    PROGRAMMING_SECONDS,
    checkpoint_saves,
    for_plan,
    time_to_train,
)
from cs2sim.system.state import ExecMode

rate = st.floats(1.0, 1e7, allow_nan=False)
steps = st.integers(1, 10**6)


@given(rate, st.integers(1, 4096), st.integers(0, 10**10), steps, steps)
def test_training_time_is_linear_in_steps(r, batch, n_params, a, b):
    ta, tb = (time_to_train(r, batch, n_params, s) for s in (a, b))
    tab = time_to_train(r, batch, n_params, a + b)
    assert math.isclose(
        tab.training_seconds, ta.training_seconds + tb.training_seconds, rel_tol=1e-9
    )
    assert math.isclose(tab.training_seconds, (a + b) * batch / r, rel_tol=1e-9)
    assert tab.programming_seconds == PROGRAMMING_SECONDS  # once a run, whatever its length
    assert math.isclose(
        tab.total_seconds,
        tab.programming_seconds + tab.training_seconds + tab.checkpoint_seconds,
        rel_tol=1e-12,
    )


@given(rate, st.integers(0, 10**10), st.integers(1, 10**5), st.integers(1, 1000))
def test_every_checkpoint_adds_the_same_save_time(r, n_params, every, k):
    # k saves at the multiples; one more step adds a final save at the last step
    on = time_to_train(r, 8, n_params, every * k, every)
    off = time_to_train(r, 8, n_params, every * k + 1, every)
    per_save = CHECKPOINT_SECONDS_PER_BILLION * n_params / 1e9
    assert on.checkpoints == k and off.checkpoints == k + 1
    assert math.isclose(on.checkpoint_seconds, k * per_save, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(
        off.checkpoint_seconds - on.checkpoint_seconds, per_save, rel_tol=1e-9, abs_tol=1e-9
    )


def test_saves_count_the_multiples_and_the_last_step():
    assert checkpoint_saves(0, 10) == 0
    assert checkpoint_saves(10, 0) == 1  # the last step only
    assert checkpoint_saves(100, 10) == 10
    assert checkpoint_saves(105, 10) == 11


def test_steps_or_samples_or_max_steps(tmp_path):
    p = params("gptj", ZOO / "gptj" / "configs" / "params_gptj_6b.yaml")
    r = compile_run("gptj", p, tmp_path, mode=ExecMode.WEIGHT_STREAMING, draw_map=False)
    batch = p["train_input"]["batch_size"]
    assert for_plan(r.plan, p).steps == p["runconfig"]["max_steps"]
    assert for_plan(r.plan, p, steps=7).steps == 7
    assert for_plan(r.plan, p, samples=batch * 3 + 1).steps == 4  # whole steps
    assert for_plan(r.plan, p).num_params == r.plan.estimate["num_params"] > 6e9


def test_more_systems_train_the_real_shapes_sooner(tmp_path):
    shapes = (
        ("gptj", ZOO / "gptj" / "configs" / "params_gptj_6b.yaml"),
        ("gpt2", ZOO.parent.parent / "bench" / "fidelity" / "gpt_neox_20b_b256.yaml"),
    )
    for model, path in shapes:
        hours = []
        for n in (1, 2, 4):
            p = params(model, path, runconfig__num_csx=n, runconfig__max_steps=1000)
            r = compile_run(
                model, p, tmp_path / f"{model}{n}", mode=ExecMode.WEIGHT_STREAMING, draw_map=False
            )
            hours.append(for_plan(r.plan, p).total_seconds)
        assert hours[0] > hours[1] > hours[2]
