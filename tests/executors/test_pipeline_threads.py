"""The pipelined executor runs a tick's busy stages side by side on the worker threads: the
numbers must be those of running them one after another, bit for bit, tied weights included."""

from __future__ import annotations

import numpy as np
import pytest
from exec_helpers import trainer

from cs2sim.runtime import threads
from cs2sim.runtime.executors import pipelined
from cs2sim.runtime.executors.pipelined import PipelinedExecutor

GPT2 = dict(
    model__dropout_rate=0.1,
    runconfig__max_steps=3,
    runconfig__log_steps=1,
    runconfig__checkpoint_steps=0,
    train_input__batch_size=32,
)  # 512-row micro-batches


@pytest.fixture
def workers_of():
    yield threads.set_workers
    threads.set_workers(threads.available_cores())


def test_stages_side_by_side_give_the_bits_of_one_after_another(tmp_path, workers_of, monkeypatch):
    side_by_side = []
    real = pipelined.run_chunks

    def spy(fn, n, *a, **k):
        side_by_side.append(n)
        return real(fn, n, *a, **k)

    monkeypatch.setattr(pipelined, "run_chunks", spy)
    weights = {}
    for n in (1, 2):
        workers_of(n)
        ex = PipelinedExecutor()
        t = trainer("gpt2", tmp_path / f"w{n}", ex, **GPT2)
        result = t.train()
        weights[n] = ({k: v.copy() for k, v in ex.wafer.parameters().items()}, result.losses)
        if n == 1:
            assert not side_by_side  # one worker: nothing runs side by side
    assert side_by_side and max(side_by_side) >= 2  # two workers: ticks ran their stages at once
    # the tied embedding makes the first and last stages conflict: they never share a tick
    assert (0, len(ex.stages) - 1) in ex.conflicts
    (w1, l1), (w2, l2) = weights[1], weights[2]
    assert l1 == l2
    assert w1.keys() == w2.keys() and all(np.array_equal(w1[k], w2[k]) for k in w1)
