"""Issue 22: a csrun_wse job whose chief ends at once (the rerun of a completed run) ends in
seconds with exit 0; a streamer that dies reaches the user as srun reports it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from launch_helpers import queue_state, run, script, start, wait_for

from cs2sim.runtime.cli.main import model_home

FC = model_home("fc_mnist")
LAYOUT = ["--total-nodes=3", "--single-task-nodes=2", "--tasks-per-node=3",
          "--cpus-per-task=1"]  # chief, a coordinator, 3 input streamers


def _fc_run(tmp_path: Path, steps: int) -> list[str]:
    return [script("csrun_wse"), *LAYOUT, "python", str(FC / "run.py"), "-m", "train", "-p",
            str(FC / "configs" / "params_small.yaml"), "-o", str(tmp_path / "md"),
            "--max_steps", str(steps), "--cs_ip", "cs2-1"]


@pytest.fixture
def no_stranding(monkeypatch):
    # far beyond the test's timeout: a stranded task would fail the test, not wait it out
    monkeypatch.setenv("CS2SIM_RENDEZVOUS_TIMEOUT", "900")


def test_rerun_of_a_completed_run_ends_in_seconds_with_exit_0(tmp_path, cs2_home, no_stranding):
    argv = _fc_run(tmp_path, 4)
    first = run(argv, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    for _ in range(2):  # the chief finds nothing to train and ends before its streamers come
        t0 = time.monotonic()
        again = run(argv, timeout=240)
        took = time.monotonic() - t0
        assert again.returncode == 0, again.stderr[-2000:]
        assert took < 240
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and [j["state"] for j in jobs] == ["COMPLETED"] * 3


def test_a_dead_streamer_is_reported_by_srun_naming_its_task(tmp_path, cs2_home, no_stranding):
    proc = start(_fc_run(tmp_path, 100000))
    pids = wait_for(lambda: list((cs2_home / "slurm").glob("*/pids")), timeout=120)[0]
    wait_for(lambda: (tmp_path / "md").is_dir(), timeout=120)
    rows = [r.split() for r in pids.read_text().splitlines()[1:]]
    streamer = next(r for r in rows if r[4] == "3")  # task 3: the first input streamer
    time.sleep(2.0)
    os.kill(int(streamer[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    # what the user sees (docs/operations.md): srun's line naming the task and its node
    assert f"srun: error: {streamer[5]}: task 3: Killed" in err
    assert "srun: Terminating StepId=" in err
    job = queue_state(cs2_home)[0][-1]
    assert job["state"] == "FAILED"
