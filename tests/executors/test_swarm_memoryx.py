"""SwarmX sums N systems' gradients into the single-system gradient; MemoryX applies the host's
optimizer update; the pipelined stages together hold the host's gradient and weights."""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import make_params

from cs2sim.runtime.executors.cpu import CpuExecutor
from cs2sim.runtime.executors.memoryx import MemoryX
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor
from cs2sim.runtime.training.runconfig import Components


def _parts(model: str = "fc_mnist", **ov):
    params, half = make_params(model, **ov)
    comp = Components(model, params, half)
    m = comp.model(3)
    stream = comp.stream("train", 3)
    return params, comp, m, next(stream)


def _host_grads(comp, params, batch, scale=1.0):
    host = comp.model(3)
    host.zero_grad()
    loss = host.forward_loss(batch)
    host.backward(scale)
    return loss, {k: v.copy() for k, v in host.grads().items()}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("model", ["fc_mnist", "gpt2"])
def test_swarmx_sum_of_n_systems_is_the_single_system_gradient(model, n):
    ov = {"model__dropout": 0.2} if model == "fc_mnist" else {"model__dropout_rate": 0.1}
    params, comp, m, batch = _parts(model, **ov)
    loss, want = _host_grads(comp, params, batch, scale=8.0)
    ex = WeightStreamingExecutor(n)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    ex.begin_gradients()
    got_loss = ex.compute_gradients(batch, 1, 8.0)
    ex.end_gradients()
    assert got_loss == pytest.approx(loss, rel=1e-6)
    assert ex.swarmx.reductions == n * len(m.blocks)  # one reduce per system and layer
    # every layer broadcast forward, every layer but the output layer again for backward
    assert ex.swarmx.broadcasts == 2 * len(m.blocks) - 1
    for name, g in want.items():
        np.testing.assert_allclose(
            ex.memoryx.grads[name], g, rtol=2e-5, atol=1e-6 * float(np.abs(g).max()), err_msg=name
        )
        assert not ex.swarmx.grads[name].any()  # the systems' buffers were handed over


@pytest.mark.parametrize(
    "opt",
    [
        {"optimizer__optimizer_type": "adam", "optimizer__learning_rate": 0.01},
        {
            "optimizer__optimizer_type": "sgd",
            "optimizer__momentum": 0.9,
            "optimizer__learning_rate": 0.1,
            "optimizer__max_gradient_norm": 0.5,
        },
        {
            "optimizer__optimizer_type": "adamw",
            "optimizer__learning_rate": 0.01,
            "optimizer__weight_decay_rate": 0.1,
        },
    ],
)
def test_memoryx_update_is_the_cpu_optimizers_bit_for_bit(opt):
    params, comp, _, batch = _parts(**opt)
    cpu_model, mx_model = comp.model(3), comp.model(3)
    cpu = CpuExecutor()
    cpu.load(cpu_model, comp.optimizer(cpu_model), comp.scaler(), params)
    mx = MemoryX(mx_model, comp.optimizer(mx_model), comp.scaler(), params["optimizer"])
    for step in (1, 2, 3):
        cpu.execute_step(batch, step)  # forward, backward, update on the host
        mx_model.zero_grad()  # the same gradient arrives in MemoryX...
        mx_model.forward_loss(batch)
        mx_model.backward(float(mx.scaler.scale))
        mx.apply_update(step)  # ...and MemoryX applies the update
        for name, w in cpu_model.parameters().items():
            np.testing.assert_array_equal(mx.weights[name], w, err_msg=name)
    state = mx.optimizer.state_dict()
    assert state["num_updates"] == 3
    for k, v in cpu.optimizer.state_dict().items():
        np.testing.assert_array_equal(state[k], v, err_msg=k)


