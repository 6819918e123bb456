"""On a cluster of four CS-2s, a weight-streaming launch reserves its num_csx systems
(the one --cs_ip names and the next ones): it is queued until they are free, refused before
anything is allocated when the cluster has fewer or one of them is not ACTIVE in weight streaming,
and `jobs show` / `system list` say which job holds which system."""

from __future__ import annotations

import json
import os

import pytest
from launch_helpers import HANG_S, run, script, start, wait_for

from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.machine import Machine
from cs2sim.system.sched import queue
from cs2sim.system.state import ExecMode
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

# chief (GRES node), coordinator, one input worker: the example cluster fits three such jobs
SHAPE = ["--total-nodes=3", "--single-task-nodes=2", "--tasks-per-node=1", "--cpus-per-task=1"]
# every task of the job waits for its stop file (no training: the reservation is the launcher's)
WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"


@pytest.fixture(autouse=True)
def four_systems(monkeypatch):
    monkeypatch.setenv("CS2_CLUSTER", str(EXAMPLE_PATH))


def _launch(tmp_path, name: str, cs_ip: str, num_csx: int):
    stop = tmp_path / f"stop-{name}"
    proc = start(
        [
            script("csrun_wse"),
            *SHAPE,
            "python-ws",
            "-c",
            WAIT,
            str(stop),
            "--cs_ip",
            cs_ip,
            "--num_csx",
            str(num_csx),
        ]
    )
    return proc, stop


def _queue() -> dict[str, queue.QueueJob]:
    """The queue's jobs by their command's stop file."""
    return {
        next(w for w in j.command.split() if "stop-" in w).rsplit("-", 1)[1]: j
        for j in queue.jobs(Store.open())
    }


def test_num_csx_2_reserves_two_systems_a_second_runs_beside_a_third_waits(tmp_path):
    a, stop_a = _launch(tmp_path, "a", "cs2-1", 2)
    wait_for(lambda: _queue().get("a") and _queue()["a"].state == "RUNNING", timeout=HANG_S)
    b, stop_b = _launch(tmp_path, "b", "cs2-3", 2)
    wait_for(lambda: _queue().get("b") and _queue()["b"].state == "RUNNING", timeout=HANG_S)
    c, stop_c = _launch(tmp_path, "c", "cs2-2", 2)  # needs cs2-2 (a's) and cs2-3 (b's)
    wait_for(lambda: _queue().get("c"), timeout=HANG_S)
    jobs = _queue()
    assert jobs["a"].systems == ("cs2-1", "cs2-2") and jobs["b"].systems == ("cs2-3", "cs2-4")
    # it waits only for CS-2 systems others hold: Slurm's reason for a license, not Resources
    assert jobs["c"].state == "PENDING" and jobs["c"].reason == "Licenses"
    # the console says which systems each job holds, and which job holds each system
    shown = run([script("cs"), "-c", "jobs show"])
    assert shown.returncode == 0, shown.stderr
    head, *rows = shown.stdout.splitlines()
    assert head.split()[-1] == "SYSTEMS"
    row = {r.split()[0]: r.split() for r in rows if r.split() and r.split()[0][0].isdigit()}
    assert row[f"{jobs['a'].id}+0"][-1] == "cs2-1,cs2-2"
    assert row[f"{jobs['c'].id}+0"][-2:] == ["(Licenses)", "cs2-2,cs2-3"]
    listed = json.loads(run([script("cs"), "-c", "system list --output-format json"]).stdout)
    assert [s["job"] for s in listed] == [jobs["a"].id, jobs["a"].id, jobs["b"].id, jobs["b"].id]
    stop_a.touch()  # a ends: c still waits for cs2-3
    assert a.wait(timeout=HANG_S) == 0
    wait_for(lambda: "a" not in _queue(), timeout=HANG_S)
    assert _queue()["c"].state == "PENDING"
    stop_b.touch()  # b ends: c starts on cs2-2 and cs2-3 (its launcher is woken)
    assert b.wait(timeout=HANG_S) == 0
    wait_for(lambda: _queue()["c"].state == "RUNNING", timeout=HANG_S)
    stop_c.touch()
    out, err = c.communicate(timeout=HANG_S)
    assert c.returncode == 0, err
    assert "queued and waiting for resources" in err and "has been allocated resources" in err


def test_more_systems_than_the_cluster_has_is_refused_at_once(tmp_path):
    res = run(
        [
            script("csrun_wse"),
            *SHAPE,
            "python-ws",
            "-c",
            "pass",
            "--cs_ip",
            "cs2-1",
            "--num_csx",
            "5",
        ]
    )
    assert res.returncode == 69
    assert res.stderr.count("\n") == 1 and "asks for 5 CS-2 systems" in res.stderr
    assert "cluster has 4 (cs2-1, cs2-2, cs2-3, cs2-4)" in res.stderr
    assert "Launching" not in res.stdout and queue.jobs(Store.open(), all_states=True) == []


@pytest.mark.parametrize("state", ["PIPELINED", "STANDBY"])
def test_a_reserved_system_not_active_in_weight_streaming_refuses_naming_it(tmp_path, state):
    store = Store.open()
    m, admin = Machine(store, "cs2-3"), local_identity(store)
    m.standby(admin)
    if state == "PIPELINED":
        m.setup_execmode(admin, ExecMode.PIPELINED)
        m.activate(admin)
    res = run(
        [
            script("csrun_wse"),
            *SHAPE,
            "python-ws",
            "-c",
            "pass",
            "--cs_ip",
            "cs2-2",
            "--num_csx",
            "2",
        ],
        env={**os.environ, "COLUMNS": "1000"},
    )
    assert res.returncode == 69, res.stderr
    err = res.stderr
    assert err.count("\n") == 1 and "needs 2 CS-2 systems ACTIVE in WEIGHT_STREAMING" in err
    if state == "PIPELINED":
        assert (
            "cs2-3 is ACTIVE in PIPELINED mode (an admin runs `cs --system cs2-3 -c "
            '"system standby --yes; config execmode setup weight-streaming; system '
            'activate"`)'
        ) in err
    else:
        assert 'cs2-3 is in STANDBY (an admin runs `cs --system cs2-3 -c "system activate"`)' in err
    assert "cs2-2 is" not in err  # the ready one is not blamed
    assert queue.jobs(store, all_states=True) == []  # nothing was allocated
