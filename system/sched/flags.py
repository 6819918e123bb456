"""The csrun_wse and csrun_cpu command lines, as the real bash scripts parse them (Model Zoo
R_1.7.1's user_scripts/, docs/sources.md).

The parse is a loop over the words like the scripts' `while :; case $1 in ...`: both spellings
(`--flag value`, `--flag=value`), `--` skipped, any other `-x` warned about and ignored
(`WARN: Unknown option (ignored): -x`), the first other word starts the command. Texts are the
scripts'; where a script would misbehave we say so in its own voice:

* a non-integer or non-positive count gets the script's "requires a non-empty integer argument"
  (bash would fail later with an arithmetic error);
* an empty command and python-ws with fewer than 2 single-task nodes are refused (ours).

Nothing here prints: `WseLaunch.messages` holds (stream, line) pairs the script prints in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cs2sim.system.cluster import SiteSpec
from cs2sim.system.errors import UsageError
from cs2sim.system.sched.pycmd import flow_of
from cs2sim.system.sched.request import (
    Component,
    JobRequest,
    SrunCommand,
    cpu_command,
    srun_command,
)

__all__ = [
    "LaunchError",
    "WseLaunch",
    "CpuLaunch",
    "parse_wse",
    "parse_cpu",
    "wse_help",
    "cpu_help",
    "WSE_USAGE",
    "CPU_USAGE",
    "cs_ip_of",
    "num_csx_of",
    "with_systems",
]

WSE_USAGE = (
    "Usage: csrun_wse [--help] [--mount-dirs] [--total-nodes] [--tasks-per-node] "
    "[--cpus-per-task] [--single-task-nodes] [--cyclic] command_for_cs_execution"
)
CPU_USAGE = "Usage: csrun_cpu [--help] [--alloc-node] [--mount-dirs] command_to_execute"
# the chief and at least one coordinator (the Weight Streaming Quickstart's command)
MIN_WS_SINGLE_TASK_NODES = 2
# csrun_cpu unsets these "within the singularity container scope" (Model Zoo's csrun_cpu,
# docs/sources.md)
UNSET_VARS = (
    "PYTHONPATH",
    "GITTOP",
    "LLVM_TOP",
    "LLVM_MLIR_PATH",
    "LD_LIBRARY_PATH",
    "CBCORE",
    "CEREBRAS_INCLUDE_PATH",
    "CEREBRAS_ANGLER_SHARE_PATH",
)


class LaunchError(UsageError):
    """A command-line error the real script reports with `die` (its text, exit 1)."""

    exit_code = 1


@dataclass
class WseLaunch:
    """A parsed and resolved csrun_wse command line."""

    help: bool = False
    dry_run: bool = False
    nodes: int = 0
    single_task_nodes: int = 0
    tasks_per_node: int = 0
    cpus_per_task: int | None = None
    cyclic: bool = False
    extra_mount_dirs: str = ""
    run_args: tuple[str, ...] = ()
    messages: list[tuple[str, str]] = field(default_factory=list)  # ("out"|"err", line)
    srun: SrunCommand | None = None
    request: JobRequest | None = None


@dataclass
class CpuLaunch:
    """A parsed csrun_cpu command line."""

    help: bool = False
    query: str | None = None  # the value a --def_* query prints
    alloc_node: bool = True
    logging: bool = True
    exclude_gres: bool = True
    extra_mount_dirs: str = ""
    run_args: tuple[str, ...] = ()
    messages: list[tuple[str, str]] = field(default_factory=list)
    srun: SrunCommand | None = None
    request: JobRequest | None = None
    unset: tuple[str, ...] = ()


def _value(args: list[str], i: int, flag: str, error: str) -> tuple[str, int]:
    """The value of `flag` at args[i]: `--flag=v` or `--flag v` (non-empty); (value, next i)."""
    word = args[i]
    if word.startswith(flag + "="):
        return word[len(flag) + 1 :], i + 1
    if i + 1 < len(args) and args[i + 1]:
        return args[i + 1], i + 2
    raise LaunchError(error)


def _int_arg(flag: str, text: str, minimum: int) -> int:
    error = f'ERROR: "{flag}" requires a non-empty integer argument'
    try:
        value = int(text, 10)
    except ValueError:
        raise LaunchError(error) from None
    if value < minimum:
        raise LaunchError(error)
    return value


WSE_INT_FLAGS = {
    "--total-nodes": 1,
    "--tasks-per-node": 1,
    "--cpus-per-task": 1,
    "--single-task-nodes": 0,
}


def max_workers_per_node(cpus_per_task: int, worker_cpus: list[int]) -> int:
    """How many tasks of `cpus_per_task` cpus fit the smallest worker node (the real script asks
    /cbcore/src/tf/tools/utils.py get_max_workers_per_node, which is unpublished)."""
    return min(worker_cpus, default=0) // max(1, cpus_per_task)


def _skip_or_start(argv: list[str], i: int, out: WseLaunch | CpuLaunch) -> int:
    """What both scripts do with any other word: skip `--`, warn about an unknown option and
    ignore it, or start the command there (`RUN_ARGS=$@`); -1 when the command started."""
    word = argv[i]
    if word == "--":
        return i + 1
    if word.startswith("-") and len(word) > 1:
        out.messages.append(("err", f"WARN: Unknown option (ignored): {word}"))
        return i + 1
    out.run_args = tuple(argv[i:])
    return -1


def parse_wse(
    argv: list[str],
    site: SiteSpec,
    worker_cpus: list[int],
    messages: list[tuple[str, str]] | None = None,
) -> WseLaunch:
    """Parse and resolve csrun_wse's arguments against the site defaults; LaunchError on `die`
    (the lines collected in `messages` before it are still to be printed)."""
    out = WseLaunch(messages=messages if messages is not None else [])
    user = _read_wse_words(argv, out)
    if out.help:
        return out
    out.nodes = user.get("--total-nodes", site.def_nodes)
    out.single_task_nodes = user.get("--single-task-nodes", 0)
    if out.single_task_nodes >= out.nodes:
        raise LaunchError(
            f"ERROR: ''--single-task-nodes'' ({out.single_task_nodes}) must be less than the "
            f"number of nodes ({out.nodes})"
        )
    _resolve_tasks_and_cpus(
        out, user.get("--tasks-per-node"), user.get("--cpus-per-task"), site, worker_cpus
    )
    _check_command(out)
    cpus_arg = f"--cpus-per-task={out.cpus_per_task}" if out.cpus_per_task is not None else ""
    out.srun = srun_command(
        nodes=out.nodes,
        single_task_nodes=out.single_task_nodes,
        tasks_per_node=out.tasks_per_node,
        cpus_arg=cpus_arg,
        gres=site.gres_resource,
        cyclic=out.cyclic,
        def_mount_dirs=site.mount_dirs,
        extra_mount_dirs=out.extra_mount_dirs,
        image=site.singularity_image,
        run_args=out.run_args,
    )
    out.request = JobRequest(
        components=wse_components(out, site.gres_resource),
        command=out.run_args,
        mount_dirs=",".join(d for d in (site.mount_dirs, out.extra_mount_dirs) if d),
        image=site.singularity_image,
    )
    return out


def _read_wse_words(argv: list[str], out: WseLaunch) -> dict[str, int]:
    """csrun_wse's own words, up to the command it runs (left in `out.run_args`): the integer
    flags the user gave, by name; the switches set on `out`."""
    user: dict[str, int] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word in ("-h", "-?", "--help"):
            out.help = True
            return user
        name = word.split("=", 1)[0]
        if name in WSE_INT_FLAGS:
            text, i = _value(
                argv, i, name, f'ERROR: "{name}" requires a non-empty integer argument'
            )
            user[name] = _int_arg(name, text, WSE_INT_FLAGS[name])
        elif word == "--cyclic":
            out.cyclic = True
            i += 1
        elif name == "--mount-dirs":
            out.extra_mount_dirs, i = _value(
                argv,
                i,
                name,
                'ERROR: "--mount-dirs" requires a non-empty argument (directories to mount)',
            )
        elif word == "--dry-run":  # ours: print the srun line and the layout, run nothing
            out.dry_run = True
            i += 1
        else:
            i = _skip_or_start(argv, i, out)
            if i < 0:
                break
    return user


def _resolve_tasks_and_cpus(
    out: WseLaunch,
    tasks: int | None,
    cpus: int | None,
    site: SiteSpec,
    worker_cpus: list[int],
) -> None:
    """--tasks-per-node and --cpus-per-task as the real script settles them: the site's
    defaults, the default cpus when they fit the tasks asked (else Slurm's choice), or as many
    tasks as the cpus asked allow; its INFO lines in `out.messages`."""
    say = out.messages.append
    if tasks is None and cpus is None:
        out.tasks_per_node, out.cpus_per_task = site.def_tasks_per_node, site.def_cpus_per_task
    elif cpus is None:
        assert tasks is not None
        out.tasks_per_node = tasks
        say(("out", "INFO: --tasks-per-node specified but --cpus-per-task is not specified"))
        say(("out", "    Will first attempt to use default value for cpus-per-task."))
        say(("out", "    If incompatible, will let Slurm resolve this."))
        if tasks <= max_workers_per_node(site.def_cpus_per_task, worker_cpus):
            say(("out", "    Using default value for cpus_per_task"))
            out.cpus_per_task = site.def_cpus_per_task
        else:
            say(
                (
                    "out",
                    "    Slurm will choose value for cpus-per-task as default value is not "
                    "compatible with given value of tasks-per-node.",
                )
            )
            out.cpus_per_task = None
    elif tasks is None:
        say(("out", "INFO: cpus_per_task specified but tasks-per-node is not specified"))
        say(("out", "    Attempting to determine the maximum number of tasks possible"))
        out.tasks_per_node = max_workers_per_node(cpus, worker_cpus)
        out.cpus_per_task = cpus
        if out.tasks_per_node < 1:
            raise LaunchError(
                f"ERROR: no worker node has {cpus} cpus for one task (the largest has "
                f"{max(worker_cpus, default=0)}); lower --cpus-per-task."
            )
    else:
        out.tasks_per_node, out.cpus_per_task = tasks, cpus


def _check_command(out: WseLaunch) -> None:
    """A command is given, and a weight-streaming one has its chief's and coordinator's nodes."""
    if not out.run_args:
        raise LaunchError(
            "ERROR: no command given; csrun_wse runs one, e.g. "
            "`csrun_wse python run.py --mode=train --cs_ip=<CS IP>`."
        )
    if flow_of(out.run_args[0]) == "ws" and out.single_task_nodes < MIN_WS_SINGLE_TASK_NODES:
        raise LaunchError(
            f"ERROR: python-ws (weight streaming) needs at least {MIN_WS_SINGLE_TASK_NODES} "
            f"single-task nodes (the chief and a coordinator), got {out.single_task_nodes}; add "
            f"--single-task-nodes={MIN_WS_SINGLE_TASK_NODES} and at least "
            f"{MIN_WS_SINGLE_TASK_NODES + 1} --total-nodes."
        )


def wse_components(launch: WseLaunch, gres: str) -> tuple[Component, ...]:
    """The heterogeneous job the srun line describes (same three shapes)."""
    nodes, single, tasks, cpus = (
        launch.nodes,
        launch.single_task_nodes,
        launch.tasks_per_node,
        launch.cpus_per_task,
    )
    if nodes > 1 and single > 0:
        first = (Component(1, 1, None, False, gres),)
        middle = tuple(Component(1, 1) for _ in range(2, single + 1))
        return (*first, *middle, Component(nodes - single, tasks, cpus, launch.cyclic))
    if nodes > 1:
        # the real line has no --exclusive on its first part: Slurm gives it only the cpus its
        # tasks need (SLURM_JOB_CPUS_PER_NODE shows it); the embedded scheduler still keeps the
        # node whole
        return (
            Component(1, tasks, cpus, False, gres, exclusive=False),
            Component(nodes - 1, tasks, cpus, launch.cyclic),
        )
    return (Component(nodes, tasks, cpus, False, gres),)


def _bool_word(text: str) -> bool:
    return text.lower() == "true"  # the script lower-cases and compares with "true"


CPU_QUERIES = {
    "--def_nodes": "def_nodes",
    "--def_tasks": "def_tasks_per_node",
    "--def_cpus": "def_cpus_per_task",
    "--singularity": "singularity_image",
    "--def_mount_dirs": "mount_dirs",
    "--def_gres": "gres_resource",
    "--def_gres_node": "gres_node",
}
_CPU_VALUE_FLAGS = {
    "--alloc-node": 'ERROR: "--alloc-node" requires a non-empty argument ("True"/"False")',
    "--mount-dirs": 'ERROR: "--mount-dirs" requires a non-empty argument (directories to mount)',
    "--logging": 'ERROR: "--logging" requires a non-empty argument ("True"/"False")',
    # the real script's copy-paste: --exclude_gres's error names --alloc-node
    "--exclude_gres": 'ERROR: "--alloc-node" requires a non-empty argument ("True"/"False")',
}


def parse_cpu(
    argv: list[str],
    site: SiteSpec,
    environ: dict[str, str],
    messages: list[tuple[str, str]] | None = None,
) -> CpuLaunch:
    """Parse csrun_cpu's arguments (Model Zoo's csrun_cpu, docs/sources.md)."""
    out = CpuLaunch(messages=messages if messages is not None else [])
    values: dict[str, str] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        name = word.split("=", 1)[0]
        if word in ("-h", "-?", "--help"):
            out.help = True
            return out
        if name in _CPU_VALUE_FLAGS:
            values[name], i = _value(argv, i, name, _CPU_VALUE_FLAGS[name])
        elif word in CPU_QUERIES:
            out.query = str(getattr(site, CPU_QUERIES[word]))
            return out
        else:
            i = _skip_or_start(argv, i, out)
            if i < 0:
                break
    out.alloc_node = _bool_word(values.get("--alloc-node", "True"))
    out.logging = _bool_word(values.get("--logging", "True"))
    out.exclude_gres = _bool_word(values.get("--exclude_gres", "True"))
    out.extra_mount_dirs = values.get("--mount-dirs", "")
    out.unset = tuple(v for v in UNSET_VARS if environ.get(v))
    for var in out.unset:
        out.messages.append(("out", f"Unsetting {var} within the singularity container scope"))
    if not out.run_args:
        raise LaunchError(
            "ERROR: no command given; csrun_cpu runs one, e.g. "
            "`csrun_cpu python run.py --mode=compile_only`."
        )
    mount = f"{site.mount_dirs},{out.extra_mount_dirs}"
    out.srun = cpu_command(
        alloc_node=out.alloc_node,
        exclude_node=f"--exclude={site.gres_node}" if out.exclude_gres else "",
        mount_dirs=mount,
        image=site.singularity_image,
        run_args=out.run_args,
    )
    out.request = JobRequest(
        components=(Component(1, 1),),
        command=out.run_args,
        mount_dirs=mount,
        image=site.singularity_image,
        exclude=tuple(n for n in site.gres_node.split(",") if n) if out.exclude_gres else (),
        pty=True,
    )
    return out


def cs_ip_of(run_args: tuple[str, ...]) -> str | None:
    """The `--cs_ip` value of a run.py command line (`--cs_ip X` or `--cs_ip=X`), if any."""
    for i, word in enumerate(run_args):
        if word.startswith("--cs_ip="):
            return word.split("=", 1)[1]
        if word == "--cs_ip" and i + 1 < len(run_args):
            return run_args[i + 1]
    return None


def _flag_value(run_args: tuple[str, ...], *names: str) -> str | None:
    """The value of the first of `names` in a command line (`--x V` or `--x=V`), if any."""
    for i, word in enumerate(run_args):
        for name in names:
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
            if word == name and i + 1 < len(run_args):
                return run_args[i + 1]
    return None


def num_csx_of(run_args: tuple[str, ...]) -> int:
    """How many CS-2 systems a run.py command line asks for: its `--num_csx`, else its params
    file's runconfig.num_csx (`-p`/`--params`, relative to the current directory), else 1. A
    value run.py would refuse counts as 1 here: run.py then says what is wrong with it."""
    text = _flag_value(run_args, "--num_csx")
    if text is None:
        path = _flag_value(run_args, "-p", "--params")
        if path is None:
            return 1
        from cs2sim.system.errors import ConfigError
        from cs2sim.system.yamlsafe import DEFAULT_LIMITS, load_yaml

        try:
            with open(path, "rb") as f:
                data = load_yaml(f.read(DEFAULT_LIMITS.max_bytes + 1), f"params file {path}")
        except (OSError, ConfigError):
            return 1
        runconfig = data.get("runconfig") if isinstance(data, dict) else None
        value = runconfig.get("num_csx") if isinstance(runconfig, dict) else None
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else None
    return (
        int(text) if text is not None and text.isascii() and text.isdigit() and int(text) > 0 else 1
    )


def with_systems(launch: WseLaunch, systems: tuple[str, ...], site: SiteSpec) -> WseLaunch:
    """The launch reserving these CS-2 systems: the request holds them (the embedded scheduler
    starts it when all are free) and, when the site maps systems to Slurm licenses
    (`site.system_licenses`), the srun line's first component asks for one license per
    system (`--licenses=cs2-1:1,cs2-2:1`)."""
    import dataclasses

    assert launch.request is not None and launch.srun is not None
    request = dataclasses.replace(launch.request, systems=tuple(systems))
    srun = launch.srun
    if site.system_licenses and systems:
        srun = license_line(srun, systems)
    return dataclasses.replace(launch, request=request, srun=srun)


def license_line(srun: SrunCommand, systems: tuple[str, ...]) -> SrunCommand:
    """The srun line with `--licenses=<system>:1,...` after `srun` (Slurm takes it for the
    first component of a heterogeneous job, the chief's): one Slurm license per CS-2 system."""
    flag = "--licenses=" + ",".join(f"{name}:1" for name in systems)
    text = srun.text.replace("srun ", f"srun {flag} ", 1)
    argv = (srun.argv[0], flag, *srun.argv[1:])
    return SrunCommand(text, argv)


# csrun_wse --help's arguments and examples (no site defaults in them)
_WSE_ARGUMENT_LINES = (
    "Arguments:",
    "    command_for_cs_execution     A Python command to initiate a task (train, eval, etc) "
    "that will",
    "                                     execute on the CS system.",
    "",
    "    --mount-dirs                 (Optional) String of comma-seperated paths to mount, in "
    "addition to",
    "                                     the standard paths listed in csrun_cpu.",
    "                                     Default is an empty string (only paths listed in "
    "csrun_cpu are mounted)",
    "    --total-nodes                (Optional) Number of nodes to execute with (passed to "
    "slurm).",
    "                                     Default is listed above.",
    "    --tasks-per-node             (Optional) Number of tasks per node to execute with "
    "(passed to slurm).",
    "                                     Default is listed above.",
    "    --cpus-per-task              (Optional) Number of cpus per task to execute with "
    "(passed to slurm).",
    "                                     Default is listed above.",
    "    --single-task-nodes          (Optional) Number of nodes, among the total nodes, that "
    "will only run a single task.",
    "                                     Refer to Cerebras documentation for this flag.",
    "                                     Default is 0 (all nodes will have multiple tasks "
    "running on them)",
    "    --cyclic                     (Optional) Distribute tasks to nodes in a round-robin "
    "fashion.",
    "                                     Refer to Cerebras documentation for this flag.",
    "                                     Default is block allocation, where tasks are "
    "sequentially assigned to one node",
    "                                     before moving on to the next node.",
    "    --dry-run                    (cs2sim) Print the srun line and where every task would "
    "run; run nothing.",
)
_WSE_EXAMPLE_LINES = (
    "Example usage:",
    "    csrun_wse --total-nodes=3 --tasks-per-node=5 --cpus-per-task=16 python run.py "
    "--mode=train --cs_ip=0.0.0.0",
    '        - Executes the command "python run.py --mode=train --cs_ip=0.0.0.0", which '
    "initiates model training",
    "          on the CS system at the given ip address. The specified slurm settings - 3 "
    "nodes with 5 workers each",
    "          and 16 cpus assigned per worker - is used for this training task. ",
    '    csrun_wse --mount-dirs="/data/ml,/lab/ml" python run.py --mode=eval '
    "--eval_steps=1000 --cs_ip=0.0.0.0",
    '        - Mounts "/data/ml/" and "/lab/ml" in addition to the default mount directories.',
    '          Executes the command "python run.py --mode=eval --eval_steps=1000 --cs_ip=0.0.0.0",',
    "          which initiates model evaluation on the CS system at the given cs_ip address",
    "          The default Slurm settings are used.",
    "    csrun_wse --total_nodes=5 --single-task-nodes=2 --tasks-per-node=4 python-ws run.py "
    "--mode=train --cs_ip=0.0.0.0",
    '        - Executes the command "python_ws run.py --mode=train --cs_ip=0.0.0.0" which '
    "initates model training",
    "          On the CS system at the given ip address. A total of 5 nodes are used, the "
    "first 2 of which run",
    "          only a single task. The remaining 3 nodes run 4 tasks per node. Thus, a total "
    "of 14 tasks are",
    "          associated with this job",
)


def wse_help(site: SiteSpec) -> str:
    """csrun_wse --help, with the site's defaults filled in."""
    lines = [
        WSE_USAGE,
        "",
        "Description:",
        "     Runs the given <command_for_cs_execution> command on the CS system.",
        "     The following applies:",
        "         - The specific type of the execution task, i.e., training or prediction or "
        "evaluation,",
        "               is specified in the <command_for_cs_execution> command.",
        "         - Executing on the CS system requires running multiple tasks on the cpu "
        "cluster. For",
        "               example, the input pipeline is a task run on the cpu cluster. These "
        "tasks are",
        "               are co-ordinated by Slurm and automatically brought up via this script.",
        "         - Unless the optional arguments for Slurm configuration are specified, we use "
        "the",
        "           following default values:",
        f"               total-nodes:     {site.def_nodes}",
        f"               tasks-per-node:  {site.def_tasks_per_node}",
        f"               cpus-per-task:   {site.def_cpus_per_task}",
        "",
        *_WSE_ARGUMENT_LINES,
        *_WSE_EXAMPLE_LINES,
    ]
    return "\n".join(lines)


def cpu_help() -> str:
    """csrun_cpu --help (Model Zoo's csrun_cpu, docs/sources.md)."""
    lines = [
        CPU_USAGE,
        "",
        "Description:",
        "     Runs the given <command_to_execute> inside the Cerebras environment on a CPU node.",
        "",
        "Arguments:",
        "     command_to_execute       Executes <command_to_execute> inside the Cerebras",
        "                                  container on a CPU node.",
        '     --alloc-node             (Optional) Set this to "False" if you do not wish to '
        "reserve the",
        "                                  CPU node exclusively to execute <command_to_execute>.",
        '                                  Default is "True".',
        "     --mount-dirs             (Optional) String of comma-seperated paths to mount in "
        "addition to",
        "                                  the standard paths listed in csrun_cpu.",
        "                                  Default is an empty string (only paths listed in "
        "csrun_cpu are mounted)",
        "",
        "Example usage:",
        '    csrun_cpu --mount-dirs="/data/ml,/lab/ml" python run.py --mode=validate_only',
        '        - Mounts "/data/ml" and "/lab/ml" in addition to the default mount directories '
        "and then executes",
        '          the command "python run.py --mode=validate_only", which runs validation '
        "inside the Cerebras",
        "          container on a CPU node.",
        "    csrun_cpu --alloc-node=True python run.py --mode=compile_only",
        '        - Reserves the whole CPU node and executes the command "python run.py '
        '--mode=compile_only",',
        "          which runs the compilation inside the Cerebras container on the reserved "
        "CPU node.",
        "    csrun_cpu python",
        "        - Launches a Python interpreter inside the Cerebras container on a CPU node.",
    ]
    return "\n".join(lines)
