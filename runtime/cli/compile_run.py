"""The run.py side of the compiler: `--validate_only` / `--compile_only` / `--mode=...`.

Both spellings of the workflow run here (Model Zoo's run.py and Cerebras' Performance Optimization
Practices, docs/sources.md): the TF flags `--validate_only` / `--compile_only` and the
`--mode=validate_only|compile_only` form of `csrun_cpu python run.py --mode=compile_only`. Neither
trains nor needs a CS-2: the execution mode comes from the wrapper (`python` pipelined, `python-ws`
weight streaming; runtime/job/flow.py) and `--cs_ip`, when given, only names the system the compile
is for (it need not be ACTIVE).

Output goes through the run's RunLog streams: on a terminal a rich progress display of the
compiler's stages and the wafer map; otherwise one plain line per stage. `--wafer_map` draws the
map on any output.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs2sim.runtime.cli.runlog import RunLog
from cs2sim.system.errors import UsageError

if TYPE_CHECKING:  # the compiler is imported when a compile runs
    from cs2sim.runtime.compiler.driver import CompileResult

__all__ = ["COMPILE_MODES", "add_flags", "stop_after", "run_compile", "summary_lines"]

COMPILE_MODES = ("validate_only", "compile_only")
log = logging.getLogger("cs2sim.run")


def add_flags(p: argparse.ArgumentParser) -> None:
    """The compile-only flags of run.py (beyond Model Zoo's)."""
    p.add_argument(
        "--wafer_map",
        action="store_true",
        default=None,
        help="Draw the compiled wafer map in the terminal even when not on one.",
    )


def stop_after(args: argparse.Namespace) -> str | None:
    """ "validate" | "compile" when this run.py only compiles, else None."""
    if args.mode in COMPILE_MODES and (args.validate_only or args.compile_only):
        raise UsageError(
            f"--mode={args.mode} already says what to do; drop --validate_only / --compile_only."
        )
    if args.validate_only or args.mode == "validate_only":
        return "validate"
    if args.compile_only or args.mode == "compile_only":
        return "compile"
    return None


def _target(cs_ip: str | None) -> str | None:
    """The system name `--cs_ip` names (any state: a compile does not run on it)."""
    if cs_ip is None:
        return None
    from cs2sim.system.machine import Machine
    from cs2sim.system.store import Store

    return Machine.for_target(Store.open(), cs_ip).name


def summary_lines(res: CompileResult, params: dict[str, Any] | None = None) -> list[str]:
    """What a finished compile says (labels say: CS-2 estimate / host measurement)."""
    from cs2sim.runtime.compiler.report import pe_share
    from cs2sim.runtime.compiler.timetrain import for_plan

    what = "Validation" if res.stop_after == "validate" else "Compilation"
    lines = []
    if res.reused:
        lines.append(f"Reusing existing compilation in {res.directory}")
    lines.append(
        f"{what} for {res.mode.value} finished in {res.compile_time:.3f} s "
        f"(host measurement): {res.directory}"
    )
    if res.plan is not None and res.active_pes is not None:  # a plan with its estimate
        e = res.plan.estimate
        from cs2sim.system.hardware import SYSTEM_PORTS

        plan = res.plan
        where = (
            f", {e.get('ports_used', 0):g} of {SYSTEM_PORTS} ports feed the input"
            if plan.kernels
            else ""
        )
        lines.append(
            f"Estimated performance (CS-2 estimate, compile_report.txt): "
            f"{e['samples_per_sec']:.1f} samples/s, {e['bound']} bound, "
            f"{res.active_pes:,} of {res.total_pes:,} PEs active "
            f"({pe_share(res.active_pes, res.total_pes)}), "
            f"{e['compute_utilization']:.0%} compute utilization{where}"
            + (f", {plan.replicas} replicas" if plan.replicas > 1 else "")
        )
        lines.append(plan.batch_line(plan.target))
        ttt = for_plan(plan, params) if params is not None else None
        if ttt is not None:
            lines.append(f"Time to train (CS-2 estimate): {ttt.line()}")
    return lines


def run_compile(
    model_name: str,
    args: argparse.Namespace,
    runlog: RunLog,
    load: Callable[[str, argparse.Namespace], tuple[dict[str, Any], str, list[str]]],
    stop: str,
) -> int:
    """Compile (or validate) the model of `args`; returns the exit code."""
    from cs2sim.runtime.artifacts.perf import write_compile_perf
    from cs2sim.runtime.compiler import compile_run
    from cs2sim.runtime.job.cs_run import known_input_cluster
    from cs2sim.runtime.job.flow import execution_mode, launcher_word

    # the params see a train run (mode and our display flag are not runconfig values)
    params, _half, warnings = load(
        model_name, argparse.Namespace(**{**vars(args), "mode": "train", "wafer_map": None})
    )
    for w in warnings:
        log.warning(w)
    model_dir = Path(args.model_dir or params["runconfig"]["model_dir"])
    if model_dir.exists() and not model_dir.is_dir():
        raise UsageError(
            f"model_dir {model_dir} is a file, not a directory; pass "
            "-o/--model_dir with a directory."
        )
    target = _target(args.cs_ip or params["runconfig"].get("cs_ip"))  # the flag, or the YAML's
    mode = execution_mode()
    tty = _isatty(runlog.out) and _isatty(runlog.err)  # as the training progress bar
    ic = known_input_cluster(model_dir, model_name)  # csrun_wse --compile_only: its streamers
    log.info(
        f"Compiling {model_name} for {mode.value} ({launcher_word()})"
        + (f" on {target}" if target else "")
        + f" into {model_dir}"
    )
    if tty:
        res = _with_progress(
            runlog,
            lambda cb: compile_run(
                model_name,
                params,
                model_dir,
                mode=mode,
                stop_after=stop,
                target=target,
                on_stage=cb,
                input_cluster=ic,
            ),
        )
    else:

        def on_stage(name: str, i: int, n: int) -> None:
            log.info(f"Compile stage {i}/{n}: {name}")

        res = compile_run(
            model_name,
            params,
            model_dir,
            mode=mode,
            stop_after=stop,
            target=target,
            on_stage=on_stage,
            input_cluster=ic,
        )
    for line in summary_lines(res, params):
        log.info(line)
    if res.plan is not None:
        from cs2sim.runtime.compiler.timetrain import for_plan

        ttt = for_plan(res.plan, params)
        write_compile_perf(model_dir, res, ttt.as_dict() if ttt else None)
        if tty or args.wafer_map:
            from rich.console import Console

            from cs2sim.runtime.compiler.wafermap import render_rich
            from cs2sim.system.hardware import WSE2

            Console(file=runlog.out, force_terminal=tty or None, width=None if tty else 100).print(
                render_rich(res.plan, WSE2)
            )
    return 0


def _with_progress(runlog: RunLog, run: Callable[[Callable[[str, int, int], None]], Any]) -> Any:
    """Run the compile under a rich progress display of its stages."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[s]}"),
        TimeElapsedColumn(),
        console=Console(file=runlog.err),
        transient=True,
    ) as progress:
        task = progress.add_task("Compiling", total=1, s="")

        def on_stage(name: str, i: int, n: int) -> None:
            progress.update(
                task, description=name, completed=i - 1, total=n, s=f"{i}/{n}", refresh=True
            )  # drawn as each stage starts

        res = run(on_stage)
        progress.update(task, completed=1, total=1)
    return res


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
