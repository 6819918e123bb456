"""Dynamic and static loss scaling (Model Zoo's CSDynamicLossScale, docs/sources.md): growth,
backoff, skips, clamps, state."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cs2sim.runtime.numerics.loss_scale import (
    DynamicLossScaler,
    StaticLossScaler,
    build_loss_scaler,
)
from cs2sim.system.errors import ConfigError, RuntimeFailure


def run(scaler: DynamicLossScaler, pattern: str) -> list[float]:
    """Feed a string of steps ('.' finite, 'x' overflow); the scale after each."""
    out = []
    for c in pattern:
        scaler.update(c == ".")
        out.append(scaler.scale)
    return out


def tf_reference(pattern: str, init: float, period: int, lo: float, hi: float, tol: float):
    """CSDynamicLossScale.update transcribed literally from Model Zoo's TF LossScale.py."""
    scale, steps, overflows, out = init, 0, 0, []
    for c in pattern:
        isfinite = int(c == ".")
        steps += 1
        overflows += 1 - isfinite
        dec = int(np.float32(overflows) / np.float32(steps) > np.float32(tol))
        overflows *= 1 - dec
        steps *= 1 - dec
        scale = scale / (1 + dec)
        fac = max(steps - period + 1, 0)
        scale = scale * (fac + 1)
        scale = min(max(scale, lo), hi)
        steps *= 1 - fac
        overflows *= 1 - fac
        out.append(scale)
    return out


def test_defaults_are_model_zoo_tf():
    s = DynamicLossScaler()
    assert s.scale == 2.0**15 and s.steps_per_increase == 2000
    assert (s.min_loss_scale, s.max_loss_scale, s.overflow_tolerance) == (2.0**-14, 2.0**15, 0.05)


def test_growth_after_exactly_steps_per_increase_good_steps():
    s = DynamicLossScaler(initial_loss_scale=2.0**10, steps_per_increase=2000)
    assert run(s, "." * 1999)[-1] == 2.0**10  # not yet
    s.update(True)  # the 2000th good step
    assert s.scale == 2.0**11 and s.steps_since_rescale == 0
    assert run(s, "." * 2000)[-2:] == [2.0**11, 2.0**12]


def test_backoff_on_the_first_overflow_and_counters_reset():
    s = DynamicLossScaler(initial_loss_scale=2.0**10, steps_per_increase=5)
    assert run(s, "x") == [2.0**9]
    assert (s.steps_since_rescale, s.overflows_since_rescale) == (0, 0)
    assert run(s, "....x") == [2.0**9] * 4 + [2.0**8]  # 1 overflow in 5 steps: 0.2 > 0.05


def test_overflow_within_tolerance_does_not_halve_and_counts_toward_growth():
    s = DynamicLossScaler(initial_loss_scale=2.0**10, steps_per_increase=40)
    # 19 good steps then an overflow: 1/20 = 0.05 is not > 0.05
    assert run(s, "." * 19 + "x")[-1] == 2.0**10 and s.overflows_since_rescale == 1
    # a second overflow at step 21: 2/21 > 0.05 halves
    assert run(s, "x")[-1] == 2.0**9
    s = DynamicLossScaler(initial_loss_scale=2.0**10, steps_per_increase=40)
    # a tolerated overflow still counts as one of the 40 steps: x2 at step 40
    assert run(s, "." * 19 + "x" + "." * 20)[-2:] == [2.0**10, 2.0**11]


def test_clamps_at_min_and_max():
    s = DynamicLossScaler(initial_loss_scale=2.0**-12, steps_per_increase=3)
    assert run(s, "xxxxx") == [2.0**-13, 2.0**-14, 2.0**-14, 2.0**-14, 2.0**-14]
    s = DynamicLossScaler(initial_loss_scale=2.0**14, steps_per_increase=2, max_loss_scale=2.0**15)
    assert run(s, "......") == [2.0**14, 2.0**15, 2.0**15, 2.0**15, 2.0**15, 2.0**15]
    s = DynamicLossScaler(initial_loss_scale=2.0**20)  # above max: clamped by the first update
    assert run(s, ".") == [2.0**15]


@given(
    st.text(alphabet=".x", min_size=1, max_size=300),
    st.integers(1, 12),
    st.sampled_from([0.0, 0.05, 0.2, 0.5, 1 / 3]),
)
def test_matches_the_tf_algorithm_step_for_step(pattern, period, tol):
    s = DynamicLossScaler(2.0**3, period, 2.0**-2, 2.0**6, tol)
    assert run(s, pattern) == tf_reference(pattern, 2.0**3, period, 2.0**-2, 2.0**6, tol)


def test_unscale_divides_in_place_and_signals_skipped_steps():
    s = DynamicLossScaler(initial_loss_scale=8.0)
    grads = {"w": np.array([[8.0, 16.0]], np.float32), "b": np.array([24.0], np.float32)}
    ok, norm = s.unscale_(grads)
    assert ok and norm == pytest.approx(math.sqrt(1 + 4 + 9))
    assert grads["w"].tolist() == [[1.0, 2.0]] and grads["b"].tolist() == [3.0]
    for bad in (np.inf, -np.inf, np.nan):
        g = {"w": np.array([1.0, bad], np.float32)}
        ok, norm = s.unscale_(g)
        assert not ok and norm == math.inf  # the trainer skips this step


