"""Where each task of a job runs and the Slurm environment it sees.

Measured, not assumed: real Slurm 22.05's task environments for csrun_wse's heterogeneous srun
lines were recorded on a 4-node test cluster (15 cases, tests/launch/data/slurm_layout.json;
see docs/sources.md#slurm), and test_launch_slurm_truth.py compares this
module with every case). The rules:

* `srun A : B : C` makes a heterogeneous JOB (component k has job id base + k) but ONE step
  spanning all components: SLURM_JOB_ID is the base id in every task; SLURM_PROCID and
  SLURM_NODEID are global (components in order); SLURM_LOCALID is the task's rank among the tasks
  on its node; SLURM_NTASKS / SLURM_NNODES / SLURM_JOB_NODELIST cover the whole job;
* inside a component, block fills a node before the next (task i on node i // T), cyclic deals
  round-robin (task i on node i % N);
* a heterogeneous job adds SLURM_HET_SIZE = SLURM_PACK_SIZE and, for EVERY component k, the
  `_PACK_GROUP_<k>` copies of SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_JOB_CPUS_PER_NODE and
  SLURM_JOB_PARTITION; real Slurm sets NO SLURM_HET_JOB_ID / SLURM_HET_JOB_OFFSET in tasks, so
  neither do we (runtime/job/roles.py finds a task's component from these variables);
* SLURM_CPUS_PER_TASK is set (in every task) only when a component was given --cpus-per-task;
  SLURM_CPUS_ON_NODE = tasks on the node x cpus per task; SLURM_GTIDS = the node's task ids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from cs2sim.system.sched.hostlist import compress
from cs2sim.system.sched.request import Component, JobRequest

__all__ = ["Task", "layout", "tasks_per_node_text", "CLUSTER_NAME"]

CLUSTER_NAME = "cs2sim"
PARTITION = "cs2sim"  # the embedded cluster has one partition


@dataclass(frozen=True)
class Task:
    """One process of a job: its global id, where it runs, and its environment."""

    procid: int
    component: int
    localid: int
    node: str
    nodeid: int
    env: dict[str, str]


def _place(comp: Component, i: int) -> tuple[int, int]:
    """(node index within the component, local id on that node) of the component's i-th task."""
    if comp.cyclic:
        return i % comp.nodes, i // comp.nodes
    return i // comp.tasks_per_node, i % comp.tasks_per_node


def tasks_per_node_text(counts: list[int]) -> str:
    """SLURM_TASKS_PER_NODE's run-length form: [1, 1, 8, 8] -> "1(x2),8(x2)"."""
    out: list[str] = []
    i = 0
    while i < len(counts):
        j = i
        while j < len(counts) and counts[j] == counts[i]:
            j += 1
        out.append(f"{counts[i]}(x{j - i})" if j - i > 1 else str(counts[i]))
        i = j
    return ",".join(out)


def layout(
    request: JobRequest,
    job_id: int,
    nodes: list[list[str]],
    node_cpus: dict[str, int],
    *,
    user: str = "",
    submit_dir: str = "",
) -> list[Task]:
    """The tasks of `request` on the allocated `nodes` (one list per component), in procid order."""
    comps = request.components
    for k, (comp, part) in enumerate(zip(comps, nodes, strict=True)):
        if len(part) != comp.nodes:
            raise ValueError(f"component {k} needs {comp.nodes} nodes, got {len(part)}")
    # placement first: GTIDS and CPUS_ON_NODE need every task's node
    placed = _placement(comps, nodes)
    on_node: dict[str, list[int]] = {}
    for procid, _, _, node, _ in placed:
        on_node.setdefault(node, []).append(procid)
    common = _job_env(request, job_id, nodes, node_cpus, user, submit_dir)
    tasks: list[Task] = []
    for procid, k, nodeid, node, cpt in placed:
        mates = on_node[node]
        env = dict(common)
        env.update(
            SLURM_PROCID=str(procid),
            SLURM_LOCALID=str(mates.index(procid)),
            SLURM_NODEID=str(nodeid),
            SLURMD_NODENAME=node,
            SLURM_TOPOLOGY_ADDR=node,
            SLURM_GTIDS=",".join(map(str, sorted(mates))),
            SLURM_CPUS_ON_NODE=str(len(mates) * cpt),
        )
        tasks.append(Task(procid, k, mates.index(procid), node, nodeid, env))
    tasks.sort(key=lambda t: t.procid)
    return tasks


