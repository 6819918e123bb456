"""cs_input_analyzer's analysis: compile, measure the input pipeline on real worker processes,
recommend a Slurm layout. Prints nothing: the console script (scripts/cs_input_analyzer.py)
parses its flags and reports through runtime/cli/analyzer_report.py (the progress lines and the
text report).

The procedure of the real script (Model Zoo's cs_input_analyzer, docs/sources.md), on this
simulator:
1. compile (or validate) the command's model for the command's flow (`python` pipelined,
   `python-ws` weight streaming) with the CS-2 compiler (runtime/compiler), as `run.py
   --mode=compile_only` would: the compile directory is the one a later run reuses;
2. for each thread count (12, 16, 20 as the real script) measure, on this host, real streamer
   processes running the model's input pipeline into a real chief (runtime/job/input_measure.py):
   1 worker alone, and as many as this host's CPUs allow at once (how it scales and where the
   chief's intake stops growing; thread counts a worker here cannot run, above this host's
   CPUs, are the same processes: measured once); its progress reported as it goes (a bar on a
   terminal, the real script's `####...  (33%)` lines otherwise: runtime/cli/analyzer_report.py);
3. report: measured samples/s per worker and in total (host measurements), what the compiled
   model needs (est_samples_per_sec, a CS-2 estimate; none after validate-only, or
   --target-samples-per-sec), and the recommended `nodes:`, `tasks_per_node:`,
   `cpus_per_task:` (Cerebras' Performance Optimization Practices) with the matching csrun_wse
   command; "input-bound" when even that layout delivers less than the wafer takes;
4. the per-worker rate is saved in model_dir/performance/input_measurement.json, where the
   run's compile (runtime/job/cs_run.py) finds it: its estimate is then bounded by its input
   workers and names "input" as the bound when they fall short (predicted_input_bottleneck).

Sizing (ours; the real tool's rules are unpublished): a worker node of C CPUs runs C // t
workers of t threads; the per-worker rate is the 1-worker measurement at t threads (a worker on
a real node has its own t cores; this host's are shared, and a worker here runs at most this
host's CPU count of threads). For each t the analyzer takes the fewest nodes whose workers deliver
the need (pipelined: the chief shares the first node with workers, as csrun_wse without
--single-task-nodes lays it out; weight streaming: 2 single-task nodes first), the thread count
needing the fewest nodes (then the fewest CPUs) wins, and the tasks are spread evenly over the
worker nodes. When the need cannot be met with
--available-nodes, it recommends all of them at the best rate and says how far short that is.
Without a need (validate-only and no target) it sizes for all available nodes.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cs2sim.runtime.job.input_measure import Measurement

__all__ = [
    "THREADS",
    "WS_SINGLE_TASK_NODES",
    "AnalyzerError",
    "Options",
    "Progress",
    "RunCommand",
    "parse_command",
    "PerThreads",
    "Recommendation",
    "recommend",
    "run_command_for",
    "site_facts",
    "system_ip",
    "analyze",
]

THREADS = (12, 16, 20)  # the real script's THREADS=( 12 16 20 )
# weight streaming needs at least 2 single-task nodes (the Weight Streaming Quickstart)
WS_SINGLE_TASK_NODES = 2
LAUNCHERS = ("python", "python3", "python-ws", "python-pt")


class AnalyzerError(Exception):
    """A one-sentence failure with its exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Options:
    """What the command line asked for (scripts/cs_input_analyzer.py parses it)."""

    available_nodes: int | None
    mount_dirs: list[str]
    output: str
    target: float | None
    threads: tuple[int, ...]
    seconds: float
    command: list[str]


class Progress(Protocol):
    """Where the analysis reports as it goes (runtime/cli/analyzer_report.py writes it)."""

    def compiling(self, model: str, launcher: str) -> None:
        """The compile starts."""

    def measuring(self, total: int) -> AbstractContextManager[Callable[[str], None]]:
        """`total` measurements follow; the context gives the function called after each."""
        ...


