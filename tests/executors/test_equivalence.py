"""Same numbers on every machine: CPU, pipelined and weight streaming with 1, 2 and 4 CS-X.

Tolerances. The CS-2 executors compute a global batch in shards (micro-batches, or one shard per
CS-X) and sum the shards' gradients, so a gradient is the same sum taken in another order: in fp32
the weights drift apart by a few ulps per step and the losses of a few steps agree to ~1e-6
relative (we allow 1e-5). In mixed precision each shard's gradient contribution is rounded to 16
bits before the sum (as a CS-2 holds it), which the host does once for the whole batch; that
rounding (2^-11 relative) averages out over many elements, and the losses agree to ~1e-5 (we
allow 2e-4). Dropout masks are identical (replicas.py draws the host's masks), so neither
tolerance has to absorb randomness: with different masks the losses differ by ~1e-2.
"""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import trainer

from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

FP32_RTOL = 1e-5
MIXED_RTOL = 2e-4

FC = dict(
    model__dropout=0.2,
    model__hidden_sizes=[64, 32],
    runconfig__max_steps=6,
    runconfig__log_steps=1,
    runconfig__checkpoint_steps=0,
)
GPT2 = dict(
    model__dropout_rate=0.1,
    runconfig__max_steps=4,
    runconfig__log_steps=1,
    runconfig__checkpoint_steps=0,
    train_input__batch_size=8,
)

EXECUTORS = {
    "pipelined": lambda: PipelinedExecutor(),
    "ws1": lambda: WeightStreamingExecutor(1),
    "ws2": lambda: WeightStreamingExecutor(2),
    "ws4": lambda: WeightStreamingExecutor(4),
}


def _losses(model: str, tmp_path, name: str, executor, overrides: dict) -> list[float]:
    result = trainer(model, tmp_path / name, executor, **overrides).train()
    return [result.losses[s] for s in sorted(result.losses)]


def _close(a: list[float], b: list[float], rtol: float) -> None:
    np.testing.assert_allclose(np.array(b), np.array(a), rtol=rtol, atol=0)


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_fc_mnist_fp32_with_dropout_matches_cpu(tmp_path, name):
    cpu = _losses("fc_mnist", tmp_path, "cpu", None, FC)
    other = _losses("fc_mnist", tmp_path, name, EXECUTORS[name](), FC)
    assert len(other) == len(cpu) == 6
    _close(cpu, other, FP32_RTOL)
    assert cpu[-1] < cpu[0]  # it trains: the comparison is not between two constants


@pytest.mark.parametrize("mixed", [False, True], ids=["fp32", "mixed"])
def test_gpt2_matches_cpu_on_pipelined_and_4_csx(tmp_path, mixed):
    ov = dict(GPT2, model__mixed_precision=mixed)
    cpu = _losses("gpt2", tmp_path, "cpu", None, ov)
    for name in ("pipelined", "ws4"):
        _close(
            cpu,
            _losses("gpt2", tmp_path, name, EXECUTORS[name](), ov),
            MIXED_RTOL if mixed else FP32_RTOL,
        )


def test_tolerance_is_far_below_another_seed(tmp_path):
    """The tolerance is far below what another seed (weights and dropout masks) changes."""
    a = _losses("fc_mnist", tmp_path, "a", None, FC)
    b = _losses("fc_mnist", tmp_path, "b", None, dict(FC, runconfig__seed=2))
    assert max(abs(x - y) / abs(x) for x, y in zip(a, b, strict=True)) > 100 * FP32_RTOL


def test_gptj_weight_streaming_on_4_csx_matches_cpu(tmp_path):
    """The Weight Streaming Quickstart's model (GPT-J, its tiny config: rotary, parallel attention +
    MLP)."""
    ov = dict(
        runconfig__max_steps=3,
        runconfig__log_steps=1,
        runconfig__checkpoint_steps=0,
        train_input__batch_size=8,
    )
    cpu = _losses("gptj", tmp_path, "cpu", None, ov)
    _close(cpu, _losses("gptj", tmp_path, "ws4", EXECUTORS["ws4"](), ov), FP32_RTOL)
