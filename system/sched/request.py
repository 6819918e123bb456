"""What a launcher asks the scheduler for, and the `srun` command line that asks it of Slurm.

A JobRequest is a heterogeneous job: one Component per `:`-separated part of the real csrun_wse's
srun line (Model Zoo's csrun_wse, docs/sources.md). `srun_command` is the ONE function that builds
that line: csrun_wse prints it (`Launching: ...`), the embedded backend runs the request it
describes, and the Slurm backend runs exactly its argv. The text keeps the real script's spacing
(its unset variables leave double spaces), so the echo matches what the bash script prints for the
same flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cs2sim.system.store_ops import wire

__all__ = ["Component", "JobRequest", "SrunCommand", "srun_command", "cpu_command"]


@wire
@dataclass(frozen=True)
class Component:
    """One part of a heterogeneous job: N whole nodes, T tasks on each."""

    nodes: int
    tasks_per_node: int
    cpus_per_task: int | None = None  # None: no --cpus-per-task (Slurm chooses: 1 per task here)
    cyclic: bool = False  # --distribution=cyclic (default block)
    gres: str = ""  # "cs:cerebras:1": only the node wired to the CS-2 has it
    exclusive: bool = True

    @property
    def ntasks(self) -> int:
        return self.nodes * self.tasks_per_node


@wire
@dataclass(frozen=True)
class JobRequest:
    """A whole launch: its components, the command every task runs, and how to run it."""

    components: tuple[Component, ...]
    command: tuple[str, ...]  # RUN_ARGS: the same command for every task
    name: str = ""  # job name (squeue NAME); default: the command's first word
    mount_dirs: str = ""  # -B value(s) shown in the line (the embedded cluster shares one fs)
    image: str = ""  # the Singularity image named in the line (never read)
    exclude: tuple[str, ...] = ()  # nodes not to use (csrun_cpu keeps off the GRES node)
    pty: bool = False  # csrun_cpu: one interactive task on the launcher's terminal
    kill_on_bad_exit: bool = True
    env: dict[str, str] = field(default_factory=dict)  # extra environment for every task
    systems: tuple[str, ...] = ()  # CS-2 systems it reserves (its --cs_ip's and num_csx - 1 more)

    @property
    def nodes(self) -> int:
        return sum(c.nodes for c in self.components)

    @property
    def ntasks(self) -> int:
        return sum(c.ntasks for c in self.components)

    @property
    def job_name(self) -> str:
        if self.name:
            return self.name
        return self.command[0].rsplit("/", 1)[-1] if self.command else "srun"


@dataclass(frozen=True)
class SrunCommand:
    """The srun invocation: `text` as the real script echoes it, `argv` to run it."""

    text: str
    argv: tuple[str, ...]


def _mount_arg(def_mount: str, extra: str) -> str:
    # the real script: "-B ${DEF_MOUNT_DIRS} " then "-B ${EXTRA_MOUNT_DIRS}"
    arg = f"-B {def_mount} " if def_mount else ""
    return arg + (f"-B {extra}" if extra else "")


def srun_command(
    *,
    nodes: int,
    single_task_nodes: int,
    tasks_per_node: int,
    cpus_arg: str,
    gres: str,
    cyclic: bool,
    def_mount_dirs: str,
    extra_mount_dirs: str,
    image: str,
    run_args: tuple[str, ...],
) -> SrunCommand:
    """The csrun_wse srun line for these resolved settings (the three shapes of Model Zoo's
    csrun_wse, docs/sources.md).

    `cpus_arg` is "--cpus-per-task=N" or "" (Slurm chooses), as the script's CPUS_PER_TASK_ARG.
    """
    gres_arg = f"--gres={gres}" if gres else ""
    dist_arg = "--distribution=cyclic" if cyclic else ""
    mount_arg = _mount_arg(def_mount_dirs, extra_mount_dirs)
    run = " ".join(run_args)
    tail = f"singularity exec {mount_arg} {image} {run}"
    if nodes > 1 and single_task_nodes > 0:
        text = (
            "srun --unbuffered --kill-on-bad-exit --exclusive --nodes=1 --tasks-per-node=1 "
            f"{gres_arg} :"
        )
        for _ in range(2, single_task_nodes + 1):
            text += " --nodes=1 --tasks-per-node=1 --exclusive :"
        text += (
            f" --nodes={nodes - single_task_nodes} --tasks-per-node={tasks_per_node} {cpus_arg}"
            f" {dist_arg} --exclusive {tail}"
        )
    elif nodes > 1:
        text = (
            f"srun --unbuffered --kill-on-bad-exit --nodes=1 --tasks-per-node={tasks_per_node}"
            f" {cpus_arg} {gres_arg} : --nodes={nodes - 1} --tasks-per-node={tasks_per_node}"
            f" {cpus_arg} {dist_arg} --exclusive {tail}"
        )
    else:
        text = (
            f"srun --unbuffered --kill-on-bad-exit --exclusive --nodes={nodes}"
            f" --tasks-per-node={tasks_per_node} {cpus_arg} {gres_arg} {tail}"
        )
    head = text[: len(text) - len(tail)].split()
    argv = (*head, "singularity", "exec", *mount_arg.split(), image, *run_args)
    return SrunCommand(text, tuple(a for a in argv if a))


def cpu_command(
    *, alloc_node: bool, exclude_node: str, mount_dirs: str, image: str, run_args: tuple[str, ...]
) -> SrunCommand:
    """csrun_cpu's line (Model Zoo's csrun_cpu, docs/sources.md): `srun --pty --nodes=1
    [--exclude=N] --exclusive ...`, or the bare `singularity exec ...` when the node is not
    allocated. `exclude_node` is the
    whole `--exclude=...` word or ""."""
    exclude_arg = exclude_node
    run = " ".join(run_args)
    tail = f"singularity exec -B {mount_dirs} {image} {run}"
    if not alloc_node:
        return SrunCommand(tail, ("singularity", "exec", "-B", mount_dirs, image, *run_args))
    text = f"srun --pty --nodes=1 {exclude_arg} --exclusive {tail}"
    argv = (
        "srun",
        "--pty",
        "--nodes=1",
        exclude_arg,
        "--exclusive",
        "singularity",
        "exec",
        "-B",
        mount_dirs,
        image,
        *run_args,
    )
    return SrunCommand(text, tuple(a for a in argv if a))
