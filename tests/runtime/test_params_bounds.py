"""Params values that size arrays are bounded before anything is allocated: an absurd
`max_position_embeddings: 1000000000` is refused in one sentence by the host-memory check when
it sizes parameters (learned position embeddings), and sizes nothing at all when it is only a
bound (rotary tables cover the positions a run uses, not all it may). Each run is made under an
address-space limit far below the 7.45 GiB the table would take, so an allocation would fail."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from cs2sim.runtime.cli.main import model_home
from cs2sim.runtime.nn.rotary import Rotary

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 6 << 30  # bytes of address space for the run (its own needs are well under this)


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(tmp_path: Path, model: str, positions: int) -> subprocess.CompletedProcess[str]:
    params = yaml.safe_load((model_home(model) / "configs" / "params_tiny.yaml").read_text())
    params["model"]["max_position_embeddings"] = positions
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(
        PYTHONPATH=str(ROOT),
        CS2_HOME=str(tmp_path / "home"),
        OMP_NUM_THREADS="1",
        OPENBLAS_NUM_THREADS="1",
    )
    return subprocess.run(
        [
            sys.executable,
            str(model_home(model) / "run.py"),
            "-m",
            "train",
            "-p",
            str(path),
            "-o",
            str(tmp_path / f"md-{model}"),
            "--max_steps",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=_limited,
    )


def test_learned_positions_of_a_billion_are_refused_in_one_sentence(tmp_path: Path) -> None:
    r = _run(tmp_path, "gpt2", 1_000_000_000)
    assert r.returncode != 0 and "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: Training gpt2") and "needs about" in last
    assert "internal error" not in r.stderr


def test_rotary_positions_of_a_billion_allocate_nothing_and_train(tmp_path: Path) -> None:
    r = _run(tmp_path, "llama", 1_000_000_000)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Loss for final step" in r.stdout + r.stderr


def test_rotary_tables_grow_to_the_sequences_used() -> None:
    huge, small = Rotary(64, 10**9, interleaved=False), Rotary(64, 512, interleaved=False)
    x = np.random.default_rng(0).standard_normal((2, 4, 300, 64)).astype(np.float32)
    a, b = huge.rotate(x, np.empty_like(x)), small.rotate(x, np.empty_like(x))
    assert np.array_equal(a, b)  # the same rotation as full tables
    cos, _ = huge.tables(300)
    assert cos.shape == (300, 32) and cos.base is not None and cos.base.shape[0] == 512
    with pytest.raises(ValueError, match="exceeds max_positions 512"):
        small.tables(513)
