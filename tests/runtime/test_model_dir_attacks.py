"""A model_dir cannot be turned against its owner: symlinks planted where the run writes
(`performance/`, `train/`, the run log, the temp names of a checkpoint and of its index) are
never followed, FIFOs where it reads (the index, a checkpoint, COMPLETE, plan.json) never hang
it, the run never changes the mode of a file it did not create, and a checkpoint whose declared
sizes exceed what its file holds (2^40 floats in 282 bytes; a zip bomb) falls back to the
previous checkpoint with a warning, as a missing one does."""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.artifacts import safejson
from cs2sim.runtime.artifacts.atomic import NotRegularFile, UnsafePath
from cs2sim.runtime.artifacts.perf import RunPerf, write_performance
from cs2sim.runtime.cli.main import model_home
from cs2sim.runtime.cli.runlog import RunLog
from cs2sim.runtime.compiler.cache import complete_stage
from cs2sim.runtime.params import write_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_checkpoint import state

ROOT = Path(__file__).resolve().parents[2]
FC_SMALL = str(model_home("fc_mnist") / "configs" / "params_small.yaml")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory of the victim's outside model_dir, with a private file in it."""
    d = tmp_path / "outside"
    d.mkdir()
    secret = d / "secret"
    secret.write_text("keep me\n")
    secret.chmod(0o600)
    return d


def _untouched(outside: Path) -> bool:
    secret = outside / "secret"
    return (
        sorted(p.name for p in outside.iterdir()) == ["secret"]
        and secret.read_text() == "keep me\n"
        and secret.stat().st_mode & 0o777 == 0o600
    )


def test_symlinked_subdirectories_are_not_written_through(tmp_path: Path, outside: Path) -> None:
    md = tmp_path / "md"
    md.mkdir()
    (md / "performance").symlink_to(outside)
    (md / "train").symlink_to(outside)
    with pytest.raises(UnsafePath, match=r"md/performance is a symlink or not a directory"):
        write_performance(md, RunPerf("cpu", 10, 1.0, 0, 10))
    with pytest.raises(UnsafePath, match=r"md/train is a symlink or not a directory"):
        write_params({"a": 1}, md / "train" / "params_train.yaml", within=md)
    (md / "eval").symlink_to(outside)
    from cs2sim.runtime.artifacts.summaries import Summaries

    with pytest.raises(UnsafePath, match=r"md/eval is a symlink"):
        Summaries(md / "eval", within=md)
    assert _untouched(outside)


def test_the_run_log_is_not_written_through_a_symlink_or_into_a_fifo(
    tmp_path: Path, outside: Path, monkeypatch
) -> None:
    md = tmp_path / "md"
    md.mkdir()
    import time as _time

    monkeypatch.setattr(_time, "strftime", lambda fmt: "run_20260101_000000.log")
    (md / "run_20260101_000000.log").symlink_to(outside / "secret")
    log = RunLog()
    try:
        with pytest.raises(UnsafePath, match="is a symlink or a FIFO"):
            log.add_file(md)
        (md / "run_20260101_000000.log").unlink()
        os.mkfifo(md / "run_20260101_000000.log")
        with pytest.raises(UnsafePath, match="is a symlink or a FIFO"):
            log.add_file(md)  # nobody reads the FIFO: refused at once, not waited on
    finally:
        log.close()
    assert _untouched(outside)


def test_planted_temp_names_are_replaced_not_followed_nor_chmodded(
    tmp_path: Path, outside: Path
) -> None:
    md = tmp_path / "md"
    ckpt.save_checkpoint(md, state(10))
    pid = os.getpid()
    (md / f".model-ckpt-20.npz.{pid}.tmp").symlink_to(outside / "secret")
    (md / f".checkpoint.{pid}.tmp").symlink_to(outside / "secret")
    ckpt.save_checkpoint(md, state(20))
    assert _untouched(outside)  # content and 0600 mode of the outside file as they were
    assert ckpt.load_latest(md).step == 20
    assert not any(p.is_symlink() for p in md.iterdir())


