"""BERT and LLaMA on every machine, and gradient accumulation on every executor.

Same tolerances as test_equivalence.py (the GPT tests): the CS-2 executors sum shard gradients
in another order than the host, 1e-5 relative on the losses of a few fp32 steps. Gradient
accumulation (runtime/executors/accumulate.py) is the same: k micro-batches' gradients summed
into one update equal one batch of k times the size, to that tolerance, whichever executor.
"""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import trainer

from cs2sim.runtime.executors.cpu import CpuExecutor
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor
from cs2sim.system.errors import ConfigError

FP32_RTOL = 1e-5

EXECUTORS = {
    "cpu": lambda: CpuExecutor(),
    "pipelined": lambda: PipelinedExecutor(),
    "ws1": lambda: WeightStreamingExecutor(1),
    "ws2": lambda: WeightStreamingExecutor(2),
}
RUN = dict(
    runconfig__max_steps=3,
    runconfig__log_steps=1,
    runconfig__checkpoint_steps=0,
    train_input__batch_size=8,
)


def _losses(model: str, tmp_path, name: str, executor, overrides: dict) -> list[float]:
    result = trainer(model, tmp_path / name, executor, **overrides).train()
    return [result.losses[s] for s in sorted(result.losses)]


def _close(a: list[float], b: list[float]) -> None:
    np.testing.assert_allclose(np.array(b), np.array(a), rtol=FP32_RTOL, atol=0)


def _counting(ex):
    """The executor, recording the rows of every micro-batch it computes."""
    ex.rows = []
    real = ex.compute_gradients

    def compute_gradients(batch, step, scale):
        ex.rows.append(len(batch["input_ids"]))
        return real(batch, step, scale)

    ex.compute_gradients = compute_gradients
    return ex


@pytest.mark.parametrize("name", ["pipelined", "ws1", "ws2"])
@pytest.mark.parametrize("model", ["bert", "llama", "bert_classifier"])
def test_new_models_match_cpu_on_every_executor(tmp_path, model, name):
    dropout = {"model__dropout_rate": 0.1}  # masks too: replicas.py draws the host's
    cpu = _losses(model, tmp_path, "cpu", None, dict(RUN, **dropout))
    other = _losses(model, tmp_path, name, EXECUTORS[name](), dict(RUN, **dropout))
    assert len(other) == len(cpu) == 3
    _close(cpu, other)
    assert cpu[0] != cpu[1]  # weights moved: the comparison is not between two constants


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_micro_batches_equal_the_big_batch(tmp_path, name):
    """use_cs_grad_accum + micro_batch_size 2: four micro-batches of a BERT batch of 8 (its
    masked-token normalisation computed over the whole batch) give the batch's updates."""
    whole = _losses("bert", tmp_path, "whole", EXECUTORS[name](), RUN)
    ex = _counting(EXECUTORS[name]())
    micro = _losses(
        "bert",
        tmp_path,
        "micro",
        ex,
        dict(RUN, train_input__micro_batch_size=2, runconfig__use_cs_grad_accum=True),
    )
    assert ex.rows == [2] * 12  # 3 steps of 4 micro-batches (2 samples; 1 each on 2 CS-X)
    _close(whole, micro)
    assert whole[0] != whole[-1]


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_grad_accum_steps_equal_one_batch_k_times_the_size(tmp_path, name):
    """optimizer.grad_accum_steps 4 over batches of 2 = batches of 8 (the same samples: the
    shuffle is a permutation of the samples, whatever the batch size)."""
    big = _losses("llama", tmp_path, "big", EXECUTORS[name](), RUN)
    ex = _counting(EXECUTORS[name]())
    acc = _losses(
        "llama",
        tmp_path,
        "acc",
        ex,
        dict(RUN, train_input__batch_size=2, optimizer__grad_accum_steps=4),
    )
    assert ex.rows == [2] * 12  # each update: 4 input batches of 2
    _close(big, acc)
    other = _losses("llama", tmp_path, "small", None, dict(RUN, train_input__batch_size=2))
    assert abs(other[-1] - big[-1]) > 100 * FP32_RTOL * abs(big[-1])  # not a no-op comparison


def test_an_accumulation_that_cannot_be_honoured_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="needs runconfig.use_cs_grad_accum"):
        trainer("bert", tmp_path / "a", None, train_input__micro_batch_size=4)
    with pytest.raises(ConfigError, match="not a multiple of train_input.micro_batch_size"):
        trainer(
            "bert",
            tmp_path / "b",
            None,
            train_input__batch_size=8,
            train_input__micro_batch_size=3,
            runconfig__use_cs_grad_accum=True,
        )
    with pytest.raises(ConfigError, match="multiple of num_csx"):
        trainer(
            "bert",
            tmp_path / "c",
            None,
            train_input__batch_size=9,
            train_input__micro_batch_size=3,
            runconfig__use_cs_grad_accum=True,
            runconfig__num_csx=2,
        )
