"""The embedded layout against REAL Slurm's: every case recorded on a 4-node
Slurm 22.05 cluster (data/slurm_layout.json, docs/sources.md#slurm), replayed through the
same csrun_wse flag parsing, placement and environment code the launcher uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cs2sim.system.cluster import SiteSpec
from cs2sim.system.sched.fit import NodeInfo, place
from cs2sim.system.sched.flags import parse_wse
from cs2sim.system.sched.layout import layout

DATA = json.loads((Path(__file__).parent / "data" / "slurm_layout.json").read_text())
# the recorded cluster: node1..node4, 16 cpus each, no GRES (its srun lines carry no --gres).
# Its lines carry --cpus-per-task only where the case gave it: the csrun_wse resolution does that
# when the site default does not fit a node ("Slurm will choose ..."), hence 17 here.
SITE = SiteSpec(
    def_nodes=4,
    def_tasks_per_node=1,
    def_cpus_per_task=17,
    gres_resource="",
    gres_node="",
    singularity_image="img",
)
NODES = [NodeInfo(f"node{i}", 16) for i in range(1, 5)]
# the variables compared (SLURM_DISTRIBUTION and SLURM_NTASKS_PER_NODE vary with how srun was
# called;
# ports, pids, dirs and ids are run-specific; job ids are compared relative to the base id)
SAME = (
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_STEP_NUM_NODES",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_GTIDS",
    "SLURM_CPUS_ON_NODE",
    "SLURM_CPUS_PER_TASK",
    "SLURM_HET_SIZE",
    "SLURM_PACK_SIZE",
    "SLURM_HET_JOB_ID",
    "SLURM_HET_JOB_OFFSET",
    "SLURM_STEP_ID",
    "SLURM_TOPOLOGY_ADDR",
)


def _ours(case: dict) -> list[dict[str, str]]:
    launch = parse_wse([*case["csrun_wse_flags"], "python3", "task.py"], SITE, [16] * 4)
    assert launch.request is not None
    placed = place(launch.request.components, NODES)
    assert placed is not None
    tasks = layout(launch.request, 1000, placed, {n.name: n.cpus for n in NODES})
    return [t.env for t in tasks]


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["case"]["name"])
def test_layout_matches_real_slurm(case):
    theirs = sorted((t["env"] for t in case["tasks"]), key=lambda e: int(e["SLURM_PROCID"]))
    ours = _ours(case)
    assert len(ours) == len(theirs)
    base = int(theirs[0]["SLURM_JOB_ID"])
    for mine, real in zip(ours, theirs, strict=True):
        for key in SAME:
            assert mine.get(key) == real.get(key), (case["case"]["name"], real["SLURM_PROCID"], key)
        assert int(mine["SLURM_JOB_ID"]) - 1000 == int(real["SLURM_JOB_ID"]) - base
        groups = sorted(k for k in real if "_PACK_GROUP_" in k and "PARTITION" not in k)
        assert groups == sorted(k for k in mine if "_PACK_GROUP_" in k and "PARTITION" not in k)
        for key in groups:
            if key.startswith("SLURM_JOB_ID_"):
                assert int(mine[key]) - 1000 == int(real[key]) - base
            else:
                assert mine[key] == real[key], (case["case"]["name"], key)


def test_srun_lines_match_the_recorded_ones():
    for case in DATA["cases"]:
        launch = parse_wse([*case["csrun_wse_flags"], "python3", "task.py"], SITE, [16] * 4)
        assert launch.srun is not None
        recorded = [a for a in case["srun_argv"] if a != "<task>"]
        ours = [a for a in launch.srun.argv[: launch.srun.argv.index("singularity")]]
        assert ours == recorded, case["case"]["name"]
