"""What an execute wsjob reserves and loads: its replicas (coordinator, weight servers, activation
servers, input workers, chief) as tasks on nodes the scheduler holds for them; a job too big for
the cluster's nodes refused before anything is reserved; the compile the client had made loaded
by its hash, not compiled again; --mount_dirs and --python_paths honoured."""

from __future__ import annotations

import collections

import pytest
from appliance_helpers import TRAIN

SITE = """\
import os
with open({marker!r}, "a") as f:
    f.write(os.environ.get("CS2SIM_WSJOB", "-") + "\\n")
"""


@pytest.mark.slow  # whole wsjobs through a cluster server
def test_replicas_are_tasks_on_held_nodes_and_the_compile_is_loaded_by_hash(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(
        model,
        *TRAIN,
        "--num_csx",
        "2",
        "--max_steps",
        "20",
        "--num_wgt_servers",
        "2",
        "--num_act_servers",
        "1",
        "--num_workers_per_csx",
        "2",
        "--compile_dir",
        "compiles",
    )
    assert res.exit_code == 0, res.combined
    execute = [j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute"][-1]
    name = execute["meta"]["name"]
    job = cs2_appliance.job(name)
    replicas = job["status"]["replicas"]
    counts = collections.Counter(r["type"] for r in replicas)
    # one activation server per CS-X, two input workers per CS-X
    assert counts == {"chief": 1, "coordinator": 1, "weight": 2, "activation": 2, "worker": 4}
    assert {r["name"] for r in replicas} >= {
        f"{name}-chief-0",
        f"{name}-coordinator-0",
        f"{name}-weight-1",
        f"{name}-activation-1",
        f"{name}-worker-3",
    }
    # every replica was placed by the scheduler; each server on a node of its own
    assert all(r["node"] for r in replicas), replicas
    singles = [r["node"] for r in replicas if r["type"] != "worker"]
    assert len(set(singles)) == len(singles) == 6
    workers = {r["node"] for r in replicas if r["type"] == "worker"}
    assert len(workers) == 2 and not workers & set(singles)

    log = (system.home / "wsjob" / "workdir" / "job-operator" / name / "launch.log").read_text()
    # the weight and activation servers ran as tasks of the job and saw its end
    assert log.count("weight server (task") >= 2 and log.count("activation server (task") >= 2
    # the execute job loaded the compile job's output by hash and compiled nothing of its own
    compiled = list((model / "compiles").glob("cs_*/COMPLETE"))
    assert len(compiled) == 1
    assert f'Loading the cached compile with hash "{compiled[0].parent.name}"' in log
    assert not list((model / "md").glob("cs_*"))


def test_a_job_too_big_for_the_nodes_is_refused_before_anything_is_reserved(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(model, *TRAIN, "--num_wgt_servers", "40")
    assert res.exit_code == 69, res.combined
    assert "cannot hold even when idle" in res.output + res.errors
    assert "--num_wgt_servers" in res.output + res.errors
    assert "Traceback" not in res.combined
    assert cs2_appliance.jobs() == []  # not even the compile job


@pytest.mark.slow  # whole wsjobs through a cluster server
def test_mount_dirs_checked_and_recorded_python_paths_reach_the_job(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    missing = cs2_appliance.run_csx(model, *TRAIN, "--mount_dirs", "no-such-dir")
    assert missing.exit_code == 2, missing.combined
    assert "no-such-dir is not a directory" in missing.output + missing.errors
    assert cs2_appliance.jobs() == []

    (model / "data").mkdir()
    libs = model / "libs"
    libs.mkdir()
    marker = system.root / "sitecustomize.out"
    (libs / "sitecustomize.py").write_text(SITE.format(marker=str(marker)))
    res = cs2_appliance.run_csx(
        model, *TRAIN, "--max_steps", "10", "--mount_dirs", "data", "--python_paths", "libs"
    )
    assert res.exit_code == 0, res.combined
    assert "there are no containers here" in res.output
    execute = [j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute"][-1]
    spec = cs2_appliance.job(execute["meta"]["name"])["spec"]
    assert spec["mountDirs"] == [str((model / "data").resolve())]
    assert spec["pythonPaths"] == [str(libs.resolve())]
    # the job's processes started with the path on PYTHONPATH (Python imported its module)
    assert execute["meta"]["name"] in marker.read_text().split()


def test_each_single_task_component_knows_which_replica_it_is():
    from cs2sim.runtime.job.roles import Role, task_info
    from cs2sim.system.appliance.replicas import plan_of

    plan = plan_of(2, {"num_wgt_servers": 2, "num_act_servers": 1, "num_workers_per_csx": 3})
    sizes = [tasks for _, tasks in plan.components()]
    assert sizes == [1, 1, 1, 1, 1, 1, 6]
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_HET_SIZE": str(len(sizes)),
        **plan.env(),
        **{f"SLURM_NTASKS_HET_GROUP_{i}": str(n) for i, n in enumerate(sizes)},
    }
    seen = []
    for procid in range(sum(sizes)):
        info = task_info({**env, "SLURM_PROCID": str(procid)})
        seen.append(info.server or info.role.value)
    assert seen == [
        "chief",
        "coordinator",
        "weight",
        "weight",
        "activation",
        "activation",
        *["streamer"] * 6,
    ]
    assert task_info({**env, "SLURM_PROCID": "2"}).name.startswith("weight server (task 2")
    # a csrun_wse job of its own (no CS2SIM_WS_SERVERS): every further component coordinates
    plain = {k: v for k, v in env.items() if k != "CS2SIM_WS_SERVERS"}
    assert task_info({**plain, "SLURM_PROCID": "3"}).role is Role.COORDINATOR
    assert task_info({**plain, "SLURM_PROCID": "3"}).server == "coordinator"


def test_unset_server_counts_shrink_to_the_nodes_given_ones_are_honoured_or_refused(cs2_appliance):
    import pytest

    from cs2sim.system.appliance.client import connect
    from cs2sim.system.errors import CsError

    cs2_appliance.start()
    conn = connect(cs2_appliance.system.home)
    try:
        # 20 nodes: the chief, the coordinator, 17 weight servers and a worker node fit only
        # without the activation server the default would add
        conn.call("check", num_csx=1, mode="WEIGHT_STREAMING", num_wgt_servers=17)
        with pytest.raises(CsError, match="cannot hold even when idle") as refused:
            conn.call(
                "check", num_csx=1, mode="WEIGHT_STREAMING", num_wgt_servers=17, num_act_servers=1
            )
        assert refused.value.exit_code == 69
    finally:
        conn.close()
