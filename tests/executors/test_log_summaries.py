"""optimizer.log_summaries writes what its schema promises: the global gradient norm and the
gradient and weight norms of every layer group, on each summary step, read back with
TensorBoard's own reader, on the host and on both CS-2 executors; off, none of them."""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import trainer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

MAKE = {
    "cpu": lambda: None,
    "pipelined": lambda: PipelinedExecutor(),
    "ws2": lambda: WeightStreamingExecutor(2),
}


def scalars(md) -> dict[str, list]:
    acc = EventAccumulator(str(md))
    acc.Reload()
    return {t: acc.Scalars(t) for t in acc.Tags()["scalars"]}


@pytest.mark.parametrize("mode", list(MAKE))
def test_norm_summaries_per_layer_group(tmp_path, mode):
    md = tmp_path / mode
    t = trainer(
        "gpt2",
        md,
        MAKE[mode](),
        optimizer__log_summaries=True,
        runconfig__max_steps=4,
        runconfig__log_steps=2,
        runconfig__checkpoint_steps=0,
    )
    t.train()
    tags = scalars(md)
    groups = ["embed", "h0", "h1"]
    for g in groups:
        assert [e.step for e in tags[f"grad_norm/{g}"]] == [2, 4]
        assert [e.step for e in tags[f"weight_norm/{g}"]] == [2, 4]
    assert [e.step for e in tags["grad_norm"]] == [2, 4]
    assert "lr" in tags and "loss_scale" in tags
    # the weight norms are those of the checkpoint the run ended with
    state = ckpt.load_checkpoint(ckpt.list_checkpoints(md)[-1])
    for g in groups:
        w = np.sqrt(
            sum(
                float((v.astype(np.float64) ** 2).sum())
                for k, v in state.model.items()
                if k.split(".", 1)[0] == g
            )
        )
        assert tags[f"weight_norm/{g}"][-1].value == pytest.approx(w, rel=1e-5)
    # the per-group gradient norms make up the global one (max_gradient_norm clips after it)
    total = np.sqrt(sum(e[-1].value ** 2 for k, e in tags.items() if k.startswith("grad_norm/")))
    assert total == pytest.approx(min(tags["grad_norm"][-1].value, 1.0), rel=1e-4)


def test_no_norm_summaries_unless_asked(tmp_path):
    t = trainer(
        "gpt2",
        tmp_path,
        None,
        runconfig__max_steps=2,
        runconfig__log_steps=1,
        runconfig__checkpoint_steps=0,
    )
    t.train()
    assert not [k for k in scalars(tmp_path) if "norm" in k]
