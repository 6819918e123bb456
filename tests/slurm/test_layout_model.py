"""The layout rules (layout_model.predict) reproduce the recorded real-Slurm ground truth for
every case, field by field. Needs no Slurm: it checks the rules an embedded scheduler must
follow."""

from __future__ import annotations

import json

import pytest
from layout_cases import CASES, LayoutCase
from layout_model import compress_counts, compress_hosts, layout_view, predict
from record_layout import DEFAULT_OUT
from slurm_helpers import expand_nodelist

GROUND_TRUTH = {c["case"]["name"]: c for c in json.loads(DEFAULT_OUT.read_text())["cases"]}
NODES = ["node1", "node2", "node3", "node4"]


def test_every_case_is_recorded() -> None:
    assert set(GROUND_TRUTH) == {c.name for c in CASES}
    for case in CASES:
        recorded = GROUND_TRUTH[case.name]
        assert recorded["rc"] == 0 and recorded["srun_line"] == case.srun_line()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_rules_reproduce_real_slurm(case: LayoutCase) -> None:
    real = [layout_view(t["env"]) for t in GROUND_TRUTH[case.name]["tasks"]]
    assert predict(case, NODES, cpus_per_node=16) == real


def test_cyclic_reorders_only_the_last_component() -> None:
    block = predict(LayoutCase("b", 4, 3, single_task_nodes=1), NODES, 16)
    cyclic = predict(LayoutCase("c", 4, 3, single_task_nodes=1, cyclic=True), NODES, 16)
    assert [v["SLURMD_NODENAME"] for v in block] == ["node1"] + ["node2"] * 3 + ["node3"] * 3 + [
        "node4"
    ] * 3
    assert [v["SLURMD_NODENAME"] for v in cyclic] == ["node1"] + ["node2", "node3", "node4"] * 3


@pytest.mark.parametrize(
    "names",
    [
        ["node1"],
        ["node1", "node2"],
        ["node1", "node3", "node4"],
        ["node2", "node3", "node4", "node7"],
    ],
)
def test_host_list_round_trip(names: list[str]) -> None:
    assert expand_nodelist(compress_hosts(names)) == names


def test_compress_counts() -> None:
    assert compress_counts([1, 1, 3, 3]) == "1(x2),3(x2)"
    assert compress_counts([1, 2, 2]) == "1,2(x2)"
    assert compress_counts([16]) == "16"
