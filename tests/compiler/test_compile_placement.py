"""Pipelined placement: invariants over random layer stacks (hypothesis) and the fit limit."""

from __future__ import annotations

import math

import pytest
from compiler_helpers import fc_params, tiny_wafer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs2sim.runtime.compiler import PlacementError
from cs2sim.runtime.compiler.cost import op_costs
from cs2sim.runtime.compiler.estimate import estimate_pipelined
from cs2sim.runtime.compiler.graph import extract_graph
from cs2sim.runtime.compiler.kernels import match_kernels
from cs2sim.runtime.compiler.placement import min_pes, place_pipelined


def _placed(p, wafer):
    g = extract_graph("fc_mnist", p, "float32")
    costs = op_costs(g, match_kernels(g), wafer)
    return g, costs, place_pipelined(g, costs, wafer)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hidden=st.lists(st.integers(1, 300), min_size=1, max_size=8),
    dropout=st.sampled_from([0.0, 0.1]),
    opt=st.sampled_from(["sgd", "adam"]),
    w=st.integers(8, 120),
    h=st.integers(8, 120),
    sram=st.sampled_from([4096, 48 * 1024]),
)
def test_placement_invariants(hidden, dropout, opt, w, h, sram):
    p = fc_params(
        model__hidden_sizes=hidden,
        model__dropout=dropout,
        optimizer__optimizer_type=opt,
        train_input__batch_size=32,
    )
    wafer = tiny_wafer(w, h, sram)
    try:
        g, costs, pl = _placed(p, wafer)
    except PlacementError as e:
        assert "python-ws" in str(e) and "config execmode setup" in str(e)
        g = extract_graph("fc_mnist", p, "float32")
        m = min_pes(op_costs(g, match_kernels(g), wafer), wafer)
        # refused only when the memory minimum exceeds the wafer or cannot be laid out
        assert int(m.sum()) > wafer.pes or "cannot be laid out" in str(e)
        return
    assert [k.name for k in pl.kernels] == [o.name for o in g.ops]  # every layer placed, in order
    rects = [r for k in pl.kernels for r in k.rects]
    for k, c in zip(pl.kernels, costs, strict=True):
        assert len(k.rects) == pl.replicas
        assert k.pes * wafer.usable_per_pe_bytes >= c.min_bytes  # per-PE memory respected
        for r in k.rects:
            assert r.w >= 1 and r.h >= 1 and r.pes == k.pes
            assert 0 <= r.x and r.x + r.w <= wafer.width  # inside the grid
            assert 0 <= r.y and r.y + r.h <= wafer.height
    from cs2sim.runtime.compiler.estimate import shared_edge

    for j in range(pl.replicas):  # data flows between neighbours: consecutive kernels touch
        chain = [k.rects[j] for k in pl.kernels]
        assert all(shared_edge(a, b) > 0 for a, b in zip(chain, chain[1:], strict=False))
    for i, a in enumerate(rects):  # pairwise disjoint
        for b in rects[i + 1 :]:
            assert a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y, (
                a,
                b,
            )
    e = estimate_pipelined(g, costs, pl, wafer)
    assert math.isclose(e.samples_per_sec, min(k.samples_per_sec for k in e.kernels))
    assert math.isclose(
        e.samples_per_sec, min(e.compute_samples_per_sec, e.transmission_samples_per_sec)
    )
    for k in e.kernels:
        assert k.samples_per_sec == min(k.compute_samples_per_sec, k.transmission_samples_per_sec)
        assert k.bound in ("compute", "fabric", "io")
    assert e.active_pes == sum(k.pes * pl.replicas for k in pl.kernels) <= wafer.pes


