"""`python run.py CSX` reads its params file through the same bounded loader as `run.py`: a 39 MB
params file is refused in one sentence before it is parsed, under an address-space limit the
unbounded parse (about 560 MB and minutes of PyYAML) would have run into."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cs2sim.runtime.cli.main import model_home
from cs2sim.runtime.params import YAML_LIMITS
from cs2sim.system.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
AS_LIMIT = 3 << 30  # 3 GiB of address space: the interpreter, numpy and the runtime fit easily


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


@pytest.mark.slow
def test_a_39_mb_params_file_through_run_py_csx_is_refused_in_one_sentence(tmp_path: Path):
    big = tmp_path / "params.yaml"
    with open(big, "w") as f:  # valid YAML throughout: a parse would have to read it all
        f.write("train_input:\n  batch_size: 8\nmodel:\n  hidden_size: 10\nextra:\n")
        row = "  - [" + ", ".join(["123456789"] * 16) + "]\n"
        f.write(row * (39_000_000 // len(row)))
    size = big.stat().st_size
    assert size > 38_000_000
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "CS2"))}
    env.update(PYTHONPATH=str(ROOT), CS2_HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [
            sys.executable,
            str(model_home("fc_mnist") / "run.py"),
            "CSX",
            "--mode",
            "train",
            "--params",
            str(big),
            "--model_dir",
            str(tmp_path / "md"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_capped,
    )
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    said = (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert r.returncode == ConfigError.exit_code and r.stdout == "", said
    assert lines == [
        f"error: {big} is {size} bytes, over the {YAML_LIMITS.max_bytes}-byte limit "
        "(max_bytes) for a params file; shorten it."
    ], r.stderr[-2000:]
