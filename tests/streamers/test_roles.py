"""runtime/job/roles.py: a task's role from Slurm's variables alone (block, cyclic, het layouts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cs2sim.runtime.job.roles import Role, rendezvous_dir, task_info, task_role
from cs2sim.system.errors import UsageError
from streamers.conftest import slurm_env


def roles(sizes: tuple[int, ...], **kw) -> list[Role]:
    return [task_role(slurm_env("100", p, sizes, **kw)) for p in range(sum(sizes))]


def test_no_slurm_environment_is_standalone():
    assert task_role({}) is Role.STANDALONE
    assert task_role({"SLURM_JOB_ID": "7"}) is Role.STANDALONE  # an salloc shell, not a task
    assert task_info({}).num_streamers == 0


def test_the_quickstarts_layout_two_single_task_nodes_then_workers():
    # csrun_wse --total-nodes 14 --tasks-per-node 8 --single-task-nodes 2: [1, 1, 12*8]
    sizes = (1, 1, 96)
    got = roles(sizes)
    assert got[0] is Role.CHIEF
    assert got[1] is Role.COORDINATOR
    assert got[2:] == [Role.STREAMER] * 96
    infos = [task_info(slurm_env("100", p, sizes)) for p in range(98)]
    assert [i.streamer_rank for i in infos[2:]] == list(range(96))
    assert {i.num_streamers for i in infos} == {96}
    assert {i.job_id for i in infos} == {"100"}  # the het leader's id: one rendezvous
    assert infos[5].component == 2 and infos[1].component == 1


@pytest.mark.parametrize("nodes_of", ["block", "cyclic"])
def test_block_and_cyclic_move_tasks_between_nodes_not_ranks(nodes_of):
    # 3 worker nodes x 4 tasks; block: procid 2..5 on node 0; cyclic: round-robin over nodes
    sizes = (1, 1, 12)
    infos = []
    for p in range(14):
        k = p - 2
        node = "chief" if p < 2 else f"w{k // 4 if nodes_of == 'block' else k % 3}"
        infos.append(task_info(slurm_env("9", p, sizes, node=node)))
    assert [i.streamer_rank for i in infos[2:]] == list(range(12))
    assert infos[2].node == "w0" and infos[3].node == ("w0" if nodes_of == "block" else "w1")
    assert "task 3 on node" in infos[3].name and infos[3].name.startswith("streamer 1 ")


def test_no_single_task_nodes_chief_shares_its_component_with_streamers():
    # csrun_wse --total-nodes 3 --tasks-per-node 4 (no single-task nodes): [4, 8]
    got = roles((4, 8))
    assert got[0] is Role.CHIEF and got[1:] == [Role.STREAMER] * 11
    assert task_info(slurm_env("1", 1, (4, 8))).streamer_rank == 0


def test_plain_srun_ntasks_7_is_one_chief_and_six_streamers():
    # the PSC Neocortex transcript (docs/sources.md): --ntasks=7 -> "Waiting for 6 streamer(s)"
    got = roles((7,))
    assert got == [Role.CHIEF] + [Role.STREAMER] * 6
    assert task_info(slurm_env("5", 0, (7,))).num_streamers == 6


def test_csrun_cpu_single_task_is_a_chief_without_streamers():
    info = task_info(slurm_env("5", 0, (1,)))
    assert info.role is Role.CHIEF and info.num_streamers == 0 and info.num_coordinators == 0


def test_without_per_component_counts_the_csrun_wse_shape_is_assumed():
    sizes = (1, 1, 1, 6)
    got = [task_role(slurm_env("3", p, sizes, with_groups=False)) for p in range(9)]
    assert got == [Role.CHIEF, Role.COORDINATOR, Role.COORDINATOR] + [Role.STREAMER] * 6


def test_broken_environments_are_one_sentence_usage_errors():
    env = slurm_env("3", 2, (1, 1, 4))
    with pytest.raises(UsageError, match="SLURM_PROCID='x' is not an integer"):
        task_info({**env, "SLURM_PROCID": "x"})
    with pytest.raises(UsageError, match="outside the job's 6 tasks"):
        task_info({**env, "SLURM_PROCID": "6"})
    with pytest.raises(UsageError, match="SLURM_HET_JOB_OFFSET=0 disagrees"):
        task_info({**env, "SLURM_HET_JOB_OFFSET": "0"})


def test_rendezvous_dir_is_under_model_dir(tmp_path):
    assert rendezvous_dir(tmp_path, "77") == tmp_path / ".cs2sim" / "rendezvous" / "77"


# -- real Slurm 22.05's environments (recorded on a 4-node test cluster, docs/sources.md)
LAYOUT = json.loads((Path(__file__).with_name("slurm_layout.json")).read_text())["cases"]


def _expected_sizes(case: dict) -> list[int]:
    n, s, t = case["total_nodes"], case["single_task_nodes"], case["tasks_per_node"]
    if n == 1:
        return [t]
    if s == 0:
        return [t, (n - 1) * t]
    return [1] * s + [(n - s) * t]


@pytest.mark.parametrize("case", LAYOUT, ids=[c["case"]["name"] for c in LAYOUT])
def test_roles_from_real_slurm_environments(case):
    sizes = _expected_sizes(case["case"])
    envs = [t["env"] for t in case["tasks"]]
    assert not any("SLURM_HET_JOB_OFFSET" in e for e in envs)  # real Slurm never sets it
    infos = sorted((task_info(e) for e in envs), key=lambda i: i.procid)
    assert [i.procid for i in infos] == list(range(sum(sizes)))
    assert {i.group_sizes for i in infos} == {tuple(sizes)}
    assert infos[0].role is Role.CHIEF
    streamers = [i for i in infos if i.role is Role.STREAMER]
    assert [i.streamer_rank for i in streamers] == list(range(len(streamers)))
    assert len(streamers) == sum(n for n in sizes if n > 1) - (1 if sizes[0] > 1 else 0)
    coords = [i for i in infos if i.role is Role.COORDINATOR]
    assert len(coords) == max(0, case["case"]["single_task_nodes"] - 1)
    assert {i.num_streamers for i in infos} == {len(streamers)}
    assert len({i.job_id for i in infos}) == 1  # one rendezvous for the whole job
    for i in infos:  # names carry the real node
        assert i.node.startswith("node")
