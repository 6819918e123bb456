"""Execute wsjobs wait in priority order (p1 before p2 before p3), then by age, and start in
that order when the systems they need are free; a queued job's client is told why it waits."""

from __future__ import annotations

import time

import pytest

from cs2sim.scripts.testkit.appliance import wait_until
from cs2sim.system.appliance.client import connect

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server


def _submit(conn, model, system, priority: str, name: str) -> str:
    spec = {
        "cwd": str(model),
        "run_py": str(model / "run.py"),
        "wrapper": "python-ws",
        "args": [
            "--mode",
            "train",
            "-p",
            "configs/params_small.yaml",
            "-o",
            f"md-{name}",
            "--max_steps",
            "10",
            "--num_csx",
            "4",
        ],
        "shape": [
            "--total-nodes=3",
            "--single-task-nodes=2",
            "--tasks-per-node=4",
            "--cpus-per-task=1",
        ],
        "env": dict(system.env),
    }
    reply = conn.call(
        "submit",
        kind="execute",
        priority=priority,
        labels={"name": name},
        num_csx=4,
        mode="WEIGHT_STREAMING",
        spec=spec,
    )
    return str(reply["job"]["meta"]["name"])


def test_priority_then_age_and_the_reason_each_waits(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")  # another user's run: every window of 4 includes it
    cs2_appliance.start()
    conn = connect(system.home)
    ids = {}
    for priority, name in (("p3", "a"), ("p2", "b"), ("p1", "c"), ("p1", "d")):
        ids[name] = _submit(conn, model, system, priority, name)
        time.sleep(0.01)  # distinct ages
    notes = wait_until(
        lambda: (lambda r: r if len(r) == 4 else None)(conn.call("get_jobs")["notes"]),
        30,
        "all four jobs to be considered",
    )
    assert (
        notes[ids["c"]].startswith("current job is top of queue but likely blocked by running jobs")
        and "cs2-1" in notes[ids["c"]]
    )
    assert notes[ids["d"]] == "1 execute job(s) queued before current job"
    assert notes[ids["b"]] == "2 execute job(s) queued before current job"
    assert notes[ids["a"]] == "3 execute job(s) queued before current job"
    listed = cs2_appliance.csctl("get", "jobs").check().output.splitlines()[1:]
    assert [row.split()[0] for row in listed] == [ids[n] for n in "cdba"]  # --sort priority
    system.release_job(held)

    def all_done():
        jobs = {j["meta"]["name"]: j for j in cs2_appliance.jobs()}
        return (
            jobs if all(jobs[i]["status"]["phase"] == "SUCCEEDED" for i in ids.values()) else None
        )

    jobs = wait_until(all_done, 300, "the four jobs to succeed")
    started = sorted(ids, key=lambda n: jobs[ids[n]]["status"]["startTime"] + ids[n])
    ends = {n: jobs[ids[n]]["status"]["completionTime"] for n in ids}
    starts = {n: jobs[ids[n]]["status"]["startTime"] for n in ids}
    # each started once the one before it had ended: c, d, b, a
    for before, after in zip("cdb", "dba", strict=True):
        assert starts[after] >= ends[before], (started, starts, ends)
    conn.close()


def test_the_client_says_it_is_queueing_only_when_it_waits_and_why(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-3")
    proc = cs2_appliance.start_csx(
        model,
        "-p",
        "configs/params_small.yaml",
        "--mode",
        "train",
        "-o",
        "md",
        "--max_steps",
        "10",
        "--num_csx",
        "4",
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "Poll ingress status" in line:
            break
    assert (
        "current job status: Queueing, msg: job is queueing. Job queue status: current job "
        "is top of queue but likely blocked by running jobs"
    ) in seen[-1], seen
    assert "systems held: cs2-3" in seen[-1] and "please run 'csctl get jobs'" in seen[-1]
    assert any("compile job id" in s for s in seen)  # the compile job did not wait
    assert sum("Poll ingress" in s for s in seen) == 1
    system.release_job(held)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "current job status: Scheduled, msg: job is scheduled." in out
    assert out.index("job is scheduled") < out.index("Preparing to execute using 4 CSX")