def test_fit_limit_just_under_places_just_over_is_refused():
    p = fc_params(model__hidden_sizes=[200, 100])
    probe = tiny_wafer(10, 10)
    g = extract_graph("fc_mnist", p, "float32")
    need = int(min_pes(op_costs(g, match_kernels(g), probe), probe).sum())
    # one row of exactly the PEs the kernels need: it fits
    g2, costs, pl = _placed(p, tiny_wafer(need, 1))
    assert sum(k.pes for k in pl.kernels) == need
    # one PE fewer: refused, naming bytes, capacity and the fix
    with pytest.raises(PlacementError) as e:
        _placed(p, tiny_wafer(need - 1, 1))
    msg = str(e.value)
    assert "needs" in msg and ("KB" in msg or "MB" in msg) and "tiny" in msg
    assert "python-ws" in msg and "config execmode setup" in msg


def test_fc_mnist_is_sized_to_its_knee_or_its_input_and_not_grown_past_it(tmp_path):
    from cs2sim.runtime.compiler import compile_run
    from cs2sim.runtime.compiler.cost import rates
    from cs2sim.runtime.compiler.io import InputCluster
    from cs2sim.system.hardware import WSE2
    from cs2sim.system.state import ExecMode

    # float32 features (params.yaml alone trains in float16 in the TF flow)
    r = compile_run(
        "fc_mnist",
        fc_params(model__mixed_precision=False),
        tmp_path,
        mode=ExecMode.PIPELINED,
        draw_map=False,
    )
    e = r.plan.estimate
    assert 1 <= e["ports_used"] < WSE2.ports  # the input layer does not get the whole I/O
    per_sample = 784 * 4 + 4 + 4  # float32 features, int32 label in, a loss value out
    io = e["ports_used"] * rates(WSE2).port_bytes_s / per_sample
    assert e["samples_per_sec"] <= io * (1 + 1e-9)
    # a GEMV a sample: its kernels stop at their knee, far from filling the wafer, and the
    # one that sets the pace is at it (growing it would spend more time starting vector ops)
    assert e["bound"] in ("compute", "io") and r.active_pes / r.total_pes < 0.05
    # kernels are not grown past what feeds them: one row or column fewer would be too slow
    g = extract_graph("fc_mnist", fc_params(), "float32")
    costs = op_costs(g, match_kernels(g), WSE2)
    mins = min_pes(costs, WSE2)
    for k, c, m in zip(r.plan.kernels, costs, mins, strict=True):
        x, y, w, h = k["rect"]  # a rectangle rounds its PEs up by less than one side
        assert k["pes"] < max(c.max_pes, int(m)) + max(w, h)
        x, y, w, h = k["rect"]
        smaller = k["pes"] - max(w, h)
        if smaller > m:
            assert min(c.samples_per_sec(smaller, rates(WSE2))) < e["samples_per_sec"] * 1.001
    # an input cluster slower than the port bounds it, and the kernels shrink to its rate
    slow = InputCluster(workers=2, per_worker_samples_per_sec=50_000.0)
    s = compile_run(
        "fc_mnist",
        fc_params(),
        tmp_path,
        mode=ExecMode.PIPELINED,
        draw_map=False,
        input_cluster=slow,
    )
    assert s.plan.estimate["bound"] == "input"
    assert math.isclose(s.plan.estimate["samples_per_sec"], 100_000.0, rel_tol=1e-9)
    assert s.active_pes < r.active_pes and s.checksum != r.checksum


def test_replicas_used_when_a_small_model_saturates_its_kernels():
    # GPT-2 tiny: its kernels can use only a few PEs each (useful PEs capped by their work)
    from compiler_helpers import ZOO, params

    from cs2sim.system.hardware import WSE2

    p = params("gpt2", ZOO / "gpt2" / "configs" / "params_tiny.yaml")
    g = extract_graph("gpt2", p, "float32")
    costs = op_costs(g, match_kernels(g), WSE2)
    pl = place_pipelined(g, costs, WSE2, multireplica=True)
    one = place_pipelined(g, costs, WSE2, replicas=1)
    assert place_pipelined(g, costs, WSE2).replicas == 1  # only with runconfig.multireplica
    e, e1 = (estimate_pipelined(g, costs, x, WSE2) for x in (pl, one))
    assert pl.replicas > 1 and one.replicas == 1
    assert e.samples_per_sec > 1.5 * e1.samples_per_sec
    assert e.active_pes > e1.active_pes
