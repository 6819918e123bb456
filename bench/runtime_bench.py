"""Training-runtime throughput on this host against PyTorch on the CPU, interleaved.

    python bench/runtime_bench.py [--repeats 7] [--window 0.5] [--threads 2] [--quick]

Method (it must survive a machine that other work shares):
  * Both sides stay alive for the whole run, each in its own worker process (bench_worker.py):
    our runtime (numpy) and the PyTorch reference (eager, fp32, CPU), with the same model,
    batch, optimizer and thread count (--threads, default 2 each).
  * They take turns: for each repeat the driver has one side run a short window of steps
    (~--window seconds), then the other, alternating which goes first; the side not running
    blocks on its pipe (asleep). A change of load hits both sides within a second of each other
    instead of one whole phase.
  * Each repeat gives a ratio (PyTorch's median step time / ours); the row reports the median
    ratio over the repeats and its range (min-max), with each side's median rate.
  * Each repeat also measures both sides' float32 GEMM peak (1024^3 products, best of 4) in the
    same interleaving, so "% of peak" divides by a peak taken next to the step it is compared
    with, never one sampled once at the start.
  * Every row states its shapes (vocabulary included); the machine's load average (1 min) is
    recorded at the start and the end, and per repeat.
Rows: fc_mnist (target >= 1.4x PyTorch samples/s), the 4-layer d=256 GPT at V=256 T=128 (>= 1.2x
tokens/s), the same GPT at GPT-2's vocabulary V=50,257 with T=32, where the output projection
and the loss dominate (>= 1.0x), the 4-layer d=256 BERT (masked LM on 20 gathered positions +
next sentence) and LLaMA (RMSNorm, SwiGLU, rotary) at T=128 (>= 1.0x each); ours only: cbfloat16
+ dynamic loss scaling against fp32, and fc_mnist's GlobalRate through the whole Trainer against
the bare step. Then a per-layer profile of our GPT steps (exclusive time by kind of layer). The
pipelined and weight-streaming executors get rows through the hook in bench/cases.py
(EXECUTOR_FACTORIES), target >= 1.0x PyTorch.
Every figure is a host measurement (wall clock on this machine). Results go to
bench/results/runtime.md. PyTorch is optional (`pip install -e '.[bench]'`): without it the bench
reports our figures alone and says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cases import CASES, EXECUTOR_FACTORIES, executor_note  # noqa: E402
from cs2sim.runtime.artifacts.atomic import atomic_write  # noqa: E402
from cs2sim.runtime.threads import env_set_by_runtime  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "runtime.md"
WORKER = ROOT / "bench" / "bench_worker.py"
ROWS = ("fc", "gpt", "gpt_v50k", "bert", "llama")  # the rows compared with PyTorch
EXECUTOR_TARGET = 1.0  # the pipelined and weight-streaming rows: >= 1.0x PyTorch
SETTLE = 0.05  # s between windows: a spinning OpenMP pool of the previous side goes to sleep


class WorkerError(RuntimeError):
    """A worker process failed or is missing (PyTorch not installed)."""


class Worker:
    """One side's worker process; `ask(op=...)` sends a command and returns its JSON answer."""

    def __init__(
        self,
        side: str,
        threads: int,
        env: dict[str, str] | None = None,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.side = side
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), side, "--threads", str(threads), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def ask(self, **cmd: object) -> dict:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise WorkerError(f"the {self.side} worker stopped: {err.strip()[-400:]}")
        out = json.loads(line)
        if "error" in out:
            raise WorkerError(out["error"])
        return out

    def close(self) -> None:
        try:
            self.ask(op="quit")
        except (WorkerError, ValueError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def reference_env() -> dict[str, str]:
    """The user's environment for PyTorch: without the wait settings our runtime added to
    os.environ when the bench imported it (PyTorch runs as a user runs it)."""
    added = env_set_by_runtime()
    return {k: v for k, v in os.environ.items() if k not in added or os.environ[k] != added[k]}


def start_reference(threads: int) -> Worker | None:
    """The PyTorch worker, or None when torch is not importable here."""
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None
    except (ImportError, ValueError):
        return None
    return Worker("torch", threads, reference_env())


@dataclass
class Row:
    """One interleaved comparison: per-repeat step times and peaks of the two sides."""

    label: str
    unit: str
    units: int
    target: float | None
    ours: list[float] = field(default_factory=list)  # median step seconds per repeat
    ref: list[float] = field(default_factory=list)
    ours_cpu: list[float] = field(default_factory=list)
    ref_cpu: list[float] = field(default_factory=list)
    ours_peak: list[float] = field(default_factory=list)  # GFLOP/s per repeat
    ref_peak: list[float] = field(default_factory=list)
    load: list[float] = field(default_factory=list)
    flops: float = 0.0  # per step (ours' count; the same model on both sides)
    ref_label: str = "PyTorch"

    @property
    def ratios(self) -> list[float]:
        return [r / o for o, r in zip(self.ours, self.ref, strict=True)]

    def rate(self, side: list[float]) -> float:
        return self.units / statistics.median(side)

    def pct_peak(self, times: list[float], peaks: list[float]) -> float | None:
        if not self.flops or not peaks:
            return None
        return statistics.median(
            self.flops / t / 1e9 / p for t, p in zip(times, peaks, strict=True)
        )

    def summary(self) -> str:
        rs = self.ratios
        ratio = f"{statistics.median(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"
        target = f" (target >= {self.target}x)" if self.target else ""
        return (
            f"{self.label}: ours {self.rate(self.ours):,.0f} {self.unit}/s, "
            f"{self.ref_label} {self.rate(self.ref):,.0f}; ours/{self.ref_label} = "
            f"{ratio} over {len(rs)} repeats{target}"
        )


def calibrate(worker: Worker, case: str, window: float, executor: str | None = None) -> int:
    """Steps per window: warm the case up (3 steps), then fit ~`window` seconds."""
    secs = worker.ask(op="run", case=case, steps=3, executor=executor)["sec"]
    return max(1, round(window / max(min(secs[1:]), 1e-6)))


def interleave(
    a: Worker,
    b: Worker,
    row: Row,
    case_a: str,
    case_b: str,
    repeats: int,
    window: float,
    peak: bool = True,
    executor: str | None = None,
    log: bool = True,
) -> Row:
    """Alternate windows of case_a on worker a and case_b on worker b, `repeats` times."""
    steps_a = calibrate(a, case_a, window, executor)
    steps_b = calibrate(b, case_b, window)
    for r in range(repeats):
        row.load.append(os.getloadavg()[0])
        first = r % 2 == 0  # alternate who goes first: a drift in load hits both sides alike
        order = [(True, a, case_a, steps_a, executor), (False, b, case_b, steps_b, None)]
        for is_a, w, case, steps, ex in order if first else order[::-1]:
            if peak:
                g = w.ask(op="gemm", n=1024, reps=4)["gflops"]
                (row.ours_peak if is_a else row.ref_peak).append(g)
            out = w.ask(op="run", case=case, steps=steps, executor=ex)
            (row.ours if is_a else row.ref).append(statistics.median(out["sec"]))
            (row.ours_cpu if is_a else row.ref_cpu).append(out["cpu"])
            time.sleep(SETTLE)
        if log:
            print(
                f"  repeat {r + 1}/{repeats}: ratio {row.ratios[-1]:.2f} (load {row.load[-1]:.1f})",
                flush=True,
            )
    return row


def fmt_pct(p: float | None) -> str:
    return "-" if p is None else f"{p:.0%}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7, help="interleaved repeats per row")
    ap.add_argument("--window", type=float, default=0.5, help="seconds of steps per window")
    ap.add_argument("--threads", type=int, default=2, help="threads for each side")
    ap.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    ap.add_argument("--no-profile", action="store_true", help="skip the per-layer profile")
    ap.add_argument("--out", type=Path, default=RESULTS, help="results file (markdown)")
    ap.add_argument(
        "--rows",
        default="",
        help="comma-separated row keys (fc, gpt, gpt_v50k, bert, llama) to run only "
        "those rows against PyTorch, without the cbfloat16 and Trainer rows; an "
        "executor name (pipelined, weight_streaming) adds its rows for the GPT "
        "keys given",
    )
    args = ap.parse_args(argv)
    words = [k for k in args.rows.split(",") if k]
    executors = [k for k in words if k in EXECUTOR_FACTORIES]
    only = [k for k in words if k not in executors]
    unknown = [k for k in only if k not in ROWS]
    if unknown:
        ap.error(
            f"unknown row {unknown[0]!r}; expected one of {', '.join(ROWS)} or an "
            f"executor ({', '.join(EXECUTOR_FACTORIES)})"
        )
    repeats, window = (2, 0.1) if args.quick else (args.repeats, args.window)
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    ours = Worker("ours", args.threads)
    ref = start_reference(args.threads)
    try:
        info = ours.ask(op="info")
        print(f"ours: {info['settings']}")
        ref_info = None
        if ref is not None:
            try:
                ref_info = ref.ask(op="info")
            except WorkerError as e:
                print(f"PyTorch worker failed ({e}); our figures only.")
                ref.close()
                ref = None
        if ref_info:
            print(
                f"reference: PyTorch {ref_info['version']}, {ref_info['threads']} threads "
                f"(the user's environment: no wait settings added)"
            )
        else:
            print("PyTorch is not installed: our figures only (pip install -e '.[bench]').")
        print(
            f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} "
            f"{load_start[2]:.2f}; cores {os.cpu_count()}; {repeats} repeats, "
            f"windows ~{window}s"
        )

        rows: list[Row] = []
        for key in only or list(ROWS):
            case = CASES[key]
            row = Row(case.label, case.unit, case.units_per_step, case.target)
            row.flops = ours.ask(op="flops", case=key)["flops_per_step"]
            print(f"{case.label}:", flush=True)
            if ref is not None:
                interleave(ours, ref, row, key, key, repeats, window)
                print("  " + row.summary())
            else:  # no reference: our windows only (the second series is discarded)
                interleave(ours, ours, row, key, key, repeats, window, log=False)
                row.ref_label = "none"
            rows.append(row)
        # the CS-2 executors, in the same interleaving (the hook in bench/cases.py)
        for name in executors if only else EXECUTOR_FACTORIES:
            for key in [k for k in ("gpt", "gpt_v50k") if not only or k in only]:
                case = CASES[key]
                # a CS-2 executor at least PyTorch's CPU step (the host path's own
                # target is the case's)
                row = Row(f"{case.label} [{name}]", case.unit, case.units_per_step, EXECUTOR_TARGET)
                if ref is not None:
                    interleave(ours, ref, row, key, key, repeats, window, executor=name)
                    print("  " + row.summary())
                    rows.append(row)
        print(executor_note())

        cb_line = loop_line = ""
        if not only:  # the extra rows: the full run only
            # ours only: the cost of cbfloat16 + DLS, interleaved with fp32 in the same worker
            cb = CASES["fc_cb16"]
            cb_row = Row(cb.label, cb.unit, cb.units_per_step, None, ref_label="ours fp32")
            interleave(ours, ours, cb_row, "fc_cb16", "fc", repeats, window, peak=False, log=False)
            cost = [o / r - 1 for o, r in zip(cb_row.ours, cb_row.ref, strict=True)]
            cb_line = (
                f"{cb.label}: {cb_row.rate(cb_row.ours):,.0f} samples/s vs fp32 "
                f"{cb_row.rate(cb_row.ref):,.0f}: costs {statistics.median(cost):+.0%} "
                f"[{min(cost):+.0%} to {max(cost):+.0%}] (target <= +50%)"
            )
            print(cb_line)

            # ours only: fc_mnist through the whole Trainer vs the bare step, alternating
            if not args.quick:
                loops, bares = [], []
                steps = 200
                for _ in range(3):
                    loops.append(ours.ask(op="loop", steps=steps)["rate"])
                    out = ours.ask(op="run", case="fc", steps=steps)
                    bares.append(CASES["fc"].batch / statistics.median(out["sec"]))
                loop, bare = statistics.median(loops), statistics.median(bares)
                loop_line = (
                    f"{CASES['fc'].label} through the Trainer ({steps} steps): "
                    f"GlobalRate {loop:,.0f} samples/s vs the bare step's {bare:,.0f} "
                    f"({loop / bare - 1:+.0%})"
                )
                print(loop_line)

        profiles: dict[str, dict[str, float]] = {}
        if not args.no_profile:
            for key in [k for k in ("gpt", "gpt_v50k") if not only or k in only]:
                profiles[key] = ours.ask(op="profile", case=key, steps=2 if args.quick else 5)
            for key, prof in profiles.items():
                print(f"per-layer profile, ours, {CASES[key].label}:")
                for line in profile_lines(prof):
                    print("  " + line)
    finally:
        ours.close()
        if ref is not None:
            ref.close()

    load_end = os.getloadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    write_results(
        args.out,
        started,
        load_start,
        load_end,
        info,
        ref_info,
        rows,
        cb_line,
        loop_line,
        profiles,
        repeats,
        window,
        args.quick,
    )
    print(f"written {args.out}")
    return 0


