"""Which part of a csrun_wse job this process is: `task_role(env)` from Slurm's environment only.

Every task of a csrun_wse job runs the same command (as the real scripts do); the role comes from
the variables the launcher (embedded scheduler or real Slurm) sets, never from a side channel:

  CHIEF        the first task of the first heterogeneous component (SLURM_PROCID 0): compiles,
               programs the system, runs the training loop, consumes the streamers' batches;
  COORDINATOR  the task of any other single-task component (the `--single-task-nodes` after
               the first): waits for the chief's end and exits with its outcome. When the
               job's environment has CS2SIM_WS_SERVERS=W,A (the cluster server's execute
               job, system/appliance/replicas.py), the components after the second are its W
               weight servers then its A activation servers (TaskInfo.server says which);
  STREAMER     every task of a multi-task component other than the chief itself (the input
               workers: csrun_wse's last component, or the chief's own component when there
               are no single-task nodes, as in `srun --ntasks=7`: 1 chief + 6 streamers);
  STANDALONE   no Slurm variables: a plain `python run.py`.

Numbering, as real Slurm 22.05 gives it (measured on a 4-node test cluster:
tests/streamers/slurm_layout.json, see docs/sources.md#slurm): csrun_wse's `srun A : B : C` is ONE
step over every component; SLURM_PROCID is global, components' tasks are contiguous PROCID ranges in
order, and SLURM_JOB_ID is the base id in every task. SLURM_HET_JOB_ID / SLURM_HET_JOB_OFFSET are
NOT set
by real Slurm, so the tasks per component come from, in order of preference:
  1. SLURM_NTASKS_HET_GROUP_<k> for every component (a launcher may set them);
  2. SLURM_TASKS_PER_NODE (the whole step, e.g. `1(x2),3(x2)`, in node order) and the node
     count of each component's SLURM_JOB_NODELIST_PACK_GROUP_<k> (or _HET_GROUP_<k>);
  3. else the components before the last are single-task (csrun_wse's shape with single-task
     nodes) and SLURM_NTASKS is the step's total.
SLURM_HET_JOB_OFFSET, when a launcher sets it, is only checked. Streamer ranks are 0..S-1 in
SLURM_PROCID order, so they do not depend on block or cyclic placement (cyclic changes which
node a PROCID runs on, not the PROCIDs of a component).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cs2sim.system.errors import UsageError

__all__ = ["Role", "TaskInfo", "task_role", "task_info", "rendezvous_dir"]


class Role(enum.Enum):
    """What a task of a launched job does."""

    CHIEF = "chief"
    COORDINATOR = "coordinator"
    STREAMER = "streamer"
    STANDALONE = "standalone"


@dataclass(frozen=True)
class TaskInfo:
    """This task's place in the job, as Slurm's environment describes it."""

    role: Role
    job_id: str = ""  # the base (het leader) job id: one rendezvous for every component
    procid: int = 0  # rank in the step
    component: int = 0  # heterogeneous component (SLURM_HET_JOB_OFFSET), 0 when not het
    node: str = ""  # SLURMD_NODENAME (or the host name)
    localid: int = 0  # rank on its node
    streamer_rank: int | None = None  # 0..num_streamers-1 for a STREAMER
    num_streamers: int = 0  # input-worker tasks in the job (the chief waits for these)
    num_coordinators: int = 0
    cpus_per_task: int | None = None
    group_sizes: tuple[int, ...] = ()  # tasks per component
    server: str = ""  # a COORDINATOR's replica: "coordinator", "weight" or "activation"

    @property
    def name(self) -> str:
        """How errors name this task: role, rank, Slurm task id and node."""
        who = {"weight": "weight server", "activation": "activation server"}.get(
            self.server, self.role.value
        )
        if self.streamer_rank is not None:
            who += f" {self.streamer_rank}"
        return f"{who} (task {self.procid} on node {self.node or '?'})"


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int | None:
    raw = env.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise UsageError(
            f"{key}={raw!r} is not an integer; the launcher set a broken Slurm "
            "environment (unset it to run outside a job)."
        ) from None


def _group_sizes(env: Mapping[str, str], het_size: int, ntasks: int | None) -> tuple[int, ...]:
    """Tasks per heterogeneous component (see the module docstring for the fallback)."""
    sizes = [_int(env, f"SLURM_NTASKS_HET_GROUP_{i}") for i in range(het_size)]
    known = [s for s in sizes if s is not None]
    if len(known) == het_size:
        return tuple(known)
    per_node = _expand_counts(
        env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE") or ""
    )
    lists = [
        env.get(f"SLURM_JOB_NODELIST_PACK_GROUP_{i}")
        or env.get(f"SLURM_JOB_NODELIST_HET_GROUP_{i}")
        for i in range(het_size)
    ]
    if per_node and all(lists):
        counts = [count_hosts(str(nl)) for nl in lists]
        if sum(counts) == len(per_node):
            out, at = [], 0
            for c in counts:
                out.append(sum(per_node[at : at + c]))
                at += c
            return tuple(out)
    if ntasks is None:
        raise UsageError(
            "a heterogeneous job task has neither SLURM_NTASKS_HET_GROUP_<i> nor "
            "SLURM_NTASKS; the launcher must set them."
        )
    last = ntasks - (het_size - 1)
    if last < 1:
        raise UsageError(
            f"SLURM_NTASKS={ntasks} is fewer than the {het_size} components of "
            "the heterogeneous job; the launcher set a broken environment."
        )
    return (1,) * (het_size - 1) + (last,)


def _expand_counts(text: str) -> list[int]:
    """Slurm's compressed per-node counts, `1(x2),3(x2)` -> [1, 1, 3, 3] ([] if malformed)."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        value, _, rep = part.partition("(x")
        try:
            out += [int(value)] * (int(rep.rstrip(")")) if rep else 1)
        except ValueError:
            return []
    return out