# -- the command analyzed --------------------------------------------------------------------------
@dataclass
class RunCommand:
    """The analyzed command: flow, model, its run.py arguments."""

    launcher: str
    run_py: Path
    model: str
    args: list[str]

    @property
    def weight_streaming(self) -> bool:
        return self.launcher == "python-ws"

    @property
    def wrapper(self) -> str:
        """The word csrun_wse runs for this flow: python (pipelined), python-ws or python-pt."""
        return "python" if self.launcher == "python3" else self.launcher


def parse_command(command: list[str]) -> RunCommand:
    """`python[-ws|-pt] run.py ...` -> which model, which flow."""
    launcher = Path(command[0]).name
    if launcher not in LAUNCHERS or len(command) < 2:
        raise AnalyzerError(
            f"the command must be python, python-ws or python-pt followed by a "
            f"run.py and its arguments, not {' '.join(command[:2])!r}"
        )
    run_py = Path(command[1])
    try:
        text = run_py.read_text()
    except OSError as e:
        raise AnalyzerError(
            f"cannot read {run_py} ({e.strerror}); give the path of the model's run.py"
        ) from None
    found = re.search(r"""main\(\s*["']([\w-]+)["']""", text)
    if found is not None:
        return RunCommand(launcher, run_py, found.group(1), command[2:])
    own = re.search(r"""main\(\s*([A-Za-z_]\w*)\s*\)""", text)
    if own is None:
        raise AnalyzerError(
            f'{run_py} is not a cs2sim run.py (no main("<model>") or '
            "main(<ModelClass>) call); give the model's run.py"
        )
    return RunCommand(launcher, run_py, register_own_model(run_py, own.group(1)), command[2:])