def profile_lines(prof: dict[str, float]) -> list[str]:
    wall = prof["step (wall)"]
    items = sorted(((k, v) for k, v in prof.items() if k != "step (wall)"), key=lambda kv: -kv[1])
    return [f"{k:42s} {v * 1e3:8.2f} ms {v / wall:6.1%}" for k, v in items] + [
        f"{'step (wall)':42s} {wall * 1e3:8.2f} ms"
    ]


def write_results(
    path: Path,
    started: str,
    load_start: tuple,
    load_end: tuple,
    info: dict,
    ref_info: dict | None,
    rows: list[Row],
    cb_line: str,
    loop_line: str,
    profiles: dict[str, dict[str, float]],
    repeats: int,
    window: float,
    quick: bool,
) -> None:
    ref_name = (
        f"PyTorch {ref_info['version']} ({ref_info['threads']} threads)"
        if ref_info
        else "PyTorch not installed"
    )
    text = [
        "# bench/runtime_bench.py results (host measurements)",
        "",
        f"- run {started}{' (--quick: a smoke run, not a measurement)' if quick else ''}; "
        f"{os.cpu_count()} cores; load average (1/5/15 min) at start "
        f"{load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, at end "
        f"{load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f}",
        f"- ours: {info['settings']}",
        f"- reference: {ref_name}; interleaved: {repeats} repeats of alternating windows "
        f"(~{window}s each), both processes alive throughout",
        "- ratio = PyTorch step time / ours, per repeat: median [min-max]; % of peak divides by "
        "that side's float32 GEMM peak measured in the same repeat",
        "",
        "| row (shapes) | ours | PyTorch | ours/PyTorch | target | ours % of peak "
        "| PyTorch % of peak | load (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.ref and r.ref_label == "PyTorch":
            rs = r.ratios
            ratio = f"{statistics.median(rs):.2f}x [{min(rs):.2f}-{max(rs):.2f}]"
            ref_rate = f"{r.rate(r.ref):,.0f}"
        else:
            ratio, ref_rate = "-", "n/a"
        text.append(
            f"| {r.label} | {r.rate(r.ours):,.0f} {r.unit}/s | {ref_rate} | {ratio} | "
            f">= {r.target}x | {fmt_pct(r.pct_peak(r.ours, r.ours_peak))} | "
            f"{fmt_pct(r.pct_peak(r.ref, r.ref_peak)) if ref_info else '-'} | "
            f"{min(r.load):.1f}-{max(r.load):.1f} |"
        )
    peaks_o = [p for r in rows for p in r.ours_peak]
    peaks_r = [p for r in rows for p in r.ref_peak]
    text += [
        "",
        f"- float32 GEMM peak in the interleaving (GFLOP/s, median [range]): ours "
        f"{statistics.median(peaks_o):.0f} [{min(peaks_o):.0f}-{max(peaks_o):.0f}]"
        + (
            f", PyTorch {statistics.median(peaks_r):.0f} [{min(peaks_r):.0f}-{max(peaks_r):.0f}]"
            if peaks_r and ref_info
            else ""
        ),
    ]
    if cb_line:
        text.append(f"- {cb_line}")
    if loop_line:
        text.append(f"- {loop_line}")
    text.append(f"- {executor_note()}")
    for key, prof in profiles.items():
        text += [
            "",
            f"Per-layer profile, ours, {CASES[key].label} (exclusive time per step):",
            "",
            "```",
            *profile_lines(prof),
            "```",
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "\n".join(text) + "\n")


if __name__ == "__main__":
    sys.exit(main())
