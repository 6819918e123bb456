"""The Weight Streaming Quickstart's flow on the embedded cluster: the admin switches the CS-2 to
weight streaming, a compile on a CPU node (csrun_cpu) is then reused by csrun_wse's training.
The Quickstart's exact 98-task csrun_wse line runs end to end in the README's main job, whose
test (tests/scripts/test_demo.py) checks its launch, its 96 streamers, its steps and its files;
on real Slurm, tests/slurm/test_slurm_quickstart.py. Needs the --cs_ip executors
(runtime/job/cs_run.py) and the task roles / streamers (runtime/job/roles.py,
runtime/job/streamers.py): skipped, with that reason, in a checkout that lacks them."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from launch_helpers import queue_state, run, script

NEEDED = ("cs2sim.runtime.job.cs_run", "cs2sim.runtime.job.roles", "cs2sim.runtime.job.streamers")
missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)} (exec + streamers)"),
]
GPTJ = Path(__file__).resolve().parents[2] / "runtime" / "modelzoo" / "gptj"


def weight_streaming_gptj(tmp_path: Path) -> Path:
    """A user's copy of the GPT-J model directory, on a system the admin switched to weight
    streaming (the Weight Streaming Quickstart, Section 1)."""
    work = tmp_path / "gptj"
    work.mkdir()
    shutil.copy(GPTJ / "run.py", work / "run.py")
    shutil.copytree(GPTJ / "configs", work / "configs")
    for command in (
        "system standby --yes",
        "config execmode setup weight-streaming",
        "system activate",
    ):
        res = run([script("cs"), "-c", command], cwd=work)
        assert res.returncode == 0, (command, res.stderr)
    return work


def test_csrun_cpu_compile_is_reused_by_csrun_wse(tmp_path, cs2_home):
    work = weight_streaming_gptj(tmp_path)
    common = [
        "python-ws",
        "run.py",
        "--model_dir",
        "model_dir",
        "--cs_ip",
        "127.0.1.1",
        "--params",
        "configs/params_continuous_pretraining.yaml",
    ]
    res = run([script("csrun_cpu"), *common, "--mode=compile_only"], cwd=work, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    compiled = list((work / "model_dir").glob("cs_*"))
    assert len(compiled) == 1
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes",
            "4",
            "--tasks-per-node",
            "2",
            "--cpus-per-task",
            "16",
            "--single-task-nodes",
            "2",
            "--cyclic",
            *common,
            "--mode",
            "train",
            "--max_steps",
            "2",
        ],
        cwd=work,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"Reusing existing compilation in model_dir/{compiled[0].name}" in res.stdout
    jobs, nodes = queue_state(cs2_home)  # both jobs ended and gave their nodes back
    assert nodes == [] and [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"]
