"""Checkpoints: format round trip, index, keep_checkpoint_max, integrity and fallback."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from cs2sim.runtime.artifacts import atomic
from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.artifacts.checkpoint import TrainState


def state(step: int, seed: int = 0) -> TrainState:
    rng = np.random.default_rng(seed + step)
    return TrainState(
        step=step,
        model={
            "fc1.weight": rng.standard_normal((3, 4)).astype(np.float32),
            "fc1.bias": np.zeros(4, np.float32),
        },
        optimizer={
            "m": {"fc1.weight": np.ones((3, 4), np.float32)},
            "t": step,
            "lr": 1e-3,
            "by_int": {0: np.arange(3), 1: "x"},
            "betas": (0.9, 0.999),
        },
        loss_scaler={
            "loss_scale": 32768.0,
            "steps_since_rescale": step,
            "overflows_since_rescale": 0,
        },
        data={"epoch": 1, "position": 17, "perm": np.arange(10)},
        rng={"dropout": np.random.default_rng(5).bit_generator.state},
    )


def test_round_trip_preserves_values_and_types(tmp_path):
    s = state(7)
    path = ckpt.save_checkpoint(tmp_path, s)
    assert path.name == "model-ckpt-7.npz"
    back = ckpt.load_checkpoint(path)
    assert back.step == 7
    np.testing.assert_array_equal(back.model["fc1.weight"], s.model["fc1.weight"])
    assert back.model["fc1.weight"].dtype == np.float32
    assert back.optimizer["t"] == 7 and back.optimizer["betas"] == (0.9, 0.999)
    assert back.optimizer["by_int"][1] == "x"  # int keys survive JSON
    np.testing.assert_array_equal(back.optimizer["by_int"][0], np.arange(3))
    assert back.loss_scaler == s.loss_scaler
    np.testing.assert_array_equal(back.data["perm"], np.arange(10))
    g = np.random.default_rng()
    g.bit_generator.state = back.rng["dropout"]  # 128-bit PCG state survives
    assert g.random() == np.random.default_rng(5).random()


def test_npz_is_readable_without_cs2sim(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, state(3))
    with np.load(path) as z:
        assert "model/fc1.weight" in z.files
        meta = json.loads(str(z["__meta__"]))
    assert meta["step"] == 3


def test_index_names_latest_and_keep_checkpoint_max(tmp_path):
    for step in (10, 20, 30, 40):
        ckpt.save_checkpoint(tmp_path, state(step), keep_max=2)
    names = sorted(p.name for p in tmp_path.glob("model-ckpt-*"))
    assert names == ["model-ckpt-30.npz", "model-ckpt-40.npz"]
    index = json.loads((tmp_path / "checkpoint").read_text())
    assert index["latest"] == "model-ckpt-40.npz"
    assert [e["step"] for e in index["checkpoints"]] == [30, 40]
    assert ckpt.load_latest(tmp_path).step == 40


def test_keep_zero_keeps_all(tmp_path):
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, state(step), keep_max=0)
    assert len(ckpt.list_checkpoints(tmp_path)) == 3


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_damaged_latest_is_skipped_for_previous(tmp_path, damage, caplog):
    ckpt.save_checkpoint(tmp_path, state(10))
    latest = ckpt.save_checkpoint(tmp_path, state(20))
    data = bytearray(latest.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 3] ^= 0xFF
    else:
        data = bytearray(b"not a zip at all")
    latest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="cs2sim"):
        got = ckpt.load_latest(tmp_path)
    assert got.step == 10
    np.testing.assert_array_equal(got.model["fc1.weight"], state(10).model["fc1.weight"])
    assert any(
        "model-ckpt-20.npz" in r.getMessage() and "skipping" in r.getMessage()
        for r in caplog.records
    )
    with pytest.raises(ckpt.CorruptCheckpoint):
        ckpt.load_checkpoint(latest)


def test_damage_detected_without_index_by_payload_digest(tmp_path):
    """A copied checkpoint (no index next to it) still verifies itself."""
    path = ckpt.save_checkpoint(tmp_path / "a", state(5))
    copy = tmp_path / "b" / "model-ckpt-5.npz"
    copy.parent.mkdir()
    raw = bytearray(path.read_bytes())
    # change one weight byte inside the stored array while keeping the zip's CRC consistent
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zin, zipfile.ZipFile(copy, "w") as zout:
        for info in zin.infolist():
            blob = bytearray(zin.read(info))
            if info.filename == "model/fc1.weight.npy":
                blob[-1] ^= 0x01
            zout.writestr(info.filename, bytes(blob))
    with pytest.raises(ckpt.CorruptCheckpoint, match="digest"):
        ckpt.load_checkpoint(copy)


def test_temp_files_never_listed_and_those_of_killed_writers_removed(tmp_path):
    import os
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    dead, alive = proc.pid, os.getppid()  # a writer killed mid-save, and one still writing
    ckpt.save_checkpoint(tmp_path, state(1))
    killed = {f".model-ckpt-2.npz.{dead}.tmp", f".checkpoint.{dead}.tmp"}
    kept = {f".model-ckpt-5.npz.{alive}.tmp", "model-ckpt-3.npz.tmp", f".notes.txt.{dead}.tmp"}
    for name in killed | kept:
        (tmp_path / name).write_bytes(b"half written")
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == ["model-ckpt-1.npz"]
    assert ckpt.load_latest(tmp_path).step == 1
    ckpt.save_checkpoint(tmp_path, state(4))  # a save leaves no temp file of its own behind
    assert {p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")} == kept


def test_crash_before_rename_leaves_previous_checkpoint_latest(tmp_path, monkeypatch):
    ckpt.save_checkpoint(tmp_path, state(10))

    def crash(src, dst, **dir_fds):
        raise OSError("power cut")

    monkeypatch.setattr(atomic.os, "replace", crash)
    with pytest.raises(OSError):
        ckpt.save_checkpoint(tmp_path, state(20))
    monkeypatch.undo()
    assert not (tmp_path / "model-ckpt-20.npz").exists()
    assert ckpt.load_latest(tmp_path).step == 10


def test_unindexed_file_counts_as_newest_and_bad_index_falls_back(tmp_path, caplog):
    ckpt.save_checkpoint(tmp_path, state(10))
    ckpt.save_checkpoint(tmp_path, state(20))
    # the run died after renaming checkpoint 30 but before rewriting the index
    index = (tmp_path / "checkpoint").read_text()
    ckpt.save_checkpoint(tmp_path, state(30))
    (tmp_path / "checkpoint").write_text(index)
    assert ckpt.load_latest(tmp_path).step == 30
    (tmp_path / "checkpoint").write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="cs2sim"):
        assert ckpt.load_latest(tmp_path).step == 30
    assert any("unreadable" in r.getMessage() for r in caplog.records)


def test_an_unindexed_checkpoint_is_adopted_by_the_next_save(tmp_path):
    """Killed between the rename and the index: the resumed run's next checkpoint is newer."""
    ckpt.save_checkpoint(tmp_path, state(10), keep_max=3)
    index = (tmp_path / "checkpoint").read_text()
    ckpt.save_checkpoint(tmp_path, state(20), keep_max=3)
    (tmp_path / "checkpoint").write_text(index)  # 20 renamed, never indexed
    assert ckpt.load_latest(tmp_path).step == 20  # the resume starts from it ...
    ckpt.save_checkpoint(tmp_path, state(30), keep_max=3)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "model-ckpt-10.npz",
        "model-ckpt-20.npz",
        "model-ckpt-30.npz",
    ]
    assert ckpt.load_latest(tmp_path).step == 30  # ... and its own next checkpoint is latest
    ckpt.save_checkpoint(tmp_path, state(40), keep_max=3)  # adopted files are pruned too
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "model-ckpt-20.npz",
        "model-ckpt-30.npz",
        "model-ckpt-40.npz",
    ]