@pytest.mark.parametrize("what", ["checkpoint", "model-ckpt-20.npz"])
def test_a_fifo_in_place_of_the_index_or_a_checkpoint_falls_back(
    tmp_path: Path, caplog, what: str
) -> None:
    md = tmp_path / "md"
    ckpt.save_checkpoint(md, state(10))
    if what == "checkpoint":
        (md / what).unlink()
    os.mkfifo(md / what)
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        back = ckpt.load_latest(md)  # would block forever in open() on a FIFO
    assert back is not None and back.step == 10
    assert "is a FIFO, not a regular file" in caplog.text


def test_a_fifo_as_complete_or_plan_json_is_refused_not_waited_on(tmp_path: Path) -> None:
    d = tmp_path / "compile"
    d.mkdir()
    os.mkfifo(d / "COMPLETE")
    os.mkfifo(d / "plan.json")
    assert complete_stage(d) is None
    with pytest.raises(NotRegularFile, match="plan.json is a FIFO"):
        safejson.read(d / "plan.json")
    with pytest.raises(NotRegularFile, match="is a device"):
        safejson.read("/dev/zero")


def _npy_header(shape: tuple[int, ...]) -> bytes:
    """A version 1.0 .npy header declaring `shape` of little-endian float64."""
    text = repr({"descr": "<f8", "fortran_order": False, "shape": shape}).encode()
    pad = 64 - (10 + len(text) + 1) % 64
    text += b" " * pad + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text


def test_a_tiny_checkpoint_declaring_two_to_the_40_floats_falls_back(
    tmp_path: Path, caplog
) -> None:
    md = tmp_path / "md"
    ckpt.save_checkpoint(md, state(10))
    bad = md / "model-ckpt-20.npz"
    with zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("model/fc1.weight.npy", _npy_header((1 << 40,)))
    assert bad.stat().st_size < 400
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        back = ckpt.load_latest(md)
    assert back is not None and back.step == 10
    assert "declares 8,796,093,022,208 bytes of array in 128 bytes" in caplog.text


def test_a_zip_bomb_checkpoint_falls_back_before_inflating(tmp_path: Path, caplog) -> None:
    md = tmp_path / "md"
    ckpt.save_checkpoint(md, state(10))
    bomb = md / "model-ckpt-20.npz"
    n = 256 << 20  # 256 MiB of zeros deflate to ~250 KiB
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("model/fc1.weight.npy", "w", force_zip64=True) as m:
            m.write(_npy_header((n // 8,)))
            zero = bytes(1 << 20)
            for _ in range(n >> 20):
                m.write(zero)
    size = bomb.stat().st_size
    assert size < 2 << 20
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        back = ckpt.load_latest(md)
    assert back is not None and back.step == 10
    assert f"more than a file of {size:,} bytes can hold" in caplog.text
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 128 << 10, grown  # nothing near the 256 MiB it would inflate to


def test_run_py_resumes_past_a_fifo_checkpoint_and_index(tmp_path: Path) -> None:
    md = tmp_path / "md"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(ROOT), CS2_HOME=str(tmp_path / "home"))
    run = [
        sys.executable,
        str(model_home("fc_mnist") / "run.py"),
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(md),
        "--save_checkpoints_steps",
        "5",
    ]
    first = subprocess.run(
        [*run, "--max_steps", "5"], env=env, capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    (md / "checkpoint").unlink()
    os.mkfifo(md / "checkpoint")
    os.mkfifo(md / "model-ckpt-8.npz")
    second = subprocess.run(
        [*run, "--max_steps", "10"], env=env, capture_output=True, text=True, timeout=120
    )  # a hang would be a TimeoutExpired here
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert "Traceback" not in out and "is a FIFO" in out
    assert json.loads((md / "checkpoint").read_text())["latest"] == "model-ckpt-10.npz"


def test_run_py_refuses_a_symlinked_train_dir_in_one_sentence(
    tmp_path: Path, outside: Path
) -> None:
    md = tmp_path / "md"
    md.mkdir()
    (md / "train").symlink_to(outside)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(ROOT), CS2_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [
            sys.executable,
            str(model_home("fc_mnist") / "run.py"),
            "-m",
            "train",
            "-p",
            FC_SMALL,
            "-o",
            str(md),
            "--max_steps",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 77 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: {md}/train is a symlink or not a directory, so the run would write outside its "
        "model directory; remove it, or use another model_dir."
    )
    assert _untouched(outside)
