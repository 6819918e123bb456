"""What cs_input_analyzer prints: its progress while it measures, and its text report.

The analysis (runtime/cli/input_analyzer.py) returns a JSON-able report and calls a `Progress`;
this module is the one place that turns both into text: `TextProgress` (the real script's
`Starting ...` / `#####...  (33%)` / `Finished Analysis` lines, or a rich bar on a terminal) and
`render(report)` (every line of the text report; `--output-format json` prints the report
itself).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["START", "FINISH", "TextProgress", "render"]

START = "------------ Starting input performance analysis and resource estimator ------------"
FINISH = "------------------------------- Finished Analysis ----------------------------------"
BAR_WIDTH = 67  # the real script's bar: 67 '#' at 100%


class PlainProgress:
    """The real script's lines: `#####...   (33%)` after each measurement."""

    def __init__(self, out: TextIO, total: int) -> None:
        self.out, self.total, self.done = out, total, 0

    def advance(self, label: str) -> None:
        self.done += 1
        frac = self.done / self.total
        filled = int(BAR_WIDTH * frac)
        pct = 100 if self.done == self.total else int(100 * frac)
        self.out.write(f"{'#' * filled}{' ' * (BAR_WIDTH - filled)} ({pct}%)\n")
        self.out.flush()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class RichProgress:
    """A rich progress bar (terminal only)."""

    def __init__(self, out: TextIO, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=out),
            transient=True,
        )
        self.task = self.progress.add_task("Measuring input workers", total=total)

    def advance(self, label: str) -> None:
        self.progress.update(self.task, advance=1, description=label)

    def __enter__(self) -> RichProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)


class TextProgress:
    """The analysis' progress on `out`: a rich bar on a terminal, else the real script's lines."""

    def __init__(self, out: TextIO) -> None:
        self.out = out

    def compiling(self, model: str, launcher: str) -> None:
        self.out.write(f"Compiling {model} ({launcher}) ...\n")
        self.out.flush()

    @contextmanager
    def measuring(self, total: int) -> Iterator[Callable[[str], None]]:
        self.out.write(START + "\n")
        self.out.flush()
        bar = RichProgress(self.out, total) if self.out.isatty() else PlainProgress(self.out, total)
        with bar:
            yield bar.advance
        self.out.write(FINISH + "\n")
        self.out.flush()


def _rate(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def render(report: dict[str, Any]) -> str:
    """The text report."""
    r, c, need, host = (report["recommendation"], report["compile"], report["need"], report["host"])
    lines = _measured_lines(report)
    lines.append("")
    lines += _need_lines(need, host)
    lines += [
        "",
        "Recommended Slurm configuration (for csrun_wse):",
        f"  nodes: {r['nodes']}",
        f"  tasks_per_node: {r['tasks_per_node']}",
        f"  cpus_per_task: {r['cpus_per_task']}",
    ]
    if r["single_task_nodes"]:
        lines.append(f"  single_task_nodes: {r['single_task_nodes']}")
    share = (
        f" = {r['expected_samples_per_sec'] / need['samples_per_sec']:.0%} of the need"
        if need["samples_per_sec"]
        else ""
    )
    verdict = {
        True: "meets the need",
        None: "nothing to compare with",
        False: "SHORT: input-bound, the input will bound the wafer "
        "(suspected_input_bottleneck predicted)",
    }
    lines += [
        "",
        f"Expected input: {r['streamers']} worker task(s) x "
        f"{_rate(r['expected_samples_per_sec'] / max(r['streamers'], 1))} = "
        f"{_rate(r['expected_samples_per_sec'])} samples/s (estimate){share}",
        f"  {verdict[r['meets_need']]}; {r['reason']}.",
        "",
        "Time to train (CS-2 estimate): "
        + ((c.get("time_to_train") or {}).get("line") or "not known (no estimate or max_steps)"),
        "",
        "Train with (on the CS-2):",
        f"  {r['csrun_wse']}",
        "",
        f"The per-worker rate is saved in {report['measurement_file']}: the run's compile "
        'bounds its estimate by its input workers ("input" bound when they fall short).',
        "",
    ]
    return "\n".join(lines)


def _measured_lines(report: dict[str, Any]) -> list[str]:
    """The compile, then the host measurements and the per-worker-node estimates from them."""
    c, host = report["compile"], report["host"]
    lines = [
        "",
        f"Input pipeline report for {report['model']} ({report['flow'].lower()}, "
        f"{report['launcher']})",
        f"  compile: {c['directory']} ({c['stop_after']}"
        + (", reused" if c["reused"] else "")
        + f", {c['compile_time']:.2f} s)",
        "",
        f"Measured on this host ({host['cpus']} CPUs, so a worker runs at most {host['cpus']} "
        "of its threads at once; host measurements, samples/s):",
        f"  {'threads':>7}  {'workers':>7}  {'total':>12}  {'per worker':>12}  {'start-up':>9}",
    ]
    for m in report["measurements"]:
        lines.append(
            f"  {m['threads']:>7}  {m['workers']:>7}  {_rate(m['samples_per_sec']):>12}"
            f"  {_rate(m['per_worker_samples_per_sec']):>12}"
            f"  {m['startup_seconds']:>8.2f}s"
        )
    lines += [
        f"  chief intake: {_rate(report['chief_intake_samples_per_sec'])} samples/s at most, "
        f"its process {report['chief_cpu_at_intake']:.0%} busy (one consumer on this host)",
        "",
        f"Per worker node ({host['worker_node_cpus']} CPUs; estimate = per-worker rate x "
        "workers/node):",
    ]
    for p in report["per_threads"]:
        lines.append(
            f"  {p['threads']:>2} threads: {p['workers_per_node']:>3} workers/node x "
            f"{_rate(p['per_worker_samples_per_sec'])} = "
            f"{_rate(p['node_samples_per_sec'])} samples/s per node"
        )
    return lines


def _need_lines(need: dict[str, Any], host: dict[str, Any]) -> list[str]:
    """What the model needs and where that figure comes from."""
    lines: list[str] = []
    if need["samples_per_sec"]:
        estimate = need["source"] == "compile estimate"
        source = "CS-2 estimate from the compile" if estimate else need["source"]
        lines.append(f"The model needs: {_rate(need['samples_per_sec'])} samples/s ({source})")
    else:
        lines.append(
            "The model needs: unknown (validate-only gives no estimate; run with "
            "--mode=compile_only or give --target-samples-per-sec)"
        )
    if host["extra_work_rounds"]:
        lines.append(
            f"  (CS2SIM_INPUT_EXTRA_WORK={host['extra_work_rounds']}: the test knob "
            "made every sample heavier)"
        )
    return lines
