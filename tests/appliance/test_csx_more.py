"""`run.py CSX` as a site's users meet it: flags refused as the parser does, an unreachable
--mgmt_address said so, refusals in the appliance's words, a resumed run saying so, one live
client per model_dir, and an auto-started server that leaves when idle and refuses a caller
whose cluster file is not the one it was started with."""

from __future__ import annotations

import sys

import pytest
from appliance_helpers import TRAIN, messages

from cs2sim.scripts.testkit.appliance import wait_until

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server


def test_num_csx_0_and_an_unreachable_mgmt_address(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "0")
    assert res.exit_code == 2 and res.errors.startswith("usage: run.py CSX"), res.combined
    assert "argument --num_csx: must be 1 or more" in res.errors
    res = cs2_appliance.run_csx(model, *TRAIN, "--mgmt_address", "wronghost.invalid:443")
    assert res.exit_code == 1, res.combined
    err = res.errors.strip()
    assert err.count("\n") == 0 and "cannot reach the cluster server at wronghost" in err, err
    assert "token" not in err and "check --mgmt_address" in err
    assert cs2_appliance.jobs() == []


def test_refusals_name_appliance_flags_not_launcher_ones(cs2_appliance):
    system = cs2_appliance.system
    from cs2sim.system.machine import Machine
    from cs2sim.system.users import local_identity

    Machine(system.store, "cs2-3").standby(local_identity(system.store))
    model = system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "4")
    assert res.exit_code == 69, res.combined
    err = res.errors.strip()
    assert "cs2-3 is in STANDBY" in err and "--num_csx 4" in err, err
    assert "--cs_ip" not in err and "python-ws" not in err and "csctl get system" in err
    res = cs2_appliance.run_csx(model, "pipeline", *TRAIN)
    assert res.exit_code == 69 and "run.py CSX" in res.errors, res.combined
    assert "--cs_ip" not in res.errors and "`python`" not in res.errors


def test_a_resumed_run_says_so_and_a_second_client_is_refused_the_model_dir(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    first = cs2_appliance.run_csx(model, *TRAIN, "--max_steps", "20").check()
    said = messages(first.output)
    assert "Saving checkpoint at step 20" in said, said
    assert any(m.startswith("Saved checkpoint ") and "model-ckpt-20" in m for m in said)
    assert not any("Found latest checkpoint" in m for m in said)
    proc = cs2_appliance.start_csx(model, *TRAIN, "--max_steps", "1000000")
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "| Train Device=CSX" in line:
                break
        resumed = [line for line in seen if "Found latest checkpoint at" in line]
        assert len(resumed) == 1 and "model-ckpt-20" in resumed[0], seen
        assert "the run resumes from it" in resumed[0]
        # a second client given the same model_dir while the first one's job runs
        second = cs2_appliance.run_csx(model, *TRAIN, "--max_steps", "30")
        assert second.exit_code == 1, second.combined
        err = second.errors.strip()
        assert err.count("\n") == 0 and "is in use by another `run.py CSX` (pid" in err, err
        assert f"pid {proc.pid} " in err and "another --model_dir" in err
        executes = [j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute"]
        assert len(executes) == 2  # the first run's and the live one's: none from the second
    finally:
        proc.kill()
        proc.wait()


def test_an_auto_started_server_refuses_another_cluster_file_and_leaves_when_idle(
    cs2_appliance,
):
    system = cs2_appliance.system
    cs2_appliance.csctl("get", "jobs").check()  # starts one, as run.py CSX would
    pid = cs2_appliance.pid()
    other = system.root / "other-cluster.yaml"
    other.write_text((system.home / "cluster.yaml").read_text() + "# another site's copy\n")
    system.env["CS2_CLUSTER"] = str(other)
    try:
        res = cs2_appliance.csctl("get", "jobs")
        assert res.exit_code == 1, res.combined
        err = res.errors.strip()
        assert err.count("\n") == 0 and f"(pid {pid}) was started by an earlier command" in err
        assert str(other) in err and "`cs-cluster-server stop`" in err, err
        model = system.model_copy("fc_mnist")
        csx = cs2_appliance.run_csx(model, *TRAIN, "--compile_only")
        assert csx.exit_code == 1 and "`cs-cluster-server stop`" in csx.errors, csx.combined
    finally:
        del system.env["CS2_CLUSTER"]
    stop = system.run([sys.executable, "-m", "cs2sim.scripts.cluster_server", "stop"]).check()
    assert "is stopping" in stop.output
    wait_until(lambda: not cs2_appliance.running(), 120, "the server to stop")
    system.env["CS2_SERVER_IDLE_SECONDS"] = "1"
    cs2_appliance.csctl("get", "jobs").check()  # a new one, as this caller's environment says
    assert cs2_appliance.pid() != pid
    # no job and no connection for a second: it exits by itself
    wait_until(lambda: not cs2_appliance.running(), 120, "the idle server to exit")
    log = (system.home / "wsjob" / "server.log").read_text()
    assert "this auto-started server exits" in log


def test_the_light_cluster_identity_resolves_as_the_cluster_module(tmp_path, monkeypatch):
    from cs2sim.system.appliance.address import cluster_identity
    from cs2sim.system.cluster import cluster_source

    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    monkeypatch.setenv("CS2_HOME", str(tmp_path))
    assert cluster_identity()[0] == str(cluster_source().resolve())  # the built-in one
    (tmp_path / "cluster.yaml").write_text(cluster_source().read_text())
    assert cluster_identity()[0] == str((tmp_path / "cluster.yaml").resolve())
    assert cluster_identity()[0] == str(cluster_source().resolve())
    home_digest = cluster_identity()[1]
    other = tmp_path / "other.yaml"
    other.write_text(cluster_source().read_text() + "# changed\n")
    monkeypatch.setenv("CS2_CLUSTER", str(other))
    assert cluster_identity()[0] == str(cluster_source().resolve())
    assert cluster_identity()[1] != home_digest  # same content but a comment: another file
