"""wsjobs and csrun_wse jobs share one cluster without overlapping: an execute wsjob takes the
systems a running csrun_wse job does not hold, and waits for them when it needs them."""

from __future__ import annotations

import pytest
from appliance_helpers import TRAIN

from cs2sim.scripts.testkit.appliance import wait_until

pytestmark = pytest.mark.slow  # whole wsjobs and csrun_wse jobs on one cluster

SHAPE = ["--total-nodes=3", "--single-task-nodes=2", "--tasks-per-node=1", "--cpus-per-task=1"]
WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"


def test_execute_jobs_take_free_systems_and_wait_for_held_ones(cs2_appliance):
    system = cs2_appliance.system
    stop = system.root / "stop"
    launcher = system.start(
        [
            system.tool_path("csrun_wse"),
            *SHAPE,
            "python-ws",
            "-c",
            WAIT,
            str(stop),
            "--cs_ip",
            "cs2-1",
            "--num_csx",
            "2",
        ]
    )
    wait_until(
        lambda: any(
            j.state == "RUNNING" and j.systems == ("cs2-1", "cs2-2")
            for j in system.jobs(all_states=False)
        ),
        60,
        "csrun_wse's job",
    )
    model = system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "2", "--max_steps", "10")
    assert res.exit_code == 0, res.combined
    assert cs2_appliance.jobs()[-1]["status"]["systems"] == ["cs2-3", "cs2-4"]

    proc = cs2_appliance.start_csx(model, *TRAIN[:-1], "md4", "--num_csx", "4", "--max_steps", "10")
    waiting = next(line for line in proc.stdout if "Poll ingress status" in line)
    assert "Queueing" in waiting and "systems held: cs2-1, cs2-2" in waiting, waiting
    stop.touch()  # the launcher's job ends: the wsjob gets all four
    assert launcher.wait(timeout=60) == 0
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert cs2_appliance.jobs()[-1]["status"]["systems"] == ["cs2-1", "cs2-2", "cs2-3", "cs2-4"]


SMALL_CLUSTER = {
    "systems": [
        {"name": "cs2-1", "ip": "127.0.1.1", "model": "CS-2", "execmode": "WEIGHT_STREAMING"},
        {"name": "cs2-2", "ip": "127.0.1.2", "model": "CS-2", "execmode": "WEIGHT_STREAMING"},
    ],
    "memoryx": {"capacity_tb": 12},
    "swarmx": {"max_systems": 2},
    "nodes": [
        {"name": "chief", "count": 2, "cpus": 16, "memory_gb": 64, "role": "chief"},
        {"name": "worker", "count": 2, "cpus": 16, "memory_gb": 64, "role": "worker"},
    ],
    "site": {
        "def_nodes": 3,
        "def_tasks_per_node": 1,
        "def_cpus_per_task": 1,
        "gres_resource": "cs:cerebras:1",
        "gres_node": "chief-0,chief-1",
        "scheduler": "embedded",
    },
}


def test_a_launch_the_scheduler_queues_is_queued_with_the_schedulers_reason(cs2_systems):
    from cs2sim.scripts.testkit.appliance import ApplianceCluster

    system = cs2_systems(cluster=SMALL_CLUSTER)
    cluster = ApplianceCluster(system)
    try:
        model = system.model_copy("fc_mnist")
        argv = [*TRAIN, "--max_steps", "10", "--compile_dir", "compiles"]
        cluster.run_csx(model, *argv, "--compile_only").check()  # the compile is cached
        stops = [system.root / f"stop-{i}" for i in range(2)]
        holders = [
            system.start([system.tool_path("csrun_cpu"), "python", "-c", WAIT, str(s)])
            for s in stops
        ]  # both worker nodes: the systems are free, the nodes not
        wait_until(
            lambda: len([j for j in system.jobs(all_states=False) if j.state == "RUNNING"]) == 2,
            60,
            "the node holders",
        )
        proc = cluster.start_csx(model, *argv)
        waiting = next(line for line in proc.stdout if "Poll ingress status" in line)
        assert "Queueing" in waiting and "is PENDING (Resources)" in waiting, waiting
        job = [j for j in cluster.jobs() if j["meta"]["type"] == "execute"][-1]
        assert job["status"]["phase"] == "QUEUED"
        for s in stops:
            s.touch()
        for h in holders:
            assert h.wait(timeout=60) == 0
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, out + err
        assert out.index("job is scheduled") < out.index("Preparing to execute using 1 CSX")
    finally:
        cluster.close()
