"""Real Slurm's task layout for csrun_wse's srun lines still matches the recorded ground truth
(tests/slurm/ground_truth/layout.json), which the embedded scheduler is compared with."""

from __future__ import annotations

import json

import pytest
from layout_cases import CASES, LayoutCase
from layout_model import layout_view
from record_layout import DEFAULT_OUT, run_case
from slurm_helpers import Cluster

pytestmark = pytest.mark.slurm

GROUND_TRUTH = {c["case"]["name"]: c for c in json.loads(DEFAULT_OUT.read_text())["cases"]}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
@pytest.mark.slow
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