def _split_top(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, item = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(item)
            item = ""
            continue
        depth += (ch == "[") - (ch == "]")
        item += ch
    return [i for i in [*items, item] if i]


def count_hosts(nodelist: str) -> int:
    """How many hosts a Slurm hostlist names: `node[1-3,7],gpu5` -> 5."""
    total = 0
    for item in _split_top(nodelist):
        n = 1
        for group in item.split("[")[1:]:  # each bracket multiplies (a[1-2]b[1-3]: 6)
            width = 0
            for r in group.split("]")[0].split(","):
                lo, _, hi = r.partition("-")
                width += int(hi) - int(lo) + 1 if hi else 1
            n *= width
        total += n
    return total


def task_info(env: Mapping[str, str] | None = None) -> TaskInfo:
    """This task's role and numbering from Slurm's variables (os.environ by default)."""
    env = os.environ if env is None else env
    procid = _int(env, "SLURM_PROCID")
    job = env.get("SLURM_HET_JOB_ID") or env.get("SLURM_JOB_ID") or ""
    if procid is None or not job:
        return TaskInfo(Role.STANDALONE)
    node = env.get("SLURMD_NODENAME") or env.get("HOSTNAME") or os.uname().nodename
    localid = _int(env, "SLURM_LOCALID", 0) or 0
    cpus = _int(env, "SLURM_CPUS_PER_TASK")
    het_size = _int(env, "SLURM_HET_SIZE", None) or _int(env, "SLURM_PACK_SIZE", 1) or 1
    ntasks = _int(env, "SLURM_NTASKS")
    if het_size > 1:
        sizes = _group_sizes(env, het_size, ntasks)
    else:
        sizes = (ntasks if ntasks is not None else procid + 1,)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    if not 0 <= procid < sum(sizes):
        raise UsageError(
            f"SLURM_PROCID={procid} is outside the job's {sum(sizes)} tasks; the "
            "launcher set a broken environment."
        )
    component = max(i for i, s in enumerate(starts) if s <= procid)
    given = _int(env, "SLURM_HET_JOB_OFFSET")
    if het_size > 1 and given is not None and given != component:
        raise UsageError(
            f"SLURM_HET_JOB_OFFSET={given} disagrees with SLURM_PROCID={procid} "
            f"(component {component} of tasks per component {list(sizes)})."
        )

    # streamers: every task of a multi-task component, except the chief (task 0)
    streamer_ids = [
        p
        for i, (s, n) in enumerate(zip(starts, sizes, strict=True))
        if n > 1
        for p in range(s, s + n)
        if p != 0
    ]
    coordinators = sum(1 for i, n in enumerate(sizes) if n == 1 and i > 0)
    if procid == 0:
        role = Role.CHIEF
    elif procid in streamer_ids:
        role = Role.STREAMER
    else:
        role = Role.COORDINATOR
    server = _server_kind(env, component) if role is Role.COORDINATOR else ""
    return TaskInfo(
        role=role,
        server=server,
        job_id=str(job),
        procid=procid,
        component=component,
        node=node,
        localid=localid,
        streamer_rank=streamer_ids.index(procid) if role is Role.STREAMER else None,
        num_streamers=len(streamer_ids),
        num_coordinators=coordinators,
        cpus_per_task=cpus,
        group_sizes=tuple(sizes),
    )


def _server_kind(env: Mapping[str, str], component: int) -> str:
    """Which replica a single-task component after the chief's is: the coordinator (the
    first), then CS2SIM_WS_SERVERS's weight and activation servers, in that order."""
    raw = env.get("CS2SIM_WS_SERVERS") or ""
    wgt, _, act = raw.partition(",")
    if not (wgt.isdigit() and act.isdigit()):
        return "coordinator"
    first_wgt = 2
    if first_wgt <= component < first_wgt + int(wgt):
        return "weight"
    if first_wgt + int(wgt) <= component < first_wgt + int(wgt) + int(act):
        return "activation"
    return "coordinator"


def task_role(env: Mapping[str, str] | None = None) -> Role:
    """CHIEF | COORDINATOR | STREAMER | STANDALONE (see the module docstring)."""
    return task_info(env).role


def rendezvous_dir(model_dir: Path, job_id: str) -> Path:
    """Where a job's tasks meet: on the file system every node shares."""
    return Path(model_dir) / ".cs2sim" / "rendezvous" / str(job_id)
