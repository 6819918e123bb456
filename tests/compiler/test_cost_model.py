"""Invariants of the cost model (docs/cost-model.md): what must hold for any model, never a target
figure."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from compiler_helpers import ZOO, fc_params, params, tiny_wafer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs2sim.runtime.compiler import PlacementError, compile_run
from cs2sim.runtime.compiler.cost import op_costs
from cs2sim.runtime.compiler.estimate import estimate_pipelined
from cs2sim.runtime.compiler.graph import extract_graph
from cs2sim.runtime.compiler.io import InputCluster
from cs2sim.runtime.compiler.kernels import match_kernels
from cs2sim.runtime.compiler.placement import place_pipelined
from cs2sim.runtime.compiler.report import parse_report
from cs2sim.runtime.compiler.streaming import plan_streaming
from cs2sim.system.hardware import PORT_BITS_S, WSE2
from cs2sim.system.state import ExecMode

W = ExecMode.WEIGHT_STREAMING
GPT = ZOO / "gpt2" / "configs" / "params_gpt2_small_ws.yaml"


def gpt(d: int, layers: int, heads: int, batch: int, seq: int = 2048, **more):
    """A GPT-3-shaped params dict through the gpt2 model."""
    return params(
        "gpt2",
        GPT,
        model__hidden_size=d,
        model__num_hidden_layers=layers,
        model__num_heads=heads,
        model__filter_size=4 * d,
        model__max_position_embeddings=seq,
        train_input__max_sequence_length=seq,
        train_input__batch_size=batch,
        **more,
    )


def with_ports(n: int):
    return replace(WSE2, ports=n, io_bits_s=n * PORT_BITS_S)


def pipelined_rate(p, wafer, cluster=None):
    g = extract_graph("fc_mnist", p, "float16")
    costs = op_costs(g, match_kernels(g), wafer)
    pl = place_pipelined(g, costs, wafer, input_cluster=cluster)
    return estimate_pipelined(g, costs, pl, wafer, cluster).samples_per_sec


def ws(p, wafer=WSE2, model="gpt2"):
    g = extract_graph(model, p, "float16")
    n = int(p["runconfig"].get("num_csx") or 1)
    return plan_streaming(g, op_costs(g, match_kernels(g), wafer), wafer, n)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hidden=st.lists(st.integers(16, 1024), min_size=1, max_size=3),
    ports=st.integers(1, 23),
    workers=st.integers(1, 40),
    per_worker=st.floats(1e3, 1e7),
)
def test_more_ports_or_more_input_workers_never_lower_an_estimate(
    hidden, ports, workers, per_worker
):
    p = fc_params(model__hidden_sizes=hidden, model__mixed_precision=True)
    assert pipelined_rate(p, with_ports(ports + 1)) >= pipelined_rate(p, with_ports(ports)) * (
        1 - 1e-9
    )
    few = pipelined_rate(p, WSE2, InputCluster(workers, per_worker))
    more = pipelined_rate(p, WSE2, InputCluster(workers + 1, per_worker))
    assert more >= few * (1 - 1e-9)
    assert few <= workers * per_worker * (1 + 1e-9)  # never faster than its input


def test_more_ports_never_lower_a_weight_streaming_estimate():
    p = gpt(1024, 4, 16, 8)
    rates = [ws(p, with_ports(n)).estimate.samples_per_sec for n in (1, 2, 6, 12, 24)]
    assert rates == sorted(rates)


# a wafer with the WSE-2's rates but a twentieth of its memory: micro-batches at small batches
SMALL_MEMORY = replace(
    WSE2,
    name="WSE-2 (2.4 KiB a PE)",
    sram_per_pe_bytes=48 * 1024 // 20,
    reserved_per_pe_bytes=8 * 1024 // 20,
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=st.integers(1, 48), b=st.integers(1, 48))
def test_a_bigger_batch_is_never_slower_until_memory_forces_micro_batches(a, b):
    lo, hi = sorted((a, b))
    small, big = (ws(gpt(768, 2, 12, x, seq=1024), SMALL_MEMORY) for x in (lo, hi))
    assert big.micro_batches >= small.micro_batches  # more samples never need fewer passes
    if big.micro_batches == 1:
        assert big.estimate.samples_per_sec >= small.estimate.samples_per_sec * (1 - 1e-9)
    for s in (small, big):  # the micro-batches cover the batch, each fits
        assert s.micro_batch_size * s.micro_batches >= s.batch_per_system
        assert s.micro_batch_size * (s.micro_batches - 1) < s.batch_per_system
        assert (
            s.activation_bytes + s.working_bytes + s.weights_bytes <= SMALL_MEMORY.usable_sram_bytes
        )


def test_memory_forces_micro_batches_that_grow_with_the_batch():
    counts = [ws(gpt(768, 2, 12, b, seq=1024), SMALL_MEMORY).micro_batches for b in (1, 8, 32, 128)]
    assert counts[0] == 1 and counts[-1] > 1 and counts == sorted(counts)
    # each micro-batch streams every layer's weights again: more passes cost more than one
    one = ws(gpt(768, 2, 12, 128, seq=1024))
    split = ws(gpt(768, 2, 12, 128, seq=1024), SMALL_MEMORY)
    assert split.micro_batches > one.micro_batches == 1
    assert split.estimate.samples_per_sec < one.estimate.samples_per_sec


def test_doubling_the_layers_of_a_gpt_about_halves_its_rate():
    r24, r48 = (ws(gpt(2048, n, 16, 64)).estimate.samples_per_sec for n in (24, 48))
    assert 0.45 < r48 / r24 < 0.56


def test_more_systems_help_but_less_than_linearly():
    r = [
        ws(gpt(2048, 24, 16, 256, runconfig__num_csx=n)).estimate.samples_per_sec
        for n in (1, 2, 4, 16)
    ]
    assert r == sorted(r)
    for n, rate in zip((2, 4, 16), r[1:], strict=True):
        assert rate < n * r[0]  # fixed costs and streaming do not shrink with the batch share


@pytest.mark.parametrize("batch", [120, 256])
@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("2.7B", (2560, 32, 32)),
        ("6.7B", (4096, 32, 32)),
        ("13B", (5120, 40, 40)),
        ("20B", (6144, 44, 64)),
    ],
)
def test_big_gpt_shapes_compile_in_weight_streaming(tmp_path, name, shape, batch):
    d, layers, heads = shape
    r = compile_run("gpt2", gpt(d, layers, heads, batch), tmp_path, mode=W, draw_map=False)
    p = r.plan
    assert r.est_samples_per_sec > 0 and p.micro_batches >= 1
    assert p.micro_batch_size * p.micro_batches >= batch
    if name == "20B" and batch == 256:
        assert p.micro_batches > 1  # its activations do not fit at once: micro-batched


@pytest.mark.parametrize("batch", [120, 256])
def test_gptj_6b_compiles_in_weight_streaming(tmp_path, batch):
    p = params(
        "gptj", ZOO / "gptj" / "configs" / "params_gptj_6b.yaml", train_input__batch_size=batch
    )
    r = compile_run("gptj", p, tmp_path, mode=W, draw_map=False)
    assert r.est_samples_per_sec > 0 and r.plan.micro_batch_size * r.plan.micro_batches >= batch


def test_a_layer_too_large_for_the_wafer_is_refused_naming_it():
    p = params("gpt2", ZOO / "gpt2" / "configs" / "params_gpt2_small.yaml")
    with pytest.raises(PlacementError) as e:
        ws(p, tiny_wafer(60, 40))
    msg = str(e.value)
    assert "layer 'embed'" in msg and "vocab_size" in msg  # the token table is the biggest


def test_report_and_plan_json_agree(tmp_path):
    r = compile_run(
        "fc_mnist",
        fc_params(model__mixed_precision=True),
        tmp_path,
        mode=ExecMode.PIPELINED,
        draw_map=False,
    )
    parsed = parse_report((r.directory / "compile_report.txt").read_text())
    assert [(k["name"], k["bound"]) for k in parsed["kernels"]] == [
        (k["name"], k["bound"]) for k in r.plan.kernels
    ]
    assert parsed["notes"]["bound"] == r.plan.estimate["bound"]
    assert float(parsed["notes"]["ports_used"]) == r.plan.estimate["ports_used"]
    w = compile_run("gpt2", gpt(2048, 4, 16, 64), tmp_path, mode=W, draw_map=False)
    parsed = parse_report((w.directory / "compile_report.txt").read_text())
    assert [(ly["name"], ly["fwd_bound"], ly["bwd_bound"]) for ly in parsed["layers"]] == [
        (ly["name"], ly["fwd_bound"], ly["bwd_bound"]) for ly in w.plan.layers
    ]
    assert int(parsed["notes"]["micro_batches"]) == w.plan.micro_batches
    assert math.isclose(
        parsed["overall"]["Samples/s"], w.plan.estimate["samples_per_sec"], abs_tol=0.051
    )
