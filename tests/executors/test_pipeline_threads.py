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
    # whether a tick is balanced enough to run side by side is decided from measured stage
    # times, which a busy machine can tip the other way for a whole run; the bits are the
    # question here, so every tick whose stages may share one runs side by side
    monkeypatch.setattr(PipelinedExecutor, "_balanced", lambda self, keys: True)
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


def test_side_by_side_only_when_the_threads_stay_about_equally_busy(workers_of):
    workers_of(2)
    ex = PipelinedExecutor()
    ex._cost = {("F", 0): 1.0, ("F", 1): 1.0, ("F", 2): 6.0, ("F", 3): 0.1}
    assert ex._balanced([("F", 0), ("F", 1)])  # 2 x 1.0 against 2.0: even
    assert not ex._balanced([("F", 2), ("F", 3)])  # 2 x 6.0 against 6.1: one thread idles
    assert not ex._balanced([("F", 0), ("F", 4)])  # a stage not measured yet runs alone first
    workers_of(1)
    assert ex._balanced([("F", 0), ("F", 1)])  # one thread: trivially even (never asked)