def test_pipelined_stages_own_their_weights_and_hold_the_host_gradient():
    params, comp, m, batch = _parts(model="gpt2")  # tied embedding: first and last stage share
    loss, want = _host_grads(comp, params, batch)
    host_before = {k: v.copy() for k, v in m.parameters().items()}
    ex = PipelinedExecutor(microbatches=4)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    assert len(ex.stages) == len(m.blocks)  # no plan: one stage per block
    owned = [n for st in ex.stages for n in st.params]
    assert sorted(owned) == sorted(m.parameters())  # every weight in exactly one stage
    for st in ex.stages:  # on the wafer: not the host's arrays
        for n, a in st.params.items():
            assert a is not m.parameters()[n]
    ex.begin_gradients()
    assert ex.compute_gradients(batch, 1, 1.0) == pytest.approx(loss, rel=1e-6)
    for name, g in want.items():
        np.testing.assert_allclose(
            ex.wafer.grads()[name], g, rtol=2e-5, atol=1e-6 * float(np.abs(g).max()), err_msg=name
        )
    ex.execute_step(batch, 1)
    for n, w in m.parameters().items():  # the update happened on the wafer only
        np.testing.assert_array_equal(w, host_before[n])
    ex.download_to_host()
    changed = [n for n, w in m.parameters().items() if not np.array_equal(w, host_before[n])]
    assert sorted(changed) == sorted(m.parameters())


def test_pipeline_fills_then_drains_as_in_fig_15():
    params, comp, m, batch = _parts(model="fc_mnist", model__hidden_sizes=[32, 32, 32])
    ex = PipelinedExecutor(microbatches=6)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    S, M = len(ex.stages), 6
    ex.execute_step(batch, 1)
    fwd = [e for e in ex.trace if e[4] == "F"]
    busy = [sorted(s for _, t, s, _, _ in fwd if t == tick) for tick in range(M + S - 1)]
    assert busy[0] == [0]  # fill: only the first stage works at tick 0
    assert busy[1] == [0, 1]
    assert max(len(b) for b in busy) == min(S, M)  # steady state: every stage busy
    assert busy[-1] == [S - 1]  # drain
    # every stage ran every micro-batch forward and backward exactly once
    for phase in "FB":
        cells = sorted((s, mb) for _, _, s, mb, p in ex.trace if p == phase)
        assert cells == sorted((s, mb) for s in range(S) for mb in range(M))
    # a micro-batch reaches stage s at tick mb + s (forward) and leaves the last stage first
    assert all(t == mb + s for _, t, s, mb, p in ex.trace if p == "F")
    assert all(t == mb + (S - 1 - s) for _, t, s, mb, p in ex.trace if p == "B")


def test_pipeline_ticks_are_in_the_debug_log(caplog):
    params, comp, m, batch = _parts(model="fc_mnist")
    ex = PipelinedExecutor(microbatches=2)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    with caplog.at_level("DEBUG", logger="cs2sim.run.pipeline"):
        ex.execute_step(batch, 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "cs2sim.run.pipeline"]
    S = len(ex.stages)
    assert lines[0] == f"step 1 F tick 0: 1/{S} stages busy [s0:mb0]"
    assert lines[1] == f"step 1 F tick 1: 2/{S} stages busy [s0:mb1 s1:mb0]"
    assert lines[S + 1] == f"step 1 B tick 0: 1/{S} stages busy [s{S - 1}:mb0]"


def test_micro_batches_are_sized_for_the_host_gemms():
    from cs2sim.runtime.threads import set_workers, workers

    before = workers()
    try:
        set_workers(4)  # as many micro-batches as threads, each of at least 128 rows, 2 to 4
        params, comp, m, batch = _parts(model="fc_mnist")  # batch 64 of 784 features
        ex = PipelinedExecutor()
        ex.load(m, comp.optimizer(m), comp.scaler(), params)
        assert ex.microbatches_for(batch) == 2  # 64 rows: the minimum of 2 (still a pipeline)
        big = {k: v.repeat(8, axis=0) for k, v in batch.items()}  # 512 samples
        assert ex.microbatches_for(big) == 4
        params, comp, m, batch = _parts(model="gpt2")  # 16 sequences of 64 tokens: 1024 rows
        ex = PipelinedExecutor()
        ex.load(m, comp.optimizer(m), comp.scaler(), params)
        assert ex.microbatches_for(batch) == 4
        set_workers(2)  # two threads: two micro-batches keep both busy, in larger products
        assert ex.microbatches_for(batch) == 2
        set_workers(1)
        assert ex.microbatches_for(batch) == 2
    finally:
        set_workers(before)
    assert PipelinedExecutor(microbatches=3).fixed_microbatches == 3
