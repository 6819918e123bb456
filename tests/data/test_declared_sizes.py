"""A file's declared sizes are checked against the file before anything is sized by them: a
14.7 KB-class .h5 declaring 200 million gzip-chunked samples ends in one sentence naming it,
under a 4 GiB address-space cap on the host and through run.py CSX, never in MemoryError."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

h5py = pytest.importorskip("h5py")

from cs2sim.runtime.cli.main import model_home  # noqa: E402
from cs2sim.runtime.data import build_input  # noqa: E402
from cs2sim.system.errors import ConfigError  # noqa: E402

T = 64
HUGE = 200_000_000


def huge_h5(d: Path, written: int = 10) -> Path:
    """`data` of shape (200,000,000, 3, 64), gzip in one-sample chunks, `written` stored."""
    d.mkdir(parents=True, exist_ok=True)
    path = d / "examples_0_0.h5"
    with h5py.File(path, "w") as f:
        f.attrs["n_examples"] = HUGE
        ds = f.create_dataset(
            "data", shape=(HUGE, 3, T), dtype="i4", chunks=(1, 3, T), compression="gzip"
        )
        ds[:written] = np.ones((written, 3, T), np.int32)
    assert path.stat().st_size < 20_000
    return path


def said(text: str, path: Path) -> bool:
    return (
        f"HDF5 file {path} declares {HUGE} samples in chunks of 1 but stores only 10 of the "
        f"{HUGE} chunks they need"
        in text
        and "re-create it." in text
    )


def config(work: Path, data: Path) -> Path:
    with open(model_home("gpt2") / "configs" / "params_tiny.yaml") as f:
        doc = yaml.safe_load(f)
    for section in ("train_input", "eval_input"):
        doc[section].pop("stand_in_data", None)
        doc[section].update(data_processor="GptHDF5DataProcessor", data_dir=str(data))
        doc[section]["max_sequence_length"] = T
    doc["model"]["max_position_embeddings"] = max(T, doc["model"]["max_position_embeddings"])
    path = work / "huge.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_reader_refuses_it_before_sizing_anything(tmp_path):
    path = huge_h5(tmp_path / "h5")
    p = {
        "train_input": {
            "data_processor": "GptHDF5DataProcessor",
            "data_dir": str(path.parent),
            "batch_size": 2,
            "max_sequence_length": T,
            "vocab_size": 257,
        },
        "model": {"vocab_size": 257, "max_position_embeddings": T},
    }
    with pytest.raises(ConfigError) as e:
        build_input(p, "train", "gpt2", 1)
    assert said(str(e.value), path) and "\n" not in str(e.value)
    # n_examples within what is stored: the 10 samples are read, whatever the shape says
    with h5py.File(path, "r+") as f:
        f.attrs["n_examples"] = 10
    with build_input(p, "train", "gpt2", 1) as s:
        assert s.samples_per_epoch == 10 and (next(s)["input_ids"] == 1).all()


def test_on_the_host_under_a_4_gib_address_space_cap(tmp_path):
    path = huge_h5(tmp_path / "h5")
    cfg = config(tmp_path, path.parent)
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
        from cs2sim.runtime.cli.main import main
        sys.exit(main("gpt2", ["-m", "train", "-p", {str(cfg)!r}, "-o", {str(tmp_path / "md")!r}]))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stderr.count("\n") == 1 and "MemoryError" not in r.stderr, r.stderr[-3000:]
    assert said(r.stderr, path), r.stderr


@pytest.mark.slow  # a wsjob on the appliance
def test_through_run_py_csx_the_job_fails_with_the_sentence(cs2_appliance, tmp_path):
    work = cs2_appliance.system.model_copy("gpt2")
    path = huge_h5(work / "h5")
    cfg = config(work, path.parent)
    res = cs2_appliance.run_csx(work, "-p", str(cfg), "--mode", "train", "-o", "md")
    assert res.exit_code != 0, res.combined[-3000:]
    dirs = re.findall(r"remote log path: (\S+)", res.combined)
    logs = "".join(
        p.read_text(errors="replace") for d in dirs for p in Path(d).rglob("*") if p.is_file()
    )
    assert said(res.combined + logs, path), (res.combined + logs)[-4000:]
    assert "MemoryError" not in res.combined + logs and "Traceback" not in res.combined
