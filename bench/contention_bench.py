"""Training beside a fixed competing CPU load: how much slower do we get, and how much PyTorch?

    python bench/contention_bench.py [--busy 2] [--repeats 5] [--window 0.5] [--threads 2]

For each case (fc_mnist, the 4-layer GPT) three workers stay alive (bench_worker.py): ours as it
runs now (runtime/threads.py: waits sleep, the runtime's own workers, BLAS one thread a call),
ours as it ran before (OpenBLAS's own threads with its default spin, OPENBLAS_THREAD_TIMEOUT=28),
and PyTorch as a user runs it (its OpenMP defaults; with --ref-passive also PyTorch given the
same wait settings as ours). Each repeat runs every worker for one
window on the machine as it is, then starts --busy processes that each spin a core in pure
Python (the competing load), runs every worker again, and stops them. The order of the workers
rotates from repeat to repeat.

slowdown = step time with the busy loops / step time without, per repeat; the row gives the
median and range, and the CPU seconds a step used in both phases (a thread that spins while it
waits shows up as CPU time growing with the load for the same work). Fair share: with --busy
single-threaded loops beside our --threads threads on C cores, each runnable thread gets
C / (busy + threads) of a core, so a job that used `threads` cores quietly slows by
(busy + threads) / C at most: 2x for 2 loops beside 2 threads on 2 cores. The baseline phase is
the machine as it is (other work may be running); the load average is recorded.
Results go to bench/results/runtime_contention.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cases import CASES  # noqa: E402
from bench.runtime_bench import (  # noqa: E402
    SETTLE,
    Worker,
    WorkerError,
    calibrate,
    reference_env,
    start_reference,
)
from cs2sim.runtime.artifacts.atomic import atomic_write  # noqa: E402
from cs2sim.runtime.threads import SPIN_ENV  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "runtime_contention.md"
BUSY_CODE = "while True:\n    pass\n"


class BusyLoad:
    """`n` processes each spinning one core in pure Python, for the `with` block."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> BusyLoad:
        self.procs = [subprocess.Popen([sys.executable, "-c", BUSY_CODE]) for _ in range(self.n)]
        time.sleep(0.3)  # let the scheduler settle them on the cores
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", type=int, default=2, help="competing busy-loop processes")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--window", type=float, default=0.5, help="seconds of steps per window")
    ap.add_argument("--threads", type=int, default=2, help="threads for each side")
    ap.add_argument("--cases", default="fc,gpt", help="comma-separated case keys")
    ap.add_argument(
        "--ref-passive",
        action="store_true",
        help="also run PyTorch with OMP_WAIT_POLICY=PASSIVE / KMP_BLOCKTIME=0",
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run, not a measurement")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    repeats, window = (1, 0.1) if args.quick else (args.repeats, args.window)
    fair = (args.busy + args.threads) / (os.cpu_count() or 1)
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    legacy_env = {**reference_env(), "OPENBLAS_THREAD_TIMEOUT": "28"}  # OpenBLAS's default
    sides: dict[str, Worker] = {"ours": Worker("ours", args.threads)}
    sides["ours, OpenBLAS threads (before)"] = Worker(
        "ours", args.threads, legacy_env, ("--blas-threading",)
    )
    ref = start_reference(args.threads)
    if ref is not None:
        sides["PyTorch"] = ref
        if args.ref_passive:  # PyTorch given the same wait settings as ours, for comparison
            sides["PyTorch, passive waits"] = Worker(
                "torch", args.threads, {**reference_env(), **SPIN_ENV}
            )
    lines: list[str] = []
    table: list[str] = []
    try:
        for name, w in sides.items():
            info = w.ask(op="info")
            desc = info.get("settings") or f"PyTorch {info['version']}, {info['threads']} threads"
            lines.append(f"- {name}: {desc}")
            print(lines[-1])
        if ref is None:
            print("PyTorch is not installed: our figures only (pip install -e '.[bench]').")
        for key in args.cases.split(","):
            case = CASES[key]
            steps = {n: calibrate(w, key, window) for n, w in sides.items()}
            quiet: dict[str, list[float]] = {n: [] for n in sides}
            busy: dict[str, list[float]] = {n: [] for n in sides}
            cpu_q: dict[str, list[float]] = {n: [] for n in sides}
            cpu_b: dict[str, list[float]] = {n: [] for n in sides}
            loads: list[float] = []
            names = list(sides)
            for r in range(repeats):
                order = names[r % len(names) :] + names[: r % len(names)]  # rotate the order
                loads.append(os.getloadavg()[0])
                for n in order:
                    out = sides[n].ask(op="run", case=key, steps=steps[n])
                    quiet[n].append(statistics.median(out["sec"]))
                    cpu_q[n].append(out["cpu"])
                    time.sleep(SETTLE)
                with BusyLoad(args.busy):
                    for n in order:
                        out = sides[n].ask(op="run", case=key, steps=steps[n])
                        busy[n].append(statistics.median(out["sec"]))
                        cpu_b[n].append(out["cpu"])
                print(
                    f"{case.label} repeat {r + 1}/{repeats}: "
                    + ", ".join(f"{n} {busy[n][-1] / quiet[n][-1]:.2f}x" for n in order),
                    flush=True,
                )
            for n in sides:
                sl = [b / q for b, q in zip(busy[n], quiet[n], strict=True)]
                row = (
                    f"| {case.label} | {n} | {statistics.median(quiet[n]) * 1e3:.1f} | "
                    f"{statistics.median(busy[n]) * 1e3:.1f} | {statistics.median(sl):.2f}x "
                    f"[{min(sl):.2f}-{max(sl):.2f}] | {fair:.1f}x | "
                    f"{statistics.median(cpu_q[n]) * 1e3:.1f} -> "
                    f"{statistics.median(cpu_b[n]) * 1e3:.1f} | "
                    f"{min(loads):.1f}-{max(loads):.1f} |"
                )
                table.append(row)
                print(row)
    except WorkerError as e:
        print(f"a worker failed: {e}")
        return 1
    finally:
        for w in sides.values():
            w.close()
    load_end = os.getloadavg()
    text = [
        "# bench/contention_bench.py results (host measurements)",
        "",
        f"- run {started}{' (--quick: a smoke run)' if args.quick else ''}; {os.cpu_count()} "
        f"cores; competing load: {args.busy} busy-loop processes; {repeats} repeats, windows "
        f"~{window}s; load average (1/5/15 min) at start "
        f"{load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, at end "
        f"{load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f}",
        *lines,
        "- slowdown = step time beside the busy loops / without them, per repeat: median [range];"
        " fair share = (busy loops + our threads) / cores; CPU ms per step without -> with the "
        "loops (spinning shows as CPU time growing for the same work)",
        "",
        "| case (shapes) | side | ms/step without | ms/step with | slowdown | fair share "
        "| CPU ms/step | load (1 min) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
        *table,
    ]
    atomic_write(args.out, "\n".join(text) + "\n")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
