"""Where each task of a job runs and the Slurm environment it sees.

Numbering follows Slurm for a heterogeneous step launched by one `srun A : B : C` (REFERENCE
§2.3, SLURM-NOTES §9, slurm.schedmd.com/heterogeneous_jobs.html):

* task ids are global and do not overlap: component k's tasks follow those of components < k
  (the docs' `srun --label -n2 : -n1 hostname` prints tasks 0, 1 on the first node, 2 on the
  next); node ids are likewise global across the step;
* inside a component, block distribution fills a node before the next (task i on node i // T,
  local id i % T), cyclic deals tasks round-robin (task i on node i % N, local id i // N);
  SLURM-NOTES §3 shows both for `-N2 --ntasks-per-node=2`;
* a heterogeneous job (more than one component) also gets SLURM_HET_JOB_ID (the leader's id),
  SLURM_HET_JOB_OFFSET (the component), SLURM_HET_SIZE and the per-component
  `<VAR>_HET_GROUP_<k>` copies; a one-component job gets none of them.

`ENV_RULES` below is the one place these choices live; tests/launch checks them and the Slurm
integration tests compare them with real Slurm (/work/notes/slurm-layout.json).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from system.sched.hostlist import compress
from system.sched.request import Component, JobRequest

__all__ = ["Task", "layout", "tasks_per_node_text", "CLUSTER_NAME"]

CLUSTER_NAME = "cs2sim"


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
    het = len(comps) > 1
    all_nodes = [n for part in nodes for n in part]
    common = {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOBID": str(job_id),
        "SLURM_JOB_NAME": request.job_name,
        "SLURM_JOB_NODELIST": compress(all_nodes),
        "SLURM_NODELIST": compress(all_nodes),
        "SLURM_JOB_NUM_NODES": str(len(all_nodes)),
        "SLURM_NNODES": str(len(all_nodes)),
        "SLURM_NTASKS": str(request.ntasks),
        "SLURM_NPROCS": str(request.ntasks),
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NODELIST": compress(all_nodes),
        "SLURM_STEP_NUM_NODES": str(len(all_nodes)),
        "SLURM_STEP_NUM_TASKS": str(request.ntasks),
        "SLURM_CLUSTER_NAME": CLUSTER_NAME,
        "SLURM_JOB_USER": user,
        "SLURM_SUBMIT_DIR": submit_dir or os.getcwd(),
        "SLURM_UNBUFFEREDIO": "1",
    }
    if het:
        common["SLURM_HET_JOB_ID"] = str(job_id)
        common["SLURM_HET_SIZE"] = str(len(comps))
        for k, (comp, part) in enumerate(zip(comps, nodes, strict=True)):
            suffix = f"_HET_GROUP_{k}"
            common["SLURM_JOB_ID" + suffix] = str(job_id + k)
            common["SLURM_JOB_NODELIST" + suffix] = compress(part)
            common["SLURM_JOB_NUM_NODES" + suffix] = str(len(part))
            common["SLURM_NTASKS" + suffix] = str(comp.ntasks)
            common["SLURM_TASKS_PER_NODE" + suffix] = tasks_per_node_text(
                [comp.tasks_per_node] * comp.nodes
            )
            if comp.cpus_per_task is not None:
                common["SLURM_CPUS_PER_TASK" + suffix] = str(comp.cpus_per_task)
    counts = [c.tasks_per_node for c in comps for _ in range(c.nodes)]
    common["SLURM_TASKS_PER_NODE"] = tasks_per_node_text(counts)
    common["SLURM_STEP_TASKS_PER_NODE"] = common["SLURM_TASKS_PER_NODE"]
    tasks: list[Task] = []
    task_offset = node_offset = 0
    for k, (comp, part) in enumerate(zip(comps, nodes, strict=True)):
        if len(part) != comp.nodes:
            raise ValueError(f"component {k} needs {comp.nodes} nodes, got {len(part)}")
        for i in range(comp.ntasks):
            node_index, localid = _place(comp, i)
            node = part[node_index]
            env = dict(common)
            env.update(
                SLURM_PROCID=str(task_offset + i),
                SLURM_LOCALID=str(localid),
                SLURM_NODEID=str(node_offset + node_index),
                SLURMD_NODENAME=node,
                SLURM_TOPOLOGY_ADDR=node,
                SLURM_CPUS_ON_NODE=str(node_cpus.get(node, 1)),
                SLURM_DISTRIBUTION="cyclic" if comp.cyclic else "block",
            )
            if comp.cpus_per_task is not None:  # Slurm sets it only when it was asked for
                env["SLURM_CPUS_PER_TASK"] = str(comp.cpus_per_task)
            if het:
                env["SLURM_HET_JOB_OFFSET"] = str(k)
            tasks.append(Task(task_offset + i, k, localid, node, node_offset + node_index, env))
        task_offset += comp.ntasks
        node_offset += comp.nodes
    return tasks
