"""Real Slurm's task layout for csrun_wse's srun lines still matches the recorded ground truth
(tests/slurm/ground_truth/layout.json), which the embedded scheduler is compared with."""

from __future__ import annotations

import json

import pytest
from layout_cases import CASES, LayoutCase
from record_layout import DEFAULT_OUT, run_case
from slurm_helpers import Cluster

pytestmark = pytest.mark.slurm

GROUND_TRUTH = {c["case"]["name"]: c for c in json.loads(DEFAULT_OUT.read_text())["cases"]}

# What a task learns about its place in the job. Left out on purpose: run-specific values (job
# ids, ports, pids, directories) and the two variables real Slurm sets inconsistently within one
# heterogeneous step (SLURM_DISTRIBUTION, SLURM_NTASKS_PER_NODE; see /work/notes/slurm-layout.md).
LAYOUT_VARS = (
    "SLURMD_NODENAME", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_GTIDS",
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS", "SLURM_TASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_ID", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_HET_SIZE", "SLURM_PACK_SIZE", "SLURM_HET_JOB_ID", "SLURM_HET_JOB_OFFSET",
)


def layout_view(env: dict[str, str]) -> dict[str, str | int | None]:
    """The layout part of one task's environment; component job ids relative to the base id."""
    view: dict[str, str | int | None] = {k: env.get(k) for k in LAYOUT_VARS}
    base = int(env["SLURM_JOB_ID"])
    for key, value in env.items():
        if key.startswith("SLURM_JOB_ID_PACK_GROUP_"):
            view[key + " - SLURM_JOB_ID"] = int(value) - base
        elif key.startswith(("SLURM_JOB_NODELIST_PACK_GROUP_", "SLURM_JOB_CPUS_PER_NODE_PACK")):
            view[key] = value
    return view


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_real_slurm_layout_matches_ground_truth(slurm: Cluster, case: LayoutCase) -> None:
    if slurm.nodes != ("node1", "node2", "node3", "node4"):
        pytest.skip(f"the ground truth was recorded on the 4-node test cluster, not {slurm.nodes}")
    recorded = GROUND_TRUTH[case.name]
    assert recorded["srun_line"] == case.srun_line(), "layout_cases.py changed: re-record the truth"
    now = run_case(case, timeout=60)
    assert now["rc"] == 0, now["srun_stderr"]
    assert len(now["tasks"]) == len(recorded["tasks"])
    for got, want in zip(now["tasks"], recorded["tasks"], strict=True):
        assert layout_view(got["env"]) == layout_view(want["env"])
