"""`python run.py CSX` on the real Slurm test cluster: the cluster server's compile wsjob and
execute wsjob are real Slurm jobs (csrun_cpu / csrun_wse with the Slurm backend), and the run
ends as on the embedded scheduler."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from slurmbe_helpers import script
from test_slurm_backend import site  # noqa: F401 - the fixture

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
FC = Path(__file__).resolve().parents[2] / "runtime" / "modelzoo" / "fc_mnist"


def test_run_py_csx_on_slurm(site, tmp_path):  # noqa: F811
    cs = script("cs")
    for command in (
        "system standby --yes",
        "config execmode setup weight-streaming",
        "system activate",
    ):
        res = subprocess.run(
            [cs, "-c", command], capture_output=True, text=True, env=site, timeout=60
        )
        assert res.returncode == 0, (command, res.stderr)
    work = tmp_path / "fc"
    work.mkdir()
    shutil.copy(FC / "run.py", work / "run.py")
    shutil.copytree(FC / "configs", work / "configs")
    try:
        res = subprocess.run(
            [
                sys.executable,
                "run.py",
                "CSX",
                "-p",
                "configs/params_small.yaml",
                "--mode",
                "train",
                "-o",
                "md",
                "--max_steps",
                "10",
            ],
            cwd=work,
            env=site,
            capture_output=True,
            text=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
        assert res.returncode == 0, (res.stdout[-3000:], res.stderr[-3000:])
        assert "Compile was successful!" in res.stdout
        assert "| Train Device=CSX, Step=10, Loss=" in res.stdout
        assert "Training completed successfully!" in res.stdout
        home = Path(site["CS2_HOME"])
        logs = "".join(p.read_text() for p in (home / "wsjob").rglob("launch.log"))
        # both wsjobs went through Slurm: its own queue lines are in their launch logs
        assert len(re.findall(r"srun: job \d+ (?:queued|has been allocated)", logs)) >= 2, logs
    finally:
        subprocess.run(
            [sys.executable, "-m", "cs2sim.scripts.cluster_server", "stop"],
            env=site,
            capture_output=True,
            timeout=120,
        )
