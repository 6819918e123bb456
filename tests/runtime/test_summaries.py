"""TensorBoard event files, read back with TensorBoard's own reader.

Rate and GlobalRate in the files are recomputed from the logged steps' wall times (each event
carries the wall time of the clock reading its values were computed at) with cerebras.pytorch's
RateTracker, docs/sources.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from cs2sim.runtime.artifacts.summaries import TRAIN_TAGS, Summaries

sys.path.insert(0, str(Path(__file__).parent))  # whatever pytest's import mode
from test_trainer import FakeStream, make_trainer


def read(logdir) -> EventAccumulator:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc


def test_scalars_round_trip(tmp_path):
    with Summaries(tmp_path) as tb:
        tb.scalars(1, {"loss": 2.5, "lr": 1e-3}, walltime=1000.0)
        tb.scalars(2, {"loss": 1.5, "lr": 1e-3}, walltime=1001.5)
    acc = read(tmp_path)
    loss = acc.Scalars("loss")
    assert [(e.step, e.value, e.wall_time) for e in loss] == [(1, 2.5, 1000.0), (2, 1.5, 1001.5)]


def test_training_events_have_the_tags_and_recomputable_rates(tmp_path):
    make_trainer(tmp_path, max_steps=23, log_steps=4).train()
    acc = read(tmp_path)
    assert set(TRAIN_TAGS) <= set(acc.Tags()["scalars"])
    steps = [e.step for e in acc.Scalars("loss")]
    assert steps == [4, 8, 12, 16, 20, 23]  # every log step and the final one
    B = FakeStream.batch_size
    walls = [e.wall_time for e in acc.Scalars("avg_samples_per_sec")]
    rate = [e.value for e in acc.Scalars("local_samples_per_sec")]
    glob = [e.value for e in acc.Scalars("avg_samples_per_sec")]
    counts = [s * B for s in steps]  # samples received by each log step
    # GlobalRate_k = count_k / (wall_k - t0): one t0 (the load time) explains every value
    t0 = walls[0] - counts[0] / glob[0]
    for n, w, g in zip(counts, walls, glob, strict=True):
        assert g == pytest.approx(n / (w - t0), rel=1e-5)
    # Rate: the first equals GlobalRate, then 0.6 * interval rate + 0.4 * previous Rate
    expected = counts[0] / (walls[0] - t0)
    assert rate[0] == pytest.approx(expected, rel=1e-5)
    for k in range(1, len(steps)):
        current = (counts[k] - counts[k - 1]) / (walls[k] - walls[k - 1])
        expected = 0.6 * current + 0.4 * expected
        assert rate[k] == pytest.approx(expected, rel=1e-4)
    steps_per_sec = [e.value for e in acc.Scalars("avg_steps_per_sec")]
    assert steps_per_sec == pytest.approx([g / B for g in glob], rel=1e-6)
    assert [e.value for e in acc.Scalars("loss_scale")] == [256.0] * 6
    assert [e.value for e in acc.Scalars("lr")] == pytest.approx([0.05] * 6)


def test_resumed_run_continues_the_step_axis(tmp_path):
    make_trainer(tmp_path, max_steps=10).train()
    make_trainer(tmp_path, max_steps=20).train()
    acc = read(tmp_path)
    assert [e.step for e in acc.Scalars("loss")] == [5, 10, 15, 20]
    # the resumed run's GlobalRate counts only its own samples: at step 15 it has seen 5 steps
    g15 = next(e for e in acc.Scalars("avg_samples_per_sec") if e.step == 15)
    r15 = next(e for e in acc.Scalars("local_samples_per_sec") if e.step == 15)
    assert g15.value == pytest.approx(r15.value, rel=1e-5)  # first log line of a run


def test_eval_events_in_eval_dir(tmp_path):
    make_trainer(tmp_path, max_steps=10).train()
    res = make_trainer(tmp_path, eval_steps=2).eval()
    acc = read(tmp_path / "eval")
    assert {"loss", "accuracy"} <= set(acc.Tags()["scalars"])
    (loss,) = acc.Scalars("loss")
    assert (loss.step, loss.value) == (10, pytest.approx(res.avg_loss, rel=1e-6))
    assert "accuracy" not in read(tmp_path).Tags()["scalars"]  # training dir has no eval tags


def test_resume_purges_events_a_crashed_run_wrote_past_its_checkpoint(tmp_path):
    make_trainer(tmp_path, max_steps=15).train()  # checkpoints 10 and 15, logs 5, 10, 15
    (tmp_path / "model-ckpt-15.npz").unlink()  # as if the run died before saving step 15
    make_trainer(tmp_path, max_steps=20).train()  # resumes from 10
    acc = read(tmp_path)
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [5, 10, 15, 20]  # the first run's 15 is gone, no fold
    assert loss[2].wall_time > loss[1].wall_time