def _placement(
    comps: tuple[Component, ...], nodes: list[list[str]]
) -> list[tuple[int, int, int, str, int]]:
    """(procid, component, nodeid, node, cpus per task) of every task, component by component."""
    placed: list[tuple[int, int, int, str, int]] = []
    task_offset = node_offset = 0
    for k, (comp, part) in enumerate(zip(comps, nodes, strict=True)):
        for i in range(comp.ntasks):
            node_index, _ = _place(comp, i)
            placed.append(
                (
                    task_offset + i,
                    k,
                    node_offset + node_index,
                    part[node_index],
                    comp.cpus_per_task or 1,
                )
            )
        task_offset += comp.ntasks
        node_offset += comp.nodes
    return placed


def _job_env(
    request: JobRequest,
    job_id: int,
    nodes: list[list[str]],
    node_cpus: dict[str, int],
    user: str,
    submit_dir: str,
) -> dict[str, str]:
    """The SLURM_* variables every task of the job shares (a het job's per-component ones too)."""
    comps = request.components
    all_nodes = [n for part in nodes for n in part]
    nodelist = compress(all_nodes)
    given = [c.cpus_per_task for c in comps if c.cpus_per_task is not None]
    cpus_per_task = given[-1] if given else None
    comp_of = {n: c for c, part in zip(comps, nodes, strict=True) for n in part}

    def cpus_text(part: list[str]) -> str:
        """Whole nodes for an --exclusive component; only what its tasks use otherwise."""
        return tasks_per_node_text(
            [
                node_cpus.get(n, 1)
                if comp_of[n].exclusive
                else comp_of[n].tasks_per_node * (comp_of[n].cpus_per_task or 1)
                for n in part
            ]
        )

    counts = [c.tasks_per_node for c in comps for _ in range(c.nodes)]
    common = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": request.job_name,
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(all_nodes)),
        "SLURM_NNODES": str(len(all_nodes)),
        "SLURM_STEP_NUM_NODES": str(len(all_nodes)),
        "SLURM_NTASKS": str(request.ntasks),
        "SLURM_NPROCS": str(request.ntasks),
        "SLURM_STEP_NUM_TASKS": str(request.ntasks),
        "SLURM_TASKS_PER_NODE": tasks_per_node_text(counts),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node_text(counts),
        "SLURM_JOB_CPUS_PER_NODE": cpus_text(all_nodes),
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_JOB_PARTITION": PARTITION,
        "SLURM_CLUSTER_NAME": CLUSTER_NAME,
        "SLURM_JOB_USER": user,
        "SLURM_JOB_UID": str(os.getuid()),
        "SLURM_JOB_GID": str(os.getgid()),
        "SLURM_SUBMIT_DIR": submit_dir or os.getcwd(),
        "SLURM_TOPOLOGY_ADDR_PATTERN": "node",
    }
    if cpus_per_task is not None:
        common["SLURM_CPUS_PER_TASK"] = str(cpus_per_task)
    if len(comps) > 1:
        common["SLURM_HET_SIZE"] = common["SLURM_PACK_SIZE"] = str(len(comps))
        for k, part in enumerate(nodes):
            suffix = f"_PACK_GROUP_{k}"
            common["SLURM_JOB_ID" + suffix] = str(job_id + k)
            common["SLURM_JOB_NODELIST" + suffix] = compress(part)
            common["SLURM_JOB_CPUS_PER_NODE" + suffix] = cpus_text(part)
            common["SLURM_JOB_PARTITION" + suffix] = PARTITION
    return common
