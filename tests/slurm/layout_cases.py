"""The csrun_wse flag sets whose task layout is recorded on real Slurm, and the srun line the
real csrun_wse builds for each (Model Zoo's csrun_wse, docs/sources.md), with `singularity exec ...`
replaced by a task that records its environment (task_env.py).

Shared by record_layout.py (writes ground_truth/layout.json) and test_layout.py (re-runs the
cases and compares with the recorded ground truth).
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LayoutCase:
    """One csrun_wse invocation: --total-nodes, --tasks-per-node, --cpus-per-task,
    --single-task-nodes, --cyclic."""

    name: str
    total_nodes: int
    tasks_per_node: int
    single_task_nodes: int = 0
    cyclic: bool = False
    cpus_per_task: int | None = None

    def csrun_wse_flags(self) -> list[str]:
        flags = [f"--total-nodes={self.total_nodes}", f"--tasks-per-node={self.tasks_per_node}"]
        if self.cpus_per_task is not None:
            flags.append(f"--cpus-per-task={self.cpus_per_task}")
        if self.single_task_nodes:
            flags.append(f"--single-task-nodes={self.single_task_nodes}")
        if self.cyclic:
            flags.append("--cyclic")
        return flags

    def srun_args(self) -> list[str]:
        """srun's arguments before the command, exactly as csrun_wse composes them (no GRES on
        the test cluster, so $GRES_ARG is empty)."""
        nodes, tpn, single = self.total_nodes, self.tasks_per_node, self.single_task_nodes
        cpus = [f"--cpus-per-task={self.cpus_per_task}"] if self.cpus_per_task else []
        dist = ["--distribution=cyclic"] if self.cyclic else []
        head = ["--unbuffered", "--kill-on-bad-exit"]
        if nodes == 1:
            return [*head, "--exclusive", f"--nodes={nodes}", f"--tasks-per-node={tpn}", *cpus]
        # The single-task nodes, or else the first node, form the first component(s).
        last = [
            f"--nodes={nodes - max(single, 1)}",
            f"--tasks-per-node={tpn}",
            *cpus,
            *dist,
            "--exclusive",
        ]
        if single > 0:
            args = [*head, "--exclusive", "--nodes=1", "--tasks-per-node=1", ":"]
            for _ in range(2, single + 1):
                args += ["--nodes=1", "--tasks-per-node=1", "--exclusive", ":"]
            return args + last
        return [*head, "--nodes=1", f"--tasks-per-node={tpn}", *cpus, ":", *last]

    def srun_line(self, command: str = "<task>") -> str:
        """The whole srun line as a shell would show it, with `command` as the task."""
        return shlex.join(["srun", *self.srun_args(), command])

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


# Total nodes are at most 4 (the test cluster's size).
CASES: list[LayoutCase] = [
    LayoutCase("n1_t2", 1, 2),
    LayoutCase("n1_t2_cyclic", 1, 2, cyclic=True),
    LayoutCase("n2_s0_t2", 2, 2),
    LayoutCase("n2_s0_t2_cyclic", 2, 2, cyclic=True),
    LayoutCase("n3_s0_t2", 3, 2),
    LayoutCase("n3_s0_t2_cyclic", 3, 2, cyclic=True),
    LayoutCase("n2_s1_t3", 2, 3, single_task_nodes=1),
    LayoutCase("n3_s1_t2", 3, 2, single_task_nodes=1),
    LayoutCase("n3_s1_t2_cyclic", 3, 2, single_task_nodes=1, cyclic=True),
    LayoutCase("n3_s1_t2_c4", 3, 2, single_task_nodes=1, cpus_per_task=4),
    LayoutCase("n4_s1_t3", 4, 3, single_task_nodes=1),
    LayoutCase("n4_s1_t3_cyclic", 4, 3, single_task_nodes=1, cyclic=True),
    LayoutCase("n4_s2_t3", 4, 3, single_task_nodes=2),
    LayoutCase("n4_s2_t3_cyclic", 4, 3, single_task_nodes=2, cyclic=True),
    LayoutCase("n4_s0_t2_c8_cyclic", 4, 2, cyclic=True, cpus_per_task=8),
]
