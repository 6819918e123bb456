"""Invariants of the pipelined cost model (runtime/compiler/cost.py, placement.py, estimate.py).

Property tests over MLP shapes and batch sizes: what must hold whatever the calibration is.
No test here asserts a calibrated figure (bench/fidelity.py scores those).
"""

from __future__ import annotations

import dataclasses
import math

from compiler_helpers import fc_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs2sim.runtime.compiler.cost import knee_pes, op_costs, rates
from cs2sim.runtime.compiler.estimate import estimate_pipelined
from cs2sim.runtime.compiler.graph import extract_graph
from cs2sim.runtime.compiler.io import InputCluster
from cs2sim.runtime.compiler.kernels import match_kernels
from cs2sim.runtime.compiler.placement import min_pes, place_pipelined
from cs2sim.system.hardware import WSE2

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
hidden = st.lists(st.integers(8, 2048), min_size=1, max_size=3)
batch = st.sampled_from([1, 16, 256])


def _compiled(sizes, b, wafer=WSE2, ic=None):
    p = fc_params(model__hidden_sizes=list(sizes), train_input__batch_size=b)
    g = extract_graph("fc_mnist", p, "float32")
    costs = op_costs(g, match_kernels(g), wafer)
    pl = place_pipelined(g, costs, wafer, input_cluster=ic)
    return g, costs, pl, estimate_pipelined(g, costs, pl, wafer, ic)


@SETTINGS
@given(hidden, batch)
def test_a_kernel_never_gets_more_pes_than_its_work_can_use(sizes, b):
    g, costs, pl, e = _compiled(sizes, b)
    mins = min_pes(costs, WSE2)
    for k, c, m in zip(pl.kernels, costs, mins, strict=True):
        assert c.max_pes <= c.work  # at most one unit of work a PE
        # the kernel's size is its knee (or its memory) rounded up to a rectangle
        assert k.pes < max(c.max_pes, int(m)) + max(k.rect.w, k.rect.h)
        # no finer than vector ops of op_cycles x SIMD elements (a GEMV's tile side)
        if c.dataflow == "matrix" and 1 < c.max_pes < c.work and c.positions == 1:
            side = math.sqrt(c.work / c.max_pes)
            assert side >= c.op_cycles * rates(WSE2).simd * (1 - 1e-9)


@SETTINGS
@given(hidden, batch, st.integers(1, 64), st.integers(1, 64), st.floats(1e3, 5e6, allow_nan=False))
def test_more_input_workers_never_lower_the_estimate(sizes, b, w1, extra, per_worker):
    fewer = _compiled(sizes, b, ic=InputCluster(w1, per_worker))[3].samples_per_sec
    more = _compiled(sizes, b, ic=InputCluster(w1 + extra, per_worker))[3].samples_per_sec
    assert more >= fewer * (1 - 1e-9)


@SETTINGS
@given(hidden, batch, st.sampled_from([(1, 2), (2, 12), (4, 12), (1, 12)]))
def test_more_ports_never_lower_the_estimate(sizes, b, ports):
    few, many = (dataclasses.replace(WSE2, ports=n) for n in ports)
    low = _compiled(sizes, b, few)[3].samples_per_sec
    high = _compiled(sizes, b, many)[3].samples_per_sec
    assert high >= low * (1 - 1e-9)


@SETTINGS
@given(hidden, batch, st.integers(1, 32), st.floats(1e2, 1e7, allow_nan=False))
def test_knowing_the_input_cluster_never_raises_the_estimate(sizes, b, workers, per_worker):
    without = _compiled(sizes, b)[3]
    known = _compiled(sizes, b, ic=InputCluster(workers, per_worker))[3]
    assert known.samples_per_sec <= without.samples_per_sec * (1 + 1e-9)
    assert known.samples_per_sec <= workers * per_worker * (1 + 1e-9)
    if known.samples_per_sec < without.samples_per_sec * (1 - 1e-6):
        assert known.bound == "input"  # it says which bound it took


@given(st.integers(1, 10**7), st.floats(0.0, 100.0), st.integers(1, 4096))
def test_the_knee_is_a_minimum_op_length_and_longer_samples_split_finer(work, c0, positions):
    for flow in ("matrix", "stream"):
        base = knee_pes(work, flow, c0, 4)
        assert 1 <= base <= work
        assert knee_pes(work, flow, c0 * 2 + 1, 4) <= base  # dearer ops: coarser tiles
    assert knee_pes(work, "matrix", c0, 4, positions) >= knee_pes(work, "matrix", c0, 4)


@SETTINGS
@given(hidden, st.sampled_from([16, 256]))
def test_more_arithmetic_never_raises_the_estimate(sizes, b):
    """float32 moves twice the bytes of a 16-bit multiply-add: never a faster estimate."""
    p = fc_params(model__hidden_sizes=list(sizes), train_input__batch_size=b)
    rate = {}
    for dtype in ("float16", "float32"):
        g = extract_graph("fc_mnist", p, dtype)
        costs = op_costs(g, match_kernels(g), WSE2)
        pl = place_pipelined(g, costs, WSE2)
        rate[dtype] = estimate_pipelined(g, costs, pl, WSE2).samples_per_sec
    assert rate["float32"] <= rate["float16"] * (1 + 1e-9)


def test_utilization_is_the_arithmetic_share_and_active_pes_the_rectangles():
    g, costs, pl, e = _compiled([500, 300], 256)
    r = rates(WSE2)
    assert e.active_pes == sum(k.pes for k in pl.kernels)
    for k, c, ke in zip(pl.kernels, costs, e.kernels, strict=True):
        share = c.pipe_arith / k.pes * e.samples_per_sec / r.clock_hz
        assert math.isclose(ke.compute_utilization, min(1.0, share), rel_tol=1e-9)
        assert ke.compute_samples_per_sec >= e.samples_per_sec * (1 - 1e-9)
    weighted = sum(k.compute_utilization * k.active_pes for k in e.kernels) / e.active_pes
    assert math.isclose(e.compute_utilization, weighted, rel_tol=1e-9)
