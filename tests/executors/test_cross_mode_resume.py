"""A checkpoint written in one mode resumes in another: CPU, pipelined, weight streaming.

Checkpoints hold the same things whatever wrote them (weights, optimizer state by weight name,
loss scaler, data position, dropout generator): the pipelined executor downloads them from its
stages, weight streaming reads them from MemoryX. So 2+2+2 steps in three modes equal 6 steps
in one, within the executors' tolerance (test_equivalence.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import trainer

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

OV = dict(
    model__dropout=0.2,
    model__hidden_sizes=[64, 32],
    runconfig__log_steps=1,
    runconfig__checkpoint_steps=0,
)
MAKE = {
    "cpu": lambda: None,
    "pipelined": lambda: PipelinedExecutor(),
    "ws2": lambda: WeightStreamingExecutor(2),
    "ws4": lambda: WeightStreamingExecutor(4),
}


@pytest.mark.parametrize(
    "chain",
    [("cpu", "pipelined", "ws4"), ("ws2", "cpu", "pipelined"), ("pipelined", "ws4", "cpu")],
    ids="->".join,
)
def test_two_steps_in_each_mode_equal_six_on_the_cpu(tmp_path, chain):
    straight = trainer("fc_mnist", tmp_path / "straight", None, runconfig__max_steps=6, **OV)
    want = straight.train().losses
    got: dict[int, float] = {}
    for i, mode in enumerate(chain):
        t = trainer(
            "fc_mnist", tmp_path / "chain", MAKE[mode](), runconfig__max_steps=2 * (i + 1), **OV
        )
        result = t.train()
        assert result.start_step == 2 * i  # resumed from the previous mode's checkpoint
        got.update(result.losses)
    steps = sorted(want)
    np.testing.assert_allclose([got[s] for s in steps], [want[s] for s in steps], rtol=1e-5)
    a = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path / "chain")[-1])
    b = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path / "straight")[-1])
    assert a.step == b.step == 6 and a.rng == b.rng  # the dropout generator went through too
    for k, w in b.model.items():
        np.testing.assert_allclose(a.model[k], w, rtol=1e-4, atol=1e-6, err_msg=k)
