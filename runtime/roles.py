"""Which part of a csrun_wse job this process is: `task_role(env)` from Slurm's environment only.

Every task of a csrun_wse job runs the same command (as the real scripts do); the role comes from
the variables the launcher (embedded scheduler or real Slurm) sets, never from a side channel:

  CHIEF        the first task of the first heterogeneous component (SLURM_PROCID 0): compiles,
               programs the system, runs the training loop, consumes the streamers' batches;
  COORDINATOR  the task of any other single-task component (the `--single-task-nodes` after
               the first): waits for the chief's end and exits with its outcome;
  STREAMER     every task of a multi-task component other than the chief itself (the input
               workers: csrun_wse's last component, or the chief's own component when there
               are no single-task nodes, as in `srun --ntasks=7`: 1 chief + 6 streamers);
  STANDALONE   no Slurm variables: a plain `python run.py` (today's behaviour).

Numbering (heterogeneous steps): SLURM_PROCID is the task's rank in the whole step, counted
across components in order, as in one MPI_COMM_WORLD; SLURM_HET_JOB_OFFSET is the component;
SLURM_NTASKS_HET_GROUP_<i> the tasks of component i. Where the per-component counts are missing,
the components before the last are taken as single-task (csrun_wse's layout with single-task
nodes) and SLURM_NTASKS as the step's total. Streamer ranks are 0..S-1 in SLURM_PROCID order,
so they do not depend on block or cyclic placement (which moves tasks between nodes, not ranks).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from system.errors import UsageError

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

    @property
    def name(self) -> str:
        """How errors name this task: role, rank, Slurm task id and node."""
        who = self.role.value
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
        raise UsageError(f"{key}={raw!r} is not an integer; the launcher set a broken Slurm "
                         "environment (unset it to run outside a job).") from None


def _group_sizes(env: Mapping[str, str], het_size: int, ntasks: int | None) -> tuple[int, ...]:
    """Tasks per heterogeneous component (see the module docstring for the fallback)."""
    sizes = [_int(env, f"SLURM_NTASKS_HET_GROUP_{i}") for i in range(het_size)]
    if all(s is not None for s in sizes):
        return tuple(int(s) for s in sizes)  # type: ignore[arg-type]
    if ntasks is None:
        raise UsageError("a heterogeneous job task has neither SLURM_NTASKS_HET_GROUP_<i> nor "
                         "SLURM_NTASKS; the launcher must set them.")
    last = ntasks - (het_size - 1)
    if last < 1:
        raise UsageError(f"SLURM_NTASKS={ntasks} is fewer than the {het_size} components of "
                         "the heterogeneous job; the launcher set a broken environment.")
    return (1,) * (het_size - 1) + (last,)


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
    het_size = _int(env, "SLURM_HET_SIZE", 1) or 1
    ntasks = _int(env, "SLURM_NTASKS")
    if het_size > 1:
        sizes = _group_sizes(env, het_size, ntasks)
    else:
        sizes = (ntasks if ntasks is not None else procid + 1,)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    if not 0 <= procid < sum(sizes):
        raise UsageError(f"SLURM_PROCID={procid} is outside the job's {sum(sizes)} tasks; the "
                         "launcher set a broken environment.")
    component = max(i for i, s in enumerate(starts) if s <= procid)
    given = _int(env, "SLURM_HET_JOB_OFFSET")
    if het_size > 1 and given is not None and given != component:
        raise UsageError(f"SLURM_HET_JOB_OFFSET={given} disagrees with SLURM_PROCID={procid} "
                         f"(component {component} of tasks per component {list(sizes)}).")

    # streamers: every task of a multi-task component, except the chief (task 0)
    streamer_ids = [p for i, (s, n) in enumerate(zip(starts, sizes)) if n > 1
                    for p in range(s, s + n) if p != 0]
    coordinators = sum(1 for i, n in enumerate(sizes) if n == 1 and i > 0)
    if procid == 0:
        role = Role.CHIEF
    elif procid in streamer_ids:
        role = Role.STREAMER
    else:
        role = Role.COORDINATOR
    return TaskInfo(
        role=role, job_id=str(job), procid=procid, component=component, node=node,
        localid=localid,
        streamer_rank=streamer_ids.index(procid) if role is Role.STREAMER else None,
        num_streamers=len(streamer_ids), num_coordinators=coordinators,
        cpus_per_task=cpus, group_sizes=tuple(sizes),
    )


def task_role(env: Mapping[str, str] | None = None) -> Role:
    """CHIEF | COORDINATOR | STREAMER | STANDALONE (see the module docstring)."""
    return task_info(env).role


def rendezvous_dir(model_dir: Path, job_id: str) -> Path:
    """Where a job's tasks meet (CONTRACTS.md): on the file system every node shares."""
    return Path(model_dir) / ".cs2sim" / "rendezvous" / str(job_id)
