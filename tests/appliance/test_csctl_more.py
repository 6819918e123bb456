"""csctl as a site's users use it: `get cluster` names the wsjob holding a system, `get node`
the one holding each node, `get cluster --error-only` only what is in error, `get volumes` the
directories jobs see; labels follow Kubernetes' syntax; `| head` ends it quietly; and
`jobs cancel` on an execute job's launch records the wsjob CANCELLED."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from appliance_helpers import TRAIN

from cs2sim.scripts.testkit.appliance import wait_until

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server

LONG = [*TRAIN, "--max_steps", "1000000"]


def _until_training(proc) -> None:
    for line in proc.stdout:
        if "| Train Device=CSX" in line:
            return
    raise AssertionError("the client ended before training: " + proc.stderr.read())


def _rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_holders_by_wsjob_name_and_a_scheduler_cancel_is_cancelled(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    proc = cs2_appliance.start_csx(model, *LONG, "--num_csx", "2")
    try:
        _until_training(proc)
        job = next(j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute")
        name = job["meta"]["name"]
        table = cs2_appliance.csctl("get", "cluster").check().output
        systems = {r[0]: r for r in _rows(table.split("\n\n")[0])[1:]}
        head = _rows(table)[0]
        col = head.index("JOB")
        assert systems["cs2-1"][col] == name and systems["cs2-2"][col] == name, table
        assert systems["cs2-3"][col] == "-"

        nodes = cs2_appliance.csctl("get", "node").check().output
        head, *rows = _rows(nodes)
        assert head == ["NAME", "ROLE", "STATE", "CPUS", "MEMORY_GB", "JOB"], nodes
        held = [r for r in rows if r[2] == "ALLOCATED"]
        assert held and all(r[5] == name for r in held), nodes
        assert any(r[2] == "IDLE" and r[5] == "-" for r in rows)

        # the launch's scheduler job, cancelled as a launcher user would (cs: jobs cancel N)
        sched = wait_until(
            lambda: cs2_appliance.job(name)["status"]["schedulerJob"], 60, "its scheduler job"
        )
        system.cs(f"jobs cancel {sched}").check()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ended = cs2_appliance.job(name)["status"]
    assert ended["phase"] == "CANCELLED", ended
    assert "was cancelled" in ended["reason"] and "143" not in ended["reason"]
    assert proc.returncode == 1 and "CANCELLED" in err.strip().splitlines()[-1], err


def test_error_only_volumes_labels_and_a_closed_pipe(cs2_appliance):
    system = cs2_appliance.system
    from cs2sim.system.machine import Machine
    from cs2sim.system.users import local_identity

    ok = cs2_appliance.csctl("get", "cluster", "--error-only").check()
    assert ok.output.strip() == "No errors found: every system is ACTIVE."
    Machine(system.store, "cs2-3").standby(local_identity(system.store))
    bad = cs2_appliance.csctl("get", "cluster", "--error-only").check().output
    head, *rows = _rows(bad)
    assert [r[0] for r in rows] == ["cs2-3"] and rows[0][head.index("STATE")] == "STANDBY", bad
    refused = cs2_appliance.csctl("get", "jobs", "--error-only")
    assert refused.exit_code == 2 and "belongs to `csctl get cluster`" in refused.errors

    volumes = cs2_appliance.csctl("get", "volumes").check().output
    head, *rows = _rows(volumes)
    assert head[:3] == ["NAME", "TYPE", "CONTAINER_PATH"], volumes
    assert any(r[0] == "workdir" for r in rows)
    assert "volume" in cs2_appliance.csctl("types").check().output

    model = system.model_copy("fc_mnist")
    cs2_appliance.run_csx(model, *TRAIN, "--compile_only").check()
    name = cs2_appliance.jobs()[0]["meta"]["name"]
    for word, says in (
        ("bad_key!=x", "invalid label key 'bad_key!'"),
        ("lead-=x", "invalid label key 'lead-'"),
        ("Ex.com/k=v", "its prefix must be a DNS subdomain"),
        ("k=bad value", "invalid label value 'bad value'"),
        (f"k={'v' * 64}", "invalid label value"),
    ):
        res = cs2_appliance.csctl("label", "job", name, word)
        assert res.exit_code == 2 and says in res.errors, (word, res.combined)
        assert res.errors.count("\n") == 1
    cs2_appliance.csctl("label", "job", name, "team=ml-infra", "example.com/run_1=a.b").check()
    assert cs2_appliance.job(name)["meta"]["labels"] == {
        "team": "ml-infra",
        "example.com/run_1": "a.b",
    }

    # `csctl get jobs | head`: the reader has gone before csctl writes
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "cs2sim.scripts.csctl", "get", "jobs", "-a"],
            stdout=w,
            stderr=subprocess.PIPE,
            env=system.env,
            timeout=120,
        )
    finally:
        os.close(w)
    assert proc.returncode == 141 and proc.stderr == b"", proc.stderr