def test_no_checkpoints(tmp_path):
    assert ckpt.load_latest(tmp_path) is None
    assert ckpt.load_latest(tmp_path / "missing") is None


def test_resolve_accepts_tf_style_prefix(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, state(4))
    assert ckpt.resolve_checkpoint_path(tmp_path / "model-ckpt-4") == path
    assert ckpt.load_checkpoint(ckpt.resolve_checkpoint_path(str(path))).step == 4


def test_missing_file_is_one_sentence(tmp_path):
    with pytest.raises(ckpt.CorruptCheckpoint, match="does not exist; check the path"):
        ckpt.load_checkpoint(tmp_path / "model-ckpt-9.npz")


def test_a_checkpoint_larger_than_the_model_can_hold_is_refused_before_reading(
    tmp_path, monkeypatch, caplog
):
    """Declared sizes are checked against the model (model_budget) before any array is read;
    the run falls back to the previous checkpoint, as for a damaged one."""
    ckpt.save_checkpoint(tmp_path, state(1))
    big = state(2)
    big.model["fc1.weight"] = np.zeros((512, 1024), np.float32)  # 2 MiB: not this model's
    ckpt.save_checkpoint(tmp_path, big)
    budget = 64 * 1024  # what a 12-weight model's checkpoint may hold, here without slack
    read: list[str] = []
    real_load = np.load
    monkeypatch.setattr(np, "load", lambda *a, **k: read.append("load") or real_load(*a, **k))
    with pytest.raises(ckpt.CorruptCheckpoint, match="more than a checkpoint of this model"):
        ckpt.load_checkpoint(tmp_path / "model-ckpt-2.npz", budget)
    assert read == []  # refused on the declared sizes alone
    with caplog.at_level(logging.WARNING):
        latest = ckpt.load_latest(tmp_path, budget)
    assert latest is not None and latest.step == 1
    assert "model-ckpt-2.npz" in caplog.text
    assert ckpt.model_budget(12) >= 4 * 5 * 12  # weights and four optimizer slots
