"""Every shipped config validates and compiles in its mode; the estimate moves the right way."""

from __future__ import annotations

import pytest
from compiler_helpers import WS_CONFIGS, ZOO, configs, params

from cs2sim.runtime.compiler import PlacementError, compile_run
from cs2sim.system.state import ExecMode

CONFIGS = configs()


@pytest.mark.parametrize(("model", "path"), CONFIGS, ids=[p.name for _, p in CONFIGS])
def test_shipped_config_validates_and_compiles_in_its_mode(tmp_path, model, path):
    mode = ExecMode.WEIGHT_STREAMING if path.name in WS_CONFIGS else ExecMode.PIPELINED
    p = params(model, path)
    v = compile_run(model, p, tmp_path, mode=mode, stop_after="validate")
    c = compile_run(model, p, tmp_path, mode=mode, draw_map=False)
    assert v.checksum == c.checksum and c.est_samples_per_sec > 0
    assert c.plan.mode == mode.value
    assert set(c.plan.blocks_in_order()) <= set(c.plan.blocks)
    if mode == ExecMode.PIPELINED:
        assert [k["name"] for k in c.plan.kernels]
    else:
        assert c.plan.layers and c.plan.num_csx == 1


@pytest.mark.parametrize(
    ("model", "name"), [("gpt2", "params_gpt3_xl.yaml"), ("gptj", "params_gptj_6b.yaml")]
)
def test_big_models_are_refused_in_pipelined_with_the_fix(tmp_path, model, name):
    p = params(model, ZOO / model / "configs" / name)
    with pytest.raises(PlacementError) as e:
        compile_run(model, p, tmp_path, mode=ExecMode.PIPELINED)
    from cs2sim.runtime.compiler.placement import fmt_bytes
    from cs2sim.system.hardware import WSE2

    msg = str(e.value)
    assert fmt_bytes(WSE2.usable_sram_bytes) in msg and "python-ws" in msg  # the capacity
    assert "config execmode setup" in msg
    assert not list(tmp_path.glob("cs_*"))


def _est(tmp_path, model, cfg, mode, **changes):
    p = params(model, ZOO / model / "configs" / cfg, **changes)
    return compile_run(model, p, tmp_path, mode=mode, draw_map=False).est_samples_per_sec


def test_estimate_falls_as_the_model_grows(tmp_path):
    pipe = [
        _est(
            tmp_path,
            "gpt2",
            "params_gpt2_small.yaml",
            ExecMode.PIPELINED,
            model__num_hidden_layers=n,
        )
        for n in (3, 6, 12)
    ]
    assert pipe[0] > pipe[1] > pipe[2]
    wide = [
        _est(
            tmp_path,
            "gpt2",
            "params_gpt2_small.yaml",
            ExecMode.PIPELINED,
            model__hidden_size=c,
            model__num_heads=12,
        )
        for c in (384, 768)
    ]
    assert wide[0] > wide[1]
    ws = [
        _est(
            tmp_path,
            "gpt2",
            "params_gpt3_xl.yaml",
            ExecMode.WEIGHT_STREAMING,
            model__num_hidden_layers=n,
        )
        for n in (12, 24, 48)
    ]
    assert ws[0] > ws[1] > ws[2]


def test_more_systems_raise_the_weight_streaming_estimate(tmp_path):
    one = _est(tmp_path, "gpt2", "params_gpt3_xl.yaml", ExecMode.WEIGHT_STREAMING)
    four = _est(
        tmp_path, "gpt2", "params_gpt3_xl.yaml", ExecMode.WEIGHT_STREAMING, runconfig__num_csx=4
    )
    assert four > one
