"""A csrun_wse job whose chief ends at once (the rerun of a completed run) ends in
seconds with exit 0; a streamer that dies reaches the user as srun reports it."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from launch_helpers import HANG_S, queue_state, run, script, start, wait_for

from cs2sim.runtime.cli.main import model_home

FC = model_home("fc_mnist")
LAYOUT = [
    "--total-nodes=3",
    "--single-task-nodes=2",
    "--tasks-per-node=3",
    "--cpus-per-task=1",
]  # chief, a coordinator, 3 input streamers

pytestmark = pytest.mark.slow  # whole launched jobs


def _fc_run(tmp_path: Path, steps: int) -> list[str]:
    return [
        script("csrun_wse"),
        *LAYOUT,
        "python",
        str(FC / "run.py"),
        "-m",
        "train",
        "-p",
        str(FC / "configs" / "params_small.yaml"),
        "-o",
        str(tmp_path / "md"),
        "--max_steps",
        str(steps),
        "--cs_ip",
        "cs2-1",
    ]


@pytest.fixture
def no_stranding(monkeypatch):
    # far beyond the test's timeout: a stranded task would fail the test, not wait it out
    monkeypatch.setenv("CS2SIM_RENDEZVOUS_TIMEOUT", "900")


def test_rerun_of_a_completed_run_ends_in_seconds_with_exit_0(tmp_path, cs2_home, no_stranding):
    argv = _fc_run(tmp_path, 4)
    first = run(argv, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    for _ in range(2):  # the chief finds nothing to train and ends before its streamers come
        again = run(argv)  # within HANG_S: not stranded until the 900 s rendezvous timeout
        assert again.returncode == 0, again.stderr[-2000:]
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and [j["state"] for j in jobs] == ["COMPLETED"] * 3


def test_a_dead_streamer_is_reported_by_srun_naming_its_task(tmp_path, cs2_home, no_stranding):
    proc = start(_fc_run(tmp_path, 100000))
    pids = wait_for(lambda: list((cs2_home / "slurm").glob("*/pids")), timeout=HANG_S)[0]
    wait_for(lambda: (tmp_path / "md").is_dir(), timeout=HANG_S)
    rows = [r.split() for r in pids.read_text().splitlines()[1:]]
    streamer = next(r for r in rows if r[4] == "3")  # task 3: the first input streamer
    time.sleep(2.0)
    os.kill(int(streamer[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 128 + signal.SIGKILL, err[-2000:]
    # what the user sees (docs/operations.md): srun's line naming the task and its node
    assert f"srun: error: {streamer[5]}: task 3: Killed" in err
    assert "srun: Terminating StepId=" in err
    job = queue_state(cs2_home)[0][-1]
    assert job["state"] == "FAILED"


def test_the_id_a_standby_refusal_names_is_the_launched_job_and_cancels_it(
    tmp_path, cs2_home, no_stranding
):
    from cs2sim.system.machine import Machine
    from cs2sim.system.store import Store

    proc = start(_fc_run(tmp_path, 100000))
    running = wait_for(
        lambda: [j for j in queue_state(cs2_home)[0] if j["state"] == "RUNNING"], timeout=HANG_S
    )
    queue_id = running[0]["id"]
    store = Store.open()
    system_jobs = wait_for(lambda: Machine(store).status().running_jobs, timeout=HANG_S)
    assert [j.id for j in system_jobs] == [queue_id]  # one id: the chief registered the queue's
    refused = run([script("cs"), "-c", "system standby --yes"])
    assert refused.returncode == 1
    assert f"running: job {queue_id} ({system_jobs[0].user}: python " in refused.stderr
    assert f"`jobs cancel {queue_id}`" in refused.stderr
    shown = run([script("cs"), "-c", "jobs show"])
    assert shown.stdout.splitlines()[2].split()[0].split("+")[0] == str(queue_id)
    cancelled = run([script("cs"), "-c", f"jobs cancel {queue_id}"])
    assert cancelled.returncode == 0 and f"Cancelled job {queue_id} (running" in cancelled.stdout
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 128 + signal.SIGTERM
    assert wait_for(lambda: not Machine(store).status().running_jobs, timeout=HANG_S)
    # the chief took SIGTERM as a cancel: it said so once, recorded its CS-2 job CANCELLED
    # (not FAILED by the next reader finding its process gone), then died of the signal
    assert err.count("error: cancelled (SIGTERM)") == 1, err[-2000:]
    assert re.search(r"srun: error: chief-0: tasks? [\d-]+: Terminated", err), err[-2000:]
    from cs2sim.system import jobs

    with store.read() as db:
        assert jobs.get(db, queue_id).state == "CANCELLED"
    ends = [e.detail for e in Machine(store).audit() if e.command == "job end"]
    assert ends == [f"job {queue_id} CANCELLED"]
    ok = run([script("cs"), "-c", "system standby --yes"])  # nothing runs any more
    assert ok.returncode == 0, ok.stderr