def test_unscale_detects_overflow_made_by_the_division():
    s = DynamicLossScaler(initial_loss_scale=2.0**-14, min_loss_scale=2.0**-14)
    ok, norm = s.unscale_([np.array([3e35], np.float32)])  # / 2^-14 overflows float32
    assert not ok and norm == math.inf


def test_state_round_trip_continues_identically():
    a = DynamicLossScaler(initial_loss_scale=2.0**10, steps_per_increase=7)
    run(a, "....x.." + "." * 30 + "x...")
    state = a.state_dict()
    assert set(state) == {"loss_scale", "steps_since_rescale", "overflows_since_rescale"}
    b = DynamicLossScaler(initial_loss_scale=1.0, steps_per_increase=7)
    b.load_state_dict(state)
    tail = "..x......x" + "." * 20
    assert run(b, tail) == run(a, tail) and b.state_dict() == a.state_dict()


def test_load_state_from_a_static_run_starts_fresh_and_partial_state_fails():
    s = DynamicLossScaler(initial_loss_scale=2.0**12)
    s.load_state_dict(StaticLossScaler(4.0).state_dict())
    assert s.scale == 2.0**12 and s.steps_since_rescale == 0
    with pytest.raises(RuntimeFailure, match="steps_since_rescale"):
        s.load_state_dict({"loss_scale": 2.0, "overflows_since_rescale": 0})


def test_static_scaler_divides_never_changes_and_reports_nonfinite():
    s = StaticLossScaler(1024.0)
    g = [np.array([1024.0, -2048.0], np.float32)]
    ok, norm = s.unscale_(g)
    assert ok and g[0].tolist() == [1.0, -2.0] and norm == pytest.approx(math.sqrt(5))
    run(s, "x..x")  # update is a no-op
    assert s.scale == 1024.0 and s.state_dict() == {} and not s.dynamic
    assert s.unscale_([np.array([np.nan], np.float32)]) == (False, math.inf)
    one = StaticLossScaler()
    g = [np.array([3.0], np.float32)]
    assert one.unscale_(g) == (True, 3.0) and g[0][0] == 3.0


def test_multiplier_other_than_two_warns_and_uses_two(caplog):
    with caplog.at_level(logging.WARNING, logger="cs2sim.run"):
        s = DynamicLossScaler(initial_loss_scale=4.0, steps_per_increase=1, multiplier=3.0)
    assert (
        "Only a value of 2.0 is supported for dynamic loss scaling multiplier, but 3.0 was "
        "provided. Adjusting value to 2.0 instead."
    ) in caplog.text
    assert run(s, ".") == [8.0]


def test_build_from_params_and_defaults_by_half_format():
    s = build_loss_scaler({"loss_scaling_factor": "dynamic"}, "float16")
    assert s.dynamic and s.scale == 2.0**15 and s.max_loss_scale == 2.0**15
    s = build_loss_scaler({"loss_scaling_factor": "dynamic"}, "cbfloat16")
    assert s.scale == 2.0**31 and s.max_loss_scale == 2.0**31 and s.min_loss_scale == 2.0**-14
    s = build_loss_scaler(
        {
            "loss_scaling_factor": "dynamic",
            "initial_loss_scale": 2147483648.0,
            "max_loss_scale": 2147483648.0,
            "steps_per_increase": 100,
            "overflow_tolerance": 0.0,
        },
        "float16",
    )
    assert (s.scale, s.max_loss_scale, s.steps_per_increase, s.overflow_tolerance) == (
        2.0**31,
        2.0**31,
        100,
        0.0,
    )
    assert build_loss_scaler({"loss_scaling_factor": "tf_dynamic"}, "float16").dynamic
    for opt, scale in (
        ({}, 1.0),
        ({"loss_scaling_factor": 128}, 128.0),
        ({"loss_scaling_factor": "1e3"}, 1000.0),
    ):
        s = build_loss_scaler(opt, "float32")
        assert not s.dynamic and s.scale == scale


@pytest.mark.parametrize(
    ("opt", "message"),
    [
        (
            {"loss_scaling_factor": "fast"},
            "loss_scaling_factor must be a positive number or 'dynamic'",
        ),
        ({"loss_scaling_factor": 0}, "loss_scaling_factor must be a positive number"),
        (
            {"loss_scaling_factor": "dynamic", "min_loss_scale": 2.0**-15},
            "min_loss_scale too small",
        ),
        ({"loss_scaling_factor": "dynamic", "max_loss_scale": 1e39}, "exceeds FP32_MAX"),
        (
            {"loss_scaling_factor": "dynamic", "steps_per_increase": 0},
            "steps_per_increase must be a positive",
        ),
        (
            {"loss_scaling_factor": "dynamic", "overflow_tolerance": -0.1},
            "overflow_tolerance must be >= 0",
        ),
        (
            {"loss_scaling_factor": "dynamic", "min_loss_scale": 4.0, "max_loss_scale": 2.0},
            "must not exceed",
        ),
    ],
)
def test_impossible_settings_raise_one_sentence(opt, message):
    with pytest.raises(ConfigError, match=message) as e:
        build_loss_scaler(opt, "float16")
    assert str(e.value).endswith(".") and "\n" not in str(e.value)
