"""Optimizers against hand-computed float64 updates; schedules; clipping; state round trips."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cs2sim.runtime.numerics.clipping import (
    Clipper,
    build_clipper,
    check_clipping,
    clip_by_global_norm,
    clip_by_value,
    global_norm,
)
from cs2sim.runtime.numerics.optim import (
    OPTIMIZER_SCHEMA,
    SGD,
    Adam,
    AdamW,
    build_optimizer,
    check_optimizer_params,
    decays,
)
from cs2sim.runtime.numerics.schedules import build_schedule, check_learning_rate
from cs2sim.system.errors import ConfigError, RuntimeFailure

# "big.weight" spans three update blocks (the last one partial); fc.weight is made column-major,
# which takes the whole-array path
SHAPES = {"fc.weight": (3, 4), "fc.bias": (4,), "ln_f.weight": (4,), "big.weight": (3, 50_001)}


def make_params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    params = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    params["fc.weight"] = np.asfortranarray(params["fc.weight"])
    return params


def grads_at(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return {n: (rng.standard_normal(s) * 0.5).astype(np.float32) for n, s in SHAPES.items()}


def run(opt, steps: int, start: int = 0) -> None:
    for t in range(start, start + steps):
        opt.step(grads_at(t), t)


def lr_of(t: int) -> float:
    return 0.1 / (1 + t)  # a schedule, so the step index matters


def close(a: dict, b: dict) -> None:
    for n in a:
        np.testing.assert_allclose(a[n], b[n], rtol=2e-5, atol=1e-6, err_msg=n)


# -- textbook references, float64 ------------------------------------------------------------------


def ref_sgd(p0, steps, momentum=0.0, nesterov=False, wd=0.0, decayed=lambda n: True):
    p = {n: v.astype(np.float64) for n, v in p0.items()}
    buf = {n: np.zeros_like(v) for n, v in p.items()}
    for t in range(steps):
        for n, g in grads_at(t).items():
            g = g.astype(np.float64) + (wd * p[n] if decayed(n) else 0.0)
            buf[n] = momentum * buf[n] + g
            d = g + momentum * buf[n] if nesterov else (buf[n] if momentum else g)
            p[n] = p[n] - lr_of(t) * d
    return p


def ref_adam(p0, steps, b1=0.9, b2=0.999, eps=1e-8, correct=True, wd=0.0, decoupled=False):
    """Kingma & Ba, with the step size folded in (their section 2), as TF and Model Zoo do."""
    p = {n: v.astype(np.float64) for n, v in p0.items()}
    m = {n: np.zeros_like(v) for n, v in p.items()}
    v = {n: np.zeros_like(x) for n, x in p.items()}
    for t in range(steps):
        k = t + 1
        c = math.sqrt(1 - b2**k) / (1 - b1**k) if correct else 1.0
        for n, g in grads_at(t).items():
            w = wd if decays(n) else 0.0
            g = g.astype(np.float64) + (0.0 if decoupled else w * p[n])
            m[n] = b1 * m[n] + (1 - b1) * g
            v[n] = b2 * v[n] + (1 - b2) * g * g
            u = c * m[n] / (np.sqrt(v[n]) + eps) + (w * p[n] if decoupled else 0.0)
            p[n] = p[n] - lr_of(t) * u
    return p


# -- the optimizers --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.5, "weight_decay_rate": 0.1},
    ],
)
def test_sgd_matches_reference(kw):
    p0 = make_params()
    params = {n: v.copy() for n, v in p0.items()}
    run(SGD(params, lr_of, **kw), 4)
    ref = ref_sgd(
        p0,
        4,
        kw.get("momentum", 0.0),
        kw.get("nesterov", False),
        kw.get("weight_decay_rate", 0.0),
        decayed=decays,
    )
    close(params, ref)


@pytest.mark.parametrize(
    "kw", [{}, {"correct_bias": False}, {"beta2": 0.95, "epsilon": 1e-5, "weight_decay_rate": 0.01}]
)
def test_adam_matches_reference(kw):
    p0 = make_params()
    params = {n: v.copy() for n, v in p0.items()}
    run(Adam(params, lr_of, **kw), 5)
    ref = ref_adam(
        p0,
        5,
        b2=kw.get("beta2", 0.999),
        eps=kw.get("epsilon", 1e-8),
        correct=kw.get("correct_bias", True),
        wd=kw.get("weight_decay_rate", 0.0),
    )
    close(params, ref)


@pytest.mark.parametrize("correct", [False, True])
def test_adamw_matches_reference_with_decoupled_decay(correct):
    p0 = make_params()
    params = {n: v.copy() for n, v in p0.items()}
    run(AdamW(params, lr_of, beta2=0.95, weight_decay_rate=0.1, correct_bias=correct), 5)
    close(params, ref_adam(p0, 5, b2=0.95, correct=correct, wd=0.1, decoupled=True))


def test_first_adam_step_by_hand():
    # t = 1: m = 0.1 g, v = 0.001 g^2, c = sqrt(0.001) / 0.1 -> the step is lr * g / (|g| + eps/...)
    p = {"w": np.array([1.0, -2.0], np.float32)}
    Adam(p, 0.01, epsilon=0.0).step({"w": np.array([0.5, -4.0], np.float32)}, 0)
    np.testing.assert_allclose(p["w"], [1.0 - 0.01, -2.0 + 0.01], rtol=1e-6)


def test_updates_in_place_and_allocate_nothing_per_step():
    params = {"w": np.ones((1000, 1000), np.float32), "b": np.ones(1000, np.float32)}
    ids = {n: id(a) for n, a in params.items()}
    grads = {n: np.full_like(a, 0.1) for n, a in params.items()}
    opt = AdamW(params, 1e-3, weight_decay_rate=0.01)
    opt.step(grads, 0)
    tracemalloc.start()
    opt.step(grads, 1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 100_000  # bytes; the parameters alone are 4 MB
    assert {n: id(a) for n, a in opt.params.items()} == ids and params["w"][0, 0] < 1.0


def test_weight_decay_rule_excludes_biases_and_norms():
    no_decay = [
        "fc.bias",
        "h.0.ln_1.weight",
        "h.0.ln_2.bias",
        "ln_f.weight",
        "blocks.2.attn.bias",
        "final_layer_norm.weight",
        "encoder.LayerNorm.weight",
        "norm.gamma",
        "ln.weight",
        "ln1.weight",
    ]
    decay = [
        "fc.weight",
        "h.0.attn.c_attn.weight",
        "wte.weight",
        "lm_head.kernel",
        "linear.weight",
        "kiln.weight",
        "blocks.0.mlp.c_fc.weight",
    ]
    assert not any(decays(n) for n in no_decay)
    assert all(decays(n) for n in decay)
    assert decays("fc.bias", exclude=["LayerNorm"]) and not decays(
        "x.LayerNorm.w", exclude=["LayerNorm"]
    )


def test_adamw_decays_weights_but_not_bias_or_norm():
    params = {n: np.ones(s, np.float32) for n, s in SHAPES.items()}
    zero = {n: np.zeros(s, np.float32) for n, s in SHAPES.items()}
    AdamW(params, 0.1, weight_decay_rate=0.5).step(zero, 0)
    np.testing.assert_allclose(params["fc.weight"], 1.0 - 0.1 * 0.5)
    assert (params["fc.bias"] == 1.0).all() and (params["ln_f.weight"] == 1.0).all()


def test_state_round_trip_gives_identical_continuation():
    for cls, kw in ((SGD, {"momentum": 0.9}), (Adam, {}), (AdamW, {"weight_decay_rate": 0.01})):
        a = make_params()
        opt_a = cls(a, lr_of, **kw)
        run(opt_a, 3)
        state = opt_a.state_dict()
        b = {n: v.copy() for n, v in a.items()}
        opt_b = cls(b, lr_of, **kw)
        opt_b.load_state_dict(state)
        run(opt_a, 3, start=3)
        run(opt_b, 3, start=3)
        for n in a:
            assert np.array_equal(a[n], b[n]), (cls.__name__, n)
        assert state["num_updates"] == 3 and opt_b.num_updates == 6


def test_state_dict_copies_unless_asked_and_mismatch_fails():
    opt = Adam(make_params(), 1e-3)
    run(opt, 1)
    copied, live = opt.state_dict(), opt.state_dict(copy=False)
    run(opt, 1, start=1)
    assert not np.array_equal(copied["exp_avg/fc.weight"], live["exp_avg/fc.weight"])
    assert live["exp_avg/fc.weight"] is opt.state["exp_avg"]["fc.weight"]
    with pytest.raises(RuntimeFailure, match="does not fit a SGD optimizer"):
        SGD(make_params(), 0.1, momentum=0.9).load_state_dict(copied)
    bad = dict(copied, **{"exp_avg/fc.weight": np.zeros((4, 3), np.float32)})
    with pytest.raises(RuntimeFailure, match="has shape"):
        Adam(make_params(), 1e-3).load_state_dict(bad)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: SGD(p, -0.1), "optimizer.learning_rate must be >= 0, not -0.1."),
        (lambda p: SGD(p, 0.1, momentum=1.0), "optimizer.momentum must be in [0, 1), not 1.0."),
        (lambda p: Adam(p, 0.1, beta1=1.5), "optimizer.beta1 must be in [0, 1), not 1.5."),
        (lambda p: Adam(p, 0.1, beta2=-0.1), "optimizer.beta2 must be in [0, 1), not -0.1."),
        (lambda p: Adam(p, 0.1, epsilon=-1e-8), "optimizer.epsilon must be >= 0, not -1e-08."),
        (
            lambda p: AdamW(p, 0.1, weight_decay_rate=-1),
            "optimizer.weight_decay_rate must be >= 0, not -1.",
        ),
    ],
)
def test_hyperparameters_are_validated(make, message):
    with pytest.raises(ConfigError) as e:
        make(make_params())
    assert str(e.value) == message


# -- from the params YAML --------------------------------------------------------------------------


def test_build_optimizer_from_reference_yaml_sections():
    # Model Zoo's params files (PyTorch fc_mnist, TF GPT-2, PyTorch GPT-2; docs/sources.md)
    opt = build_optimizer(
        {
            "optimizer_type": "SGD",
            "learning_rate": 0.001,
            "momentum": 0.9,
            "loss_scaling_factor": 1.0,
        },
        make_params(),
    )
    assert type(opt) is SGD and opt.momentum == 0.9 and opt.lr_at(123) == 0.001
    tf = {
        "optimizer_type": "adamw",
        "weight_decay_rate": 0.01,
        "learning_rate": 2.8e-4,
        "loss_scaling_factor": "dynamic",
        "log_summaries": True,
    }
    opt = build_optimizer(tf, make_params(), half="float16")
    assert type(opt) is AdamW and opt.epsilon == 1e-5 and not opt.correct_bias  # TF mixed default
    assert opt.decay == {"fc.weight": 0.01, "fc.bias": 0.0, "ln_f.weight": 0.0, "big.weight": 0.01}
    pt = {
        "optimizer_type": "AdamW",
        "correct_bias": True,
        "disable_lr_steps_reset": False,
        "weight_decay_rate": 0.01,
        "max_gradient_norm": 1.0,
        "learning_rate": 0.00028,
        "loss_scaling_factor": "dynamic",
    }
    opt = build_optimizer(pt, make_params())
    assert opt.correct_bias and opt.epsilon == 1e-8 and (opt.beta1, opt.beta2) == (0.9, 0.999)
    fc_tf = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1.0e-8}
    opt = build_optimizer(fc_tf, make_params())
    assert type(opt) is Adam and opt.correct_bias  # TF fc_mnist: Adam when optimizer_type is unset


def test_build_optimizer_aliases_and_defaults():
    opt = build_optimizer({"optimizer_type": "momentum", "learning_rate": "1e-3"}, make_params())
    assert type(opt) is SGD and opt.momentum == 0.9 and opt.lr_at(0) == 1e-3
    assert (
        build_optimizer({"optimizer_type": "sgd", "learning_rate": 1}, make_params()).momentum
        == 0.0
    )
    opt = build_optimizer(
        {
            "optimizer_type": "adamw",
            "learning_rate": 1e-3,
            "betas": [0.9, 0.95],
            "eps": 1e-8,
            "weight_decay": 0.1,
        },
        make_params(),
    )
    assert (opt.beta2, opt.epsilon, opt.decay["fc.weight"]) == (0.95, 1e-8, 0.1)
    opt = build_optimizer(
        {
            "optimizer_type": "adamw",
            "learning_rate": 1e-3,
            "use_bias_correction": True,
            "exclude_from_weight_decay": ["fc"],
            "weight_decay_rate": 0.1,
        },
        make_params(),
    )
    assert opt.correct_bias and opt.decay == {
        "fc.weight": 0.0,
        "fc.bias": 0.0,
        "ln_f.weight": 0.1,  # the explicit list replaces the default rule
        "big.weight": 0.1,
    }


@pytest.mark.parametrize(
    ("opt", "message"),
    [
        (
            {"optimizer_type": "lamb", "learning_rate": 0.1},
            "optimizer.optimizer_type must be one of sgd, momentum, adam, adamw",
        ),
        ({"optimizer_type": "adam"}, "optimizer.learning_rate is required"),
        (
            {"learning_rate": "fast"},
            "optimizer.learning_rate must be a number or a schedule, not 'fast'.",
        ),
        ({"learning_rate": 0.1, "betas": [0.9]}, "optimizer.betas must be a list of two numbers"),
        (
            {"learning_rate": 0.1, "exclude_from_weight_decay": ["("]},
            "exclude_from_weight_decay must be a list of regexes",
        ),
    ],
)
def test_build_optimizer_errors_name_the_key(opt, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        build_optimizer(opt, make_params())


def test_check_optimizer_params_catches_cross_key_problems():
    check_optimizer_params(
        {"optimizer_type": "adamw", "learning_rate": 1e-3, "loss_scaling_factor": "dynamic"}
    )
    with pytest.raises(ConfigError, match="Do not set both"):
        check_optimizer_params(
            {"learning_rate": 0.1, "max_gradient_norm": 1.0, "max_gradient_value": 5}
        )
    with pytest.raises(ConfigError, match="min_loss_scale too small"):
        check_optimizer_params(
            {"learning_rate": 0.1, "loss_scaling_factor": "dynamic", "min_loss_scale": 1e-9}
        )
    with pytest.raises(ConfigError, match="beta1"):
        check_optimizer_params({"learning_rate": 0.1, "beta1": 1.0})


def test_schema_lists_every_reference_optimizer_key_with_model_zoo_defaults():
    keys = {
        "optimizer_type",
        "learning_rate",
        "momentum",
        "beta1",
        "beta2",
        "epsilon",
        "weight_decay_rate",
        "max_gradient_norm",
        "max_gradient_value",
        "grad_accum_steps",
        "loss_scaling_factor",
        "initial_loss_scale",
        "steps_per_increase",
        "min_loss_scale",
        "max_loss_scale",
        "overflow_tolerance",
        "log_summaries",
        "correct_bias",
        "disable_lr_steps_reset",
    }
    assert keys <= set(OPTIMIZER_SCHEMA)
    d = {k: key.default for k, key in OPTIMIZER_SCHEMA.items()}
    assert (d["beta1"], d["beta2"], d["loss_scaling_factor"], d["steps_per_increase"]) == (
        0.9,
        0.999,
        1.0,
        2000,
    )
    assert (d["overflow_tolerance"], d["grad_accum_steps"], d["log_summaries"]) == (0.05, 1, False)
    check = OPTIMIZER_SCHEMA["optimizer_type"].check
    assert check("AdamW") is None and check("lamb")
    check = OPTIMIZER_SCHEMA["loss_scaling_factor"].check
    assert check("dynamic") is None and check(2.0) is None and check("fast") and check(0)
    assert OPTIMIZER_SCHEMA["learning_rate"].check is check_learning_rate
    for name, key in OPTIMIZER_SCHEMA.items():
        assert key.doc, name


# -- schedules -------------------------------------------------------------------------------------

# Model Zoo GPT-2 R1.9: linear warmup over 1600 steps to 6e-4, then linear decay over 150000
GPT2_R19 = [
    {
        "scheduler": "Linear",
        "initial_learning_rate": 0.0,
        "end_learning_rate": 0.0006,
        "steps": 1600,
    },
    {
        "scheduler": "Linear",
        "initial_learning_rate": 0.0006,
        "end_learning_rate": 0.0,
        "steps": 150000,
    },
]


def test_warmup_then_linear_decay():
    s = build_schedule(GPT2_R19)
    expected = {0: 0.0, 800: 0.0003, 1600: 0.0006, 1600 + 75000: 0.0003, 151600: 0.0, 10**6: 0.0}
    for step, lr in expected.items():
        assert s(step) == pytest.approx(lr, abs=1e-12), step
    assert s(1599) < s(1600) > s(1601)


def test_warmup_then_cosine_and_reset_flag():
    sched = [
        {
            "scheduler": "Linear",
            "initial_learning_rate": 0.0,
            "end_learning_rate": 1.0,
            "steps": 10,
        },
        {"scheduler": "Cosine", "initial_learning_rate": 1.0, "alpha": 0.1, "decay_steps": 100},
    ]
    s = build_schedule(sched)
    assert s(5) == 0.5 and s(10) == 1.0 and s(60) == pytest.approx(0.1 + 0.9 * 0.5)
    assert s(110) == pytest.approx(0.1) and s(500) == pytest.approx(0.1)
    no_reset = build_schedule(sched, disable_lr_steps_reset=True)  # cosine sees the global step
    assert no_reset(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.6)))
    pt = {
        "scheduler": "CosineDecay",
        "initial_learning_rate": 1.0,
        "end_learning_rate": 0.1,
        "decay_steps": 100,
    }
    assert build_schedule(pt)(30) == pytest.approx(build_schedule(sched[1])(30))


def test_other_schedulers():
    assert build_schedule(3e-4)(99) == 3e-4 and build_schedule("1e-4")(0) == 1e-4
    exp = {
        "scheduler": "Exponential",
        "initial_learning_rate": 1.0,
        "decay_steps": 10,
        "decay_rate": 0.5,
    }
    assert build_schedule(exp)(15) == pytest.approx(0.5**1.5)
    assert build_schedule({**exp, "staircase": True})(15) == 0.5
    poly = {
        "scheduler": "Polynomial",
        "initial_learning_rate": 1.0,
        "end_learning_rate": 0.0,
        "steps": 10,
        "power": 2,
    }
    assert build_schedule(poly)(5) == 0.25
    pw = {"scheduler": "PiecewiseConstant", "values": [1.0, 0.5, 0.1], "boundaries": [10, 20]}
    assert [build_schedule(pw)(t) for t in (0, 10, 11, 20, 21)] == [1.0, 1.0, 0.5, 0.5, 0.1]
    const = [
        {"scheduler": "constant", "learning_rate": 0.1, "steps": 5},
        {
            "scheduler": "LinearLR",
            "initial_learning_rate": 0.1,
            "end_learning_rate": 0.0,
            "total_iters": 10,
        },
    ]
    assert [build_schedule(const)(t) for t in (4, 5, 10, 15)] == pytest.approx(
        [0.1, 0.1, 0.05, 0.0]
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fast", "optimizer.learning_rate must be a number or a schedule, not 'fast'."),
        (-1e-3, "optimizer.learning_rate must be >= 0, not -0.001."),
        (
            {"scheduler": "Warp"},
            "optimizer.learning_rate.scheduler must be one of Constant, Linear",
        ),
        (
            {"scheduler": "Linear", "initial_learning_rate": 1, "end_learning_rate": 0},
            "optimizer.learning_rate needs steps (or decay_steps) for the Linear scheduler.",
        ),
        (
            [
                {"scheduler": "Constant", "learning_rate": 1},
                {"scheduler": "Constant", "learning_rate": 2},
            ],
            "optimizer.learning_rate[0] needs steps: every schedule but the last must say how many "
            "steps it lasts.",
        ),
        (
            [GPT2_R19[0], {**GPT2_R19[1], "steps": 0}],
            "optimizer.learning_rate[1].steps must be a positive integer, not 0.",
        ),
        (
            {
                "scheduler": "Exponential",
                "initial_learning_rate": 1,
                "decay_steps": 1,
                "decay_rate": 9,
            },
            "optimizer.learning_rate.decay_rate must be in [0, 1], not 9.",
        ),
        (
            {
                "scheduler": "Polynomial",
                "initial_learning_rate": 1,
                "end_learning_rate": 0,
                "steps": 1,
                "power": -1,
            },
            "optimizer.learning_rate.power must be >= 0, not -1.",
        ),
        (
            {
                "scheduler": "Linear",
                "initial_learning_rate": "x",
                "end_learning_rate": 0,
                "steps": 1,
            },
            "optimizer.learning_rate.initial_learning_rate must be a number, not 'x'.",
        ),
    ],
)
def test_schedule_errors_name_the_key_path(value, message):
    with pytest.raises(ConfigError) as e:
        build_schedule(value)
    assert str(e.value).startswith(message)
    assert check_learning_rate(value)  # the schema check reports it too
    assert check_learning_rate(GPT2_R19) is None


junk = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "scheduler",
                    "steps",
                    "learning_rate",
                    "initial_learning_rate",
                    "end_learning_rate",
                    "decay_steps",
                    "alpha",
                    "values",
                    "boundaries",
                    "decay_rate",
                    "power",
                    "cycle",
                ]
            ),
            inner
            | st.sampled_from(
                ["Linear", "Cosine", "Constant", "PiecewiseConstant", "Exponential", "Polynomial"]
            ),
            max_size=5,
        )
    ),
    max_leaves=10,
)


@given(junk)
def test_any_learning_rate_value_gives_a_schedule_or_a_config_error(value):
    try:
        s = build_schedule(value)
    except ConfigError as e:
        assert str(e).startswith("optimizer.learning_rate") and check_learning_rate(value)
    else:
        assert check_learning_rate(value) is None and math.isfinite(s(0)) and s(10**9) >= 0


# -- clipping --------------------------------------------------------------------------------------


def test_global_norm_accumulates_wide_and_flags_nonfinite():
    g = {"a": np.full((300, 300), 1e-3, np.float32), "b": np.array([3.0, 4.0], np.float32)}
    assert global_norm(g) == pytest.approx(math.sqrt(90000 * 1e-6 + 25), rel=1e-6)
    huge = [np.array([3e20, 4e20], np.float32)]  # squares overflow float32, the norm does not
    assert global_norm(huge) == pytest.approx(5e20, rel=1e-6)
    assert global_norm([np.array([1.0, np.nan], np.float32)]) == math.inf
    assert global_norm([np.array([-np.inf], np.float32)]) == math.inf
    assert global_norm([]) == 0.0


def test_clip_by_global_norm_scales_all_only_above_the_limit():
    g = {"a": np.array([3.0], np.float32), "b": np.array([4.0], np.float32)}
    assert clip_by_global_norm(g, 10.0) == 5.0 and g["a"][0] == 3.0  # below: untouched
    assert clip_by_global_norm(g, 1.0) == 5.0
    np.testing.assert_allclose([g["a"][0], g["b"][0]], [0.6, 0.8], rtol=1e-6)
    g = [np.array([1.0, 1.0], np.float32)]
    clip_by_global_norm(g, 1.0, norm=4.0)  # uses the given (loss scaler's) norm, as TF's use_norm
    np.testing.assert_allclose(g[0], [0.25, 0.25])
    g = [np.array([np.inf, 1.0], np.float32)]
    assert clip_by_global_norm(g, 1.0) == math.inf and g[0][1] == 1.0  # skipped step: untouched


def test_clip_by_value_and_the_clipper():
    g = [np.array([-3.0, 0.5, 7.0, np.nan], np.float32)]
    clip_by_value(g, 1.0)
    assert g[0][:3].tolist() == [-1.0, 0.5, 1.0] and np.isnan(g[0][3])
    assert not build_clipper({}).enabled and build_clipper({}).__call__([np.ones(2)]) is None
    c = build_clipper({"max_gradient_norm": 1.0, "max_gradient_value": None})
    g = [np.array([6.0, 8.0], np.float32)]
    assert c(g) == 10.0 and np.allclose(g[0], [0.6, 0.8])
    c = build_clipper({"max_gradient_value": 2})
    g = [np.array([6.0, -8.0], np.float32)]
    assert c(g) is None and g[0].tolist() == [2.0, -2.0]


def test_clipping_errors_are_model_zoos_messages():
    with pytest.raises(ConfigError) as e:
        build_clipper({"max_gradient_norm": 1.0, "max_gradient_value": 1.0})
    assert str(e.value) == "Do not set both max_gradient_norm and max_gradient_value."
    with pytest.raises(ConfigError) as e:
        build_clipper({"max_gradient_norm": -1.0})
    assert str(e.value) == "max_gradient_norm cannot be negative. Got -1.0."
    with pytest.raises(ConfigError, match=r"max_gradient_value cannot be negative\. Got -2\.0\."):
        Clipper(max_value=-2.0)
    check_clipping(None, None)
    check_clipping(0, 5.0)