def register_own_model(run_py: Path, class_name: str) -> str:
    """A user's run.py passes its model class to main (docs/own-model.md): import the run.py
    as a module (its main() call is under `if __name__ == "__main__"`), register the class in
    the model table and return its NAME."""
    import importlib.util

    from cs2sim.runtime import registry

    folder = str(run_py.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # as `python run.py` has it: the model's module beside it
    spec = importlib.util.spec_from_file_location("cs2sim_user_run", run_py)
    if spec is None or spec.loader is None:
        raise AnalyzerError(f"cannot import {run_py}; give the model's run.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - the user's code: one line, what to do
        raise AnalyzerError(
            f"importing {run_py} failed ({type(e).__name__}: {e}); run "
            f"`python {run_py} --help` to see the problem"
        ) from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise AnalyzerError(
            f"{run_py} passes {class_name} to main() but defines or imports no "
            "such class; give the model's run.py"
        )
    return registry.register(cls).NAME


# -- site facts ------------------------------------------------------------------------------------
def first_system() -> tuple[str, str]:
    """(name, IP) of the cluster's first CS-2 system, from the cluster description alone (the
    store is not opened): the system the recommended line trains on without a --cs_ip."""
    from cs2sim.system.cluster import load_cluster

    system = load_cluster().systems[0]
    return str(system.name), str(system.ip)


def system_ip() -> str:
    """The IP of the cluster's first CS-2 system (what the recommended line's --cs_ip names)."""
    return first_system()[1]


def site_facts() -> tuple[int, int]:
    """(default node count, CPUs of a worker node) from the cluster configuration."""
    from cs2sim.system.cluster import load_cluster

    cluster = load_cluster()
    workers = [n for n in cluster.nodes if n.role == "worker"] or list(cluster.nodes)
    cpus = min((n.cpus for n in workers), default=os.cpu_count() or 1)
    site = getattr(cluster, "site", None)
    default = getattr(site, "def_nodes", None) or min(5, max(1, len(cluster.nodes)))
    return int(default), int(cpus)


def _measure(
    model: str,
    params: dict[str, Any],
    options: Options,
    node_cpus: int,
    host_cpus: int,
    work: int,
    progress: Progress,
) -> list[Measurement]:
    """The input workers' delivery for each --threads value: one worker, then as many as a
    worker node (and this host) runs side by side; host measurements.

    A worker here runs at most this host's CPU count of threads (producing_threads), so thread
    counts above it run the very same processes: that configuration is measured once and its
    figures reported for each of them (on a 2-CPU host 12, 16 and 20 threads are 2 runs, not 6)."""
    from dataclasses import replace

    from cs2sim.runtime.job.input_measure import measure_delivery
    from cs2sim.runtime.job.streamers import producing_threads

    plan = []
    for t in options.threads:
        per_node = max(1, node_cpus // t)
        plan.append((t, 1))
        many = min(per_node, max(2, host_cpus))
        if many > 1:
            plan.append((t, many))
    measured: list[Measurement] = []
    runs: dict[tuple[int, int], Measurement] = {}  # (threads that run, workers) -> measured
    with progress.measuring(len(plan)) as advance:
        for t, w in plan:
            ran = producing_threads(t)
            same = runs.get((ran, w))
            if same is None:
                m = runs[(ran, w)] = measure_delivery(
                    model, params, workers=w, threads=t, seconds=options.seconds, extra_work=work
                )
                note = ""
            else:
                m = replace(same, threads=t)
                note = f" (the {same.threads}-thread run: a worker here runs {ran} threads)"
            measured.append(m)
            advance(f"{t} threads x {w} worker(s): {m.samples_per_sec:,.0f} samples/s{note}")
    return measured


# -- the analysis ----------------------------------------------------------------------------------
def compile_model(cmd: RunCommand, on_stage: Any) -> tuple[Any, dict[str, Any], Path]:
    """Compile as `run.py --mode=compile_only|validate_only` does; (result, params, model_dir)."""
    from cs2sim.runtime.artifacts.perf import write_compile_perf
    from cs2sim.runtime.cli.compile_run import _target
    from cs2sim.runtime.cli.compile_run import stop_after as compile_stop
    from cs2sim.runtime.cli.main import _load, build_parser, default_params
    from cs2sim.runtime.compiler import compile_run
    from cs2sim.system.state import ExecMode

    args = build_parser(cmd.model).parse_args(cmd.args)
    if args.params is None:  # the model's default params, found as run.py finds them
        args.params = str(default_params(cmd.model, cmd.run_py.resolve().parent)[0])
    stop = compile_stop(args)
    if stop is None:
        raise AnalyzerError(
            "cs_input_analyzer analyzes a compile: give run.py "
            "--mode=compile_only (best) or --mode=validate_only"
        )
    params, _half, _warnings = _load(
        cmd.model, argparse.Namespace(**{**vars(args), "mode": "train", "wafer_map": None})
    )
    model_dir = Path(args.model_dir or params["runconfig"]["model_dir"])
    mode = ExecMode.WEIGHT_STREAMING if cmd.weight_streaming else ExecMode.PIPELINED
    # for the system the recommended line trains on, so that run reuses this compile
    target = _target(args.cs_ip) if args.cs_ip else first_system()[0]
    res = compile_run(
        cmd.model, params, model_dir, mode=mode, stop_after=stop, target=target, on_stage=on_stage
    )
    if res.plan is not None:
        from cs2sim.runtime.compiler.timetrain import report_doc

        write_compile_perf(model_dir, res, report_doc(res.plan, params))
    return res, params, model_dir


@dataclass
class PerThreads:
    """What one thread count gives."""

    threads: int
    workers_per_node: int
    per_worker: float  # samples/s of one worker (host measurement)

    @property
    def node_rate(self) -> float:
        """samples/s of a full worker node (estimate from the per-worker measurement)."""
        return self.workers_per_node * self.per_worker


@dataclass
class Recommendation:
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    single_task_nodes: int
    streamers: int
    expected: float  # samples/s the streamers deliver (estimate from host measurements)
    meets_need: bool | None  # None: no need known
    reason: str
    nodes_needed: int | None = None  # without the --available-nodes limit


def recommend(
    options: list[PerThreads], need: float | None, available: int, single: int
) -> Recommendation:
    """The smallest layout that delivers `need` (see the module docstring)."""

    def layout(p: PerThreads, tasks: int) -> tuple[int, int, int]:
        """(nodes, tasks_per_node, streamers) running `tasks` streamers, spread evenly."""
        w = p.workers_per_node
        if single:
            worker_nodes = max(1, math.ceil(tasks / w))
            per = math.ceil(tasks / worker_nodes)
            return single + worker_nodes, per, worker_nodes * per
        nodes = max(1, math.ceil((tasks + 1) / w))  # the chief is one task of node 1
        per = math.ceil((tasks + 1) / nodes)
        return nodes, per, nodes * per - 1

    def full(p: PerThreads) -> tuple[int, int, int]:
        return layout(
            p,
            (available - single) * p.workers_per_node
            if single
            else available * p.workers_per_node - 1,
        )

    if need is None:
        best = max(options, key=lambda p: (p.node_rate, -p.threads))
        nodes, per, streamers = full(best)
        return Recommendation(
            nodes,
            per,
            best.threads,
            single,
            streamers,
            streamers * best.per_worker,
            None,
            "no samples/s estimate (validate-only): all available nodes",
        )
    fits = []
    for p in options:
        nodes, per, streamers = layout(p, max(1, math.ceil(need / p.per_worker)))
        if nodes <= available:
            fits.append((nodes, nodes * per * p.threads, p, per, streamers))
    if fits:
        nodes, _cpus, best, per, streamers = min(fits, key=lambda f: (f[0], f[1]))
        return Recommendation(
            nodes,
            per,
            best.threads,
            single,
            streamers,
            streamers * best.per_worker,
            True,
            "fewest nodes whose workers deliver the need",
        )
    best = max(options, key=lambda p: (p.node_rate, -p.threads))
    nodes, per, streamers = full(best)
    needed = layout(best, max(1, math.ceil(need / best.per_worker)))[0]
    return Recommendation(
        nodes,
        per,
        best.threads,
        single,
        streamers,
        streamers * best.per_worker,
        False,
        f"all {available} available node(s) at the best rate; about {needed} would meet the need",
        needed,
    )


def run_command_for(cmd: RunCommand, rec: Recommendation, ip: str | None = None) -> str:
    """The csrun_wse line that trains on the CS-2 with the recommendation: the flow's wrapper,
    --mode=train, and --cs_ip (the command's own, else `ip`: without it run.py trains on the
    host CPU)."""
    rest = [
        a
        for a in cmd.args
        if a not in ("--validate_only", "--compile_only") and not a.startswith("--mode=")
    ]
    cleaned, skip = [], False
    for a in rest:  # drop "--mode X" / "-m X"
        if skip:
            skip = False
            continue
        if a in ("--mode", "-m"):
            skip = True
            continue
        cleaned.append(a)
    flags = [
        f"--total-nodes={rec.nodes}",
        f"--tasks-per-node={rec.tasks_per_node}",
        f"--cpus-per-task={rec.cpus_per_task}",
    ]
    if rec.single_task_nodes:
        flags.append(f"--single-task-nodes={rec.single_task_nodes}")
    has_ip = any(a == "--cs_ip" or a.startswith("--cs_ip=") for a in cleaned)
    target = [] if has_ip or ip is None else [f"--cs_ip={ip}"]
    return " ".join(
        ["csrun_wse", *flags, cmd.wrapper, str(cmd.run_py), "--mode=train", *cleaned, *target]
    )


# -- the analysis ---------------------------------------------------------------------------------
def analyze(options: Options, progress: Progress) -> dict[str, Any]:
    """Compile, measure, recommend; returns the report (JSON-able), telling `progress` as it
    goes."""
    from cs2sim.runtime.job.streamers import extra_work_rounds

    _check_mount_dirs(options)
    cmd = parse_command(options.command)
    def_nodes, node_cpus = site_facts()
    available = options.available_nodes or def_nodes
    single = WS_SINGLE_TASK_NODES if cmd.weight_streaming else 0
    if available <= single:
        raise AnalyzerError(
            f"--available-nodes {available} leaves no worker node: weight "
            f"streaming uses {single} single-task nodes first; give at least "
            f"{single + 1}"
        )
    progress.compiling(cmd.model, cmd.launcher)
    res, params, model_dir = compile_model(cmd, None)
    need = options.target or res.est_samples_per_sec
    need_source = (
        "--target-samples-per-sec"
        if options.target
        else "compile estimate"
        if res.est_samples_per_sec
        else None
    )

    host_cpus = os.cpu_count() or 1
    work = extra_work_rounds()
    measured = _measure(cmd.model, params, options, node_cpus, host_cpus, work, progress)
    per = _per_threads(options, node_cpus, measured)
    rec = recommend(per, need, available, single)
    top = max(measured, key=lambda m: m.samples_per_sec)
    # a later compile of this model_dir (the run's) reads the rate: its estimate then names
    # "input" as the bound when the job's workers deliver less than the wafer takes
    from cs2sim.runtime.compiler.io import save_measurement

    chosen = next(p for p in per if p.threads == rec.cpus_per_task)
    saved = save_measurement(
        model_dir, cmd.model, chosen.per_worker, chosen.threads, 1, rec.streamers
    )
    input_bound = None if not need else rec.expected < need
    return {
        "model": cmd.model,
        "launcher": cmd.launcher,
        "flow": "WEIGHT_STREAMING" if cmd.weight_streaming else "PIPELINED",
        "compile": _compile_doc(res, params),
        "need": {"samples_per_sec": need, "source": need_source},
        "host": {
            "cpus": host_cpus,
            "worker_node_cpus": node_cpus,
            "available_nodes": available,
            "extra_work_rounds": work,
            "mount_dirs": options.mount_dirs,
        },
        "measurements": [m.to_json() for m in measured],
        "per_threads": [_per_threads_doc(p) for p in per],
        "chief_intake_samples_per_sec": round(top.samples_per_sec, 3),
        "input_bound": input_bound,
        "measurement_file": str(saved),
        "chief_cpu_at_intake": round(top.chief_cpu, 3),
        "recommendation": _recommendation_doc(cmd, rec),
        "labels": {
            "measurements": "host measurements (this machine)",
            "est_samples_per_sec": "CS-2 estimate (compiler)",
            "node_samples_per_sec": "estimate: per-worker measurement x workers/node",
            "expected_samples_per_sec": "estimate from host measurements",
        },
    }


def _check_mount_dirs(options: Options) -> None:
    """Each --mount-dirs is a directory here (the data must be on a shared file system)."""
    for d in options.mount_dirs:
        if not Path(d).is_dir():
            raise AnalyzerError(
                f"--mount-dirs names {d}, which is not a directory on this "
                "host; fix the path (the data must be on a shared file system)"
            )


def _per_threads(options: Options, node_cpus: int, measured: list[Measurement]) -> list[PerThreads]:
    """Per thread count: the workers a node holds and one worker's measured rate."""
    return [
        PerThreads(
            t,
            max(1, node_cpus // t),
            next(m.per_worker for m in measured if m.threads == t and m.workers == 1),
        )
        for t in options.threads
    ]


def _compile_doc(res: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The report's compile section: where, whether reused, its estimate and time to train."""
    from cs2sim.runtime.compiler.timetrain import report_doc

    return {
        "directory": str(res.directory),
        "stop_after": res.stop_after,
        "reused": res.reused,
        "compile_time": round(res.compile_time, 3),
        "est_samples_per_sec": res.est_samples_per_sec,
        "time_to_train": report_doc(res.plan, params),
    }


def _per_threads_doc(p: PerThreads) -> dict[str, Any]:
    """One row of the report's per-thread-count rates."""
    return {
        "threads": p.threads,
        "workers_per_node": p.workers_per_node,
        "per_worker_samples_per_sec": round(p.per_worker, 3),
        "node_samples_per_sec": round(p.node_rate, 3),
    }


def _recommendation_doc(cmd: RunCommand, rec: Recommendation) -> dict[str, Any]:
    """The report's recommendation, with the csrun_wse line that applies it."""
    return {
        "nodes": rec.nodes,
        "tasks_per_node": rec.tasks_per_node,
        "cpus_per_task": rec.cpus_per_task,
        "single_task_nodes": rec.single_task_nodes,
        "streamers": rec.streamers,
        "expected_samples_per_sec": round(rec.expected, 3),
        "meets_need": rec.meets_need,
        "reason": rec.reason,
        "nodes_needed": rec.nodes_needed,
        "csrun_wse": run_command_for(cmd, rec, system_ip()),
    }
