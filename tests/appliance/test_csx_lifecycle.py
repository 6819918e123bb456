"""A wsjob always ends with a recorded phase and leaves no process behind: the client killed,
the server killed, --job_time_sec, and a forced standby of one of its systems mid-run (exit 75,
checkpoints kept)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from appliance_helpers import TRAIN

from cs2sim.scripts.testkit.appliance import wait_until

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server

LONG = [*TRAIN, "--max_steps", "1000000"]


def _procs_of(job_id: str) -> list[int]:
    """Processes started for a wsjob (its launch and every task carry its id)."""
    mine = []
    needle = f"CS2SIM_WSJOB={job_id}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                mine.append(int(pid))
        except OSError:
            continue
    return mine


def _until_training(proc) -> str:
    """Read the client's output until its first training line."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "| Train Device=CSX" in line:
            return "".join(seen)
    raise AssertionError("the client ended before training: " + "".join(seen) + proc.stderr.read())


def _execute(cluster) -> dict:
    return [j for j in cluster.jobs() if j["meta"]["type"] == "execute"][-1]


def _systems_free(cluster) -> bool:
    rows = cluster.csctl("get", "system", "-o", "json").check().json()["rows"]
    return all(r["job"] == "" for r in rows)


def test_a_killed_client_cancels_its_job_and_leaves_no_process(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    proc = cs2_appliance.start_csx(model, *LONG)
    _until_training(proc)
    job_id = _execute(cs2_appliance)["meta"]["name"]
    assert _procs_of(job_id)
    proc.kill()
    proc.wait()
    job = cs2_appliance.wait_for("execute", "CANCELLED")
    assert "went away" in job["status"]["reason"]
    wait_until(lambda: not _procs_of(job_id), 300, "the job's processes to end")
    wait_until(lambda: _systems_free(cs2_appliance), 300, "its systems to be free")


def test_a_killed_server_is_detected_and_its_job_is_not_left_running(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    proc = cs2_appliance.start_csx(model, *LONG)
    _until_training(proc)
    job_id = _execute(cs2_appliance)["meta"]["name"]
    cs2_appliance.kill()
    out, err = proc.communicate(timeout=300)  # detected (a 1,000,000-step run); a hang guard
    assert proc.returncode == 1
    assert err.count("error:") == 1 and "cluster management server closed the connection" in err, (
        err
    )
    assert "Traceback" not in err
    wait_until(lambda: not _procs_of(job_id), 300, "the job's processes to end")
    job = cs2_appliance.job(job_id)  # a new server is started on demand
    assert job["status"]["phase"] == "FAILED"
    assert job["status"]["reason"] == "the cluster server stopped while the job was running"


def test_job_time_sec_ends_the_job(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    # The limit is meant for the execute job: the compile is made first (and then found cached,
    # so no compile job exists for the limit to end however slow the machine is).
    cs2_appliance.run_csx(model, *TRAIN, "--compile_only").check()
    res = cs2_appliance.run_csx(model, *LONG, "--job_time_sec", "3")
    assert res.exit_code == 124, res.combined
    job = _execute(cs2_appliance)
    assert job["status"]["phase"] == "FAILED"
    assert job["status"]["reason"] == "the job ran past its time limit (--job_time_sec 3)"
    assert res.errors.count("error:") == 1 and "time limit" in res.errors
    assert not _procs_of(job["meta"]["name"])


def test_forced_standby_mid_run_fails_the_job_keeping_checkpoints(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    proc = cs2_appliance.start_csx(model, *LONG, "--num_csx", "2")
    _until_training(proc)
    wait_until(lambda: list((model / "md").glob("model-ckpt-*")), 300, "a checkpoint")
    # one cluster, three front doors: the console lists the execute job under the wsjob's name
    job_id = _execute(cs2_appliance)["meta"]["name"]
    shown = system.cs("jobs show").check()
    assert job_id in shown.output, shown.output
    # the console refuses an unforced standby, naming the running wsjob
    refused = system.cs(None, "--system", "cs2-2", "-c", "system standby --yes")
    assert refused.exit_code != 0 and job_id in refused.combined, refused.combined
    system.cs(None, "--system", "cs2-2", "-c", "system standby --force --yes").check()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, out + err
    job = cs2_appliance.job(job_id)
    assert job["status"]["phase"] == "FAILED" and "left ACTIVE" in job["status"]["reason"]
    assert list((model / "md").glob("model-ckpt-*"))
    wait_until(lambda: not _procs_of(job_id), 300, "the job's processes to end")
