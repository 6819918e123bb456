"""The compiled plan drives what the CS-2 executors run. Weight streaming streams the
plan's layers (its grouping of blocks, the layer it keeps on the wafer); pipelined runs the plan's
stages and its replicas (data parallel on one wafer). Changing the plan changes what runs, and the
numbers stay the host's."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from exec_helpers import make_params, trainer

from cs2sim.runtime.compiler import compile_run
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor
from cs2sim.runtime.training.runconfig import Components
from cs2sim.system.errors import RuntimeFailure
from cs2sim.system.state import ExecMode


def _parts(model: str, **ov):
    params, half = make_params(model, **ov)
    comp = Components(model, params, half)
    return params, comp, comp.model(3), next(comp.stream("train", 3))


def _host(comp, batch, scale: float):
    host = comp.model(3)
    host.zero_grad()
    loss = host.forward_loss(batch)
    host.backward(scale)
    return loss, {k: v.copy() for k, v in host.grads().items()}


def _same(got: dict, want: dict) -> None:
    for name, g in want.items():
        np.testing.assert_allclose(
            got[name], g, rtol=2e-5, atol=1e-6 * float(np.abs(g).max()), err_msg=name
        )


def test_weight_streaming_streams_the_plans_layers(tmp_path):
    params, comp, m, batch = _parts("gpt2", model__dropout_rate=0.1)
    plan = compile_run(
        "gpt2", params, tmp_path, mode=ExecMode.WEIGHT_STREAMING, draw_map=False
    ).plan
    loss, want = _host(comp, batch, 4.0)
    ex = WeightStreamingExecutor(2, plan)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    assert [lay.name for lay in ex.layers] == [e["name"] for e in plan.layers]
    assert [lay.retained for lay in ex.layers] == [e["retained"] for e in plan.layers]
    ex.begin_gradients()
    assert ex.compute_gradients(batch, 1, 4.0) == pytest.approx(loss, rel=1e-6)
    ex.end_gradients()
    _same(ex.memoryx.grads, want)
    kept = sum(e["retained"] for e in plan.layers)
    assert ex.swarmx.broadcasts == 2 * len(plan.layers) - kept
    # another plan: every two layers streamed as one, none kept on the wafer
    merged = [dict(e, retained=False) for e in plan.layers[::2]]
    other = WeightStreamingExecutor(2, replace(plan, layers=merged))
    _, comp2, m2, _ = _parts("gpt2", model__dropout_rate=0.1)
    other.load(m2, comp2.optimizer(m2), comp2.scaler(), params)
    other.begin_gradients()
    assert other.compute_gradients(batch, 1, 4.0) == pytest.approx(loss, rel=1e-6)
    other.end_gradients()
    _same(other.memoryx.grads, want)
    assert other.swarmx.broadcasts == 2 * len(merged)  # what ran changed with the plan
    streamed = [(name, phase) for _, name, phase, _ in other.trace]
    assert streamed == (
        [(e["name"], "F") for e in merged] + [(e["name"], "B") for e in reversed(merged)]
    )
    assert [(n, p) for _, n, p, _ in ex.trace] != streamed
    with pytest.raises(RuntimeFailure, match="streams this model's blocks out of their order"):
        WeightStreamingExecutor(1, replace(plan, layers=merged[::-1])).load(
            m2, comp2.optimizer(m2), comp2.scaler(), params
        )


@pytest.mark.parametrize("replicas", [1, 2])
def test_pipelined_runs_the_plans_stages_and_replicas(tmp_path, replicas):
    params, comp, m, batch = _parts("fc_mnist", model__dropout=0.2)
    plan = compile_run("fc_mnist", params, tmp_path, mode=ExecMode.PIPELINED, draw_map=False).plan
    plan = replace(plan, replicas=replicas)  # as the placement pass writes it for a small model
    loss, want = _host(comp, batch, 2.0)
    ex = PipelinedExecutor(plan, microbatches=3)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    assert [st.names[0] for st in ex.stages] == [
        b for b in dict.fromkeys(k["block"] for k in plan.kernels)
    ]
    assert ex.compute_gradients(batch, 1, 2.0) == pytest.approx(loss, rel=1e-6)
    _same(ex.wafer.grads(), want)
    # the batch went to `replicas` copies, each its own 3 micro-batches, side by side
    assert [r for r, _ in ex.split] == [r for r in range(replicas) for _ in range(3)]
    B = len(next(iter(batch.values())))
    assert ex.split[0][1].lo == 0 and ex.split[-1][1].hi == B
    first = sorted(mb for _, t, s, mb, p in ex.trace if (t, s, p) == (0, 0, "F"))
    assert first == [3 * r for r in range(replicas)]  # each replica's first micro-batch
    ticks = max(t for _, t, _, _, _ in ex.trace) + 1
    assert ticks == 3 + len(ex.stages) - 1  # replicas add no ticks: they run at once


def test_losses_stay_the_hosts_with_a_plan_of_two_replicas_and_merged_layers(tmp_path):
    ov = dict(
        model__dropout=0.2,
        model__hidden_sizes=[64, 32],
        runconfig__max_steps=4,
        runconfig__log_steps=1,
        runconfig__checkpoint_steps=0,
    )

    def losses(name: str, executor) -> list[float]:
        result = trainer("fc_mnist", tmp_path / name, executor, **ov).train()
        return [result.losses[s] for s in sorted(result.losses)]

    params, _ = make_params("fc_mnist", **ov)
    plan = compile_run(
        "fc_mnist", params, tmp_path / "c", mode=ExecMode.PIPELINED, draw_map=False
    ).plan
    cpu = losses("cpu", None)
    pipe = losses("pipe", PipelinedExecutor(replace(plan, replicas=2)))
    ws_plan = compile_run(
        "fc_mnist", params, tmp_path / "w", mode=ExecMode.WEIGHT_STREAMING, draw_map=False
    ).plan
    ws = losses("ws", WeightStreamingExecutor(3, replace(ws_plan, layers=ws_plan.layers[::2])))
    np.testing.assert_allclose(pipe, cpu, rtol=1e-5, atol=0)
    np.testing.assert_allclose(ws, cpu, rtol=1e-5, atol=0)
    assert cpu[-1] < cpu[0]


def test_weight_streaming_runs_the_plans_micro_batches(tmp_path):
    params, comp, m, batch = _parts("fc_mnist", model__dropout=0.0)
    B = len(next(iter(batch.values())))
    params["runconfig"]["num_csx"] = 3
    # the plan's micro-batches: 4 samples on each of 3 systems at a time (the compiler splits a
    # system's samples when their activations do not fit one wafer); the step runs them one
    # after another (gradient accumulation, accumulate.py) and updates once
    compiled = compile_run(
        "fc_mnist", params, tmp_path, mode=ExecMode.WEIGHT_STREAMING, draw_map=False
    ).plan
    # (no layers: each model block streams as its own layer)
    plan = replace(compiled, micro_batch_size=4, micro_batches=-(-B // 12), layers=[])
    seen: list[int] = []
    ex = WeightStreamingExecutor(3, plan)
    ex.load(m, comp.optimizer(m), comp.scaler(), params)
    real = ex.compute_gradients
    ex.compute_gradients = lambda b, s, sc: (seen.append(len(b["x"])), real(b, s, sc))[1]
    loss, want = _host(comp, batch, 1.0)
    ex.begin_gradients()
    for part, rows in ex.accumulation.split(batch):
        ex.compute_gradients(part, 1, rows.weight)
    ex.end_gradients()
    _same(ex.memoryx.grads, want)
    assert seen[0] == 12 and sum(seen) == B and len(seen) == -(-B // 12)
    layers = len(ex.layers)
    assert ex.swarmx.broadcasts == len(seen) * (2 * layers - 1)  # every pass streams again
    one = WeightStreamingExecutor(3, replace(plan, micro_batches=1))  # the plan: one pass
    _, comp1, m1, _ = _parts("fc_mnist", model__dropout=0.0)
    one.load(m1, comp1.optimizer(m1), comp1.scaler(), params)
    assert len(one.accumulation.split(batch)) == 1
    assert ex.execute_step(batch, 2).loss == pytest.approx(loss, rel=1e-3)  # a whole step
