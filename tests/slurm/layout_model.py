"""Real Slurm's task layout for csrun_wse's srun lines, as rules (see slurm-layout notes), and the
comparable "layout view" of a task's environment.

`layout_view(env)` keeps what a task learns about its place in the job; `predict(case, nodes)`
computes the same views from the flags alone. tests/slurm/test_layout_model.py checks the rules
against the recorded ground truth, so an embedded scheduler that follows them numbers and places
tasks exactly as Slurm 22.05 does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from layout_cases import LayoutCase

# Left out on purpose: run-specific values (job ids, ports, pids, directories) and what real
# Slurm sets inconsistently, from run to run, in the tasks of a component that was not given the
# option (SLURM_DISTRIBUTION, SLURM_NTASKS_PER_NODE; SLURM_CPUS_PER_TASK on a single-task node).
LAYOUT_VARS = (
    "SLURMD_NODENAME",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_NNODES",
    "SLURM_JOB_NUM_NODES",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_STEP_NODELIST",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_ID",
    "SLURM_CPUS_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_HET_SIZE",
    "SLURM_PACK_SIZE",
    "SLURM_HET_JOB_ID",
    "SLURM_HET_JOB_OFFSET",
)
View = dict[str, str | int | None]


def layout_view(env: dict[str, str]) -> View:
    """The layout part of one task's environment; component job ids relative to the base id."""
    view: View = {k: env.get(k) for k in LAYOUT_VARS}
    if len(env["SLURM_GTIDS"].split(",")) == 1:
        # Alone on its node (a single-task component): SLURM_CPUS_PER_TASK there is another
        # component's value or unset, varying between runs; SLURM_CPUS_ON_NODE tells the truth.
        view["SLURM_CPUS_PER_TASK"] = None
    base = int(env["SLURM_JOB_ID"])
    for key, value in env.items():
        if key.startswith("SLURM_JOB_ID_PACK_GROUP_"):
            view[key + " - SLURM_JOB_ID"] = int(value) - base
        elif key.startswith(("SLURM_JOB_NODELIST_PACK_GROUP_", "SLURM_JOB_CPUS_PER_NODE_PACK")):
            view[key] = value
    return view


def compress_counts(values: Sequence[int]) -> str:
    """Slurm's run-length form: [1, 1, 3, 3] -> '1(x2),3(x2)', [2] -> '2'."""
    runs: list[list[int]] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    return ",".join(f"{v}(x{n})" if n > 1 else str(v) for v, n in runs)


def compress_hosts(names: Sequence[str]) -> str:
    """Slurm's host list: ['node1', 'node2', 'node4'] -> 'node[1-2,4]', ['node3'] -> 'node3'."""
    if len(names) == 1:
        return names[0]
    parsed = [re.fullmatch(r"(.*?)(\d+)", n) for n in names]
    prefixes = {m.group(1) for m in parsed if m}
    if len(prefixes) != 1 or not all(parsed):
        return ",".join(names)
    nums = sorted(int(m.group(2)) for m in parsed if m)
    ranges: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if n is not None:
            start = prev = n
    return f"{prefixes.pop()}[{','.join(ranges)}]"


def components(case: LayoutCase) -> list[tuple[int, int, int, bool]]:
    """(nodes, tasks per node, cpus per task, --exclusive) of each heterogeneous component, in
    srun order (Model Zoo's csrun_wse, docs/sources.md: single-task components get neither
    --cpus-per-task nor a
    distribution; without single-task nodes the first component is not --exclusive)."""
    n, tpn, single = case.total_nodes, case.tasks_per_node, case.single_task_nodes
    cpt = case.cpus_per_task or 1
    if n == 1:
        return [(1, tpn, cpt, True)]
    if single:
        return [(1, 1, 1, True)] * single + [(n - single, tpn, cpt, True)]
    return [(1, tpn, cpt, False), (n - 1, tpn, cpt, True)]


def predict(case: LayoutCase, nodes: Sequence[str], cpus_per_node: int) -> list[View]:
    """Every task's layout view, in PROCID order, for `case` on a cluster with `nodes` (in
    Slurm's order) of `cpus_per_node` CPUs, all idle."""
    comps = components(case)
    used = list(nodes[: sum(c[0] for c in comps)])
    placement: list[str] = []  # PROCID -> node name
    first = 0
    cpus_on: dict[str, int] = {}  # node -> CPUs per task of the component there
    alloc: list[int] = []  # CPUs allocated per used node
    for k, (count, tpn, cpt, exclusive) in enumerate(comps):
        mine = used[first : first + count]
        cpus_on.update(dict.fromkeys(mine, cpt))
        # A non-exclusive component gets only the CPUs its tasks ask for.
        alloc += [cpus_per_node if exclusive else tpn * cpt] * count
        first += count
        # --distribution=cyclic is only on the last component of a multi-node line.
        if case.cyclic and case.total_nodes > 1 and k == len(comps) - 1:
            placement += [node for _ in range(tpn) for node in mine]
        else:
            placement += [node for node in mine for _ in range(tpn)]
    on_node = {node: [p for p, n in enumerate(placement) if n == node] for node in used}
    hets = len(comps) > 1
    common: View = {
        "SLURM_NTASKS": str(len(placement)),
        "SLURM_NPROCS": str(len(placement)),
        "SLURM_STEP_NUM_TASKS": str(len(placement)),
        "SLURM_NNODES": str(len(used)),
        "SLURM_JOB_NUM_NODES": str(len(used)),
        "SLURM_STEP_NUM_NODES": str(len(used)),
        "SLURM_JOB_NODELIST": compress_hosts(used),
        "SLURM_NODELIST": compress_hosts(used),
        "SLURM_STEP_NODELIST": compress_hosts(used),
        "SLURM_TASKS_PER_NODE": compress_counts([len(on_node[n]) for n in used]),
        "SLURM_STEP_TASKS_PER_NODE": compress_counts([len(on_node[n]) for n in used]),
        "SLURM_STEP_ID": "0",
        "SLURM_CPUS_PER_TASK": str(case.cpus_per_task) if case.cpus_per_task else None,
        "SLURM_JOB_CPUS_PER_NODE": compress_counts(alloc),
        "SLURM_HET_SIZE": str(len(comps)) if hets else None,
        "SLURM_PACK_SIZE": str(len(comps)) if hets else None,
        "SLURM_HET_JOB_ID": None,
        "SLURM_HET_JOB_OFFSET": None,  # never set in the tasks
    }
    if hets:
        first = 0
        for k, (count, *_) in enumerate(comps):
            common[f"SLURM_JOB_ID_PACK_GROUP_{k} - SLURM_JOB_ID"] = k
            common[f"SLURM_JOB_NODELIST_PACK_GROUP_{k}"] = compress_hosts(
                used[first : first + count]
            )
            common[f"SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_{k}"] = compress_counts(
                alloc[first : first + count]
            )
            first += count
    views = []
    for procid, node in enumerate(placement):
        view = dict(common)
        view.update(
            {
                "SLURMD_NODENAME": node,
                "SLURM_PROCID": str(procid),
                "SLURM_NODEID": str(used.index(node)),
                "SLURM_LOCALID": str(on_node[node].index(procid)),
                "SLURM_GTIDS": ",".join(map(str, on_node[node])),
                "SLURM_CPUS_ON_NODE": str(len(on_node[node]) * cpus_on[node]),
            }
        )
        if len(on_node[node]) == 1:
            view["SLURM_CPUS_PER_TASK"] = None  # not comparable: see layout_view
        views.append(view)
    return views
