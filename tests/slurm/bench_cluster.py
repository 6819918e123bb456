"""Host measurements of the Slurm test cluster: start/stop time of .ci/slurm/start.sh / stop.sh
and srun round trips, heterogeneous (csrun_wse's 3-component line) and plain, with the backfill
setting start.sh uses (bf_interval=1) and, for contrast, Slurm's default (bf_interval=30).

Usage (root, Slurm installed): python3 tests/slurm/bench_cluster.py [--repeat N] [--no-default]
Runs private clusters (own state dir and free ports, no /etc/slurm copy), so a running test
cluster is not disturbed. Prints host wall-clock times (these are not CS-2 estimates).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_helpers import START, STOP, cluster_env, free_port_block

HET = [
    "--unbuffered",
    "--kill-on-bad-exit",
    "--exclusive",
    "--nodes=1",
    "--tasks-per-node=1",
    ":",
    "--nodes=1",
    "--tasks-per-node=1",
    "--exclusive",
    ":",
    "--nodes=2",
    "--tasks-per-node=3",
    "--exclusive",
    "true",
]
PLAIN_1 = ["-N1", "-n1", "true"]
PLAIN_4 = ["--exclusive", "-N4", "--ntasks-per-node=2", "true"]


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}")


def fmt(samples: list[float]) -> str:
    return (
        f"mean {statistics.mean(samples):6.3f} s  min {min(samples):6.3f}  "
        f"max {max(samples):6.3f}  (n={len(samples)})"
    )


def bench(sched: str, repeat: int, het_repeat: int) -> None:
    state = Path(tempfile.mkdtemp(prefix="scib-", dir="/tmp"))
    base = free_port_block(5)
    env = cluster_env(
        state,
        SLURM_CI_ETC="0",
        SLURM_CI_INSTALL="0",
        SLURM_CI_SCHED=sched,
        SLURM_CI_CTLD_PORT=str(base),
        SLURM_CI_NODE_PORT=str(base + 1),
    )
    print(f"\n== SchedulerParameters={sched}")
    try:
        starts, stops, noops = [], [], []
        for _ in range(repeat):
            starts.append(timed(lambda: run(["bash", str(START)], env)))
            noops.append(timed(lambda: run(["bash", str(START)], env)))
            stops.append(timed(lambda: run(["bash", str(STOP)], env)))
        print(f"start.sh (installed, nothing running -> 4 nodes idle)  {fmt(starts)}")
        print(f"start.sh (already up: no-op)                            {fmt(noops)}")
        print(f"stop.sh  (no jobs)                                      {fmt(stops)}")
        run(["bash", str(START)], env)
        for label, argv, n in [
            ("srun -N1 -n1 true", PLAIN_1, repeat * 3),
            ("srun --exclusive -N4 --ntasks-per-node=2 true", PLAIN_4, repeat),
            (
                "srun het 1:1:2x3 (csrun_wse --total-nodes=4 "
                "--single-task-nodes=2 --tasks-per-node=3) true",
                HET,
                het_repeat,
            ),
        ]:
            samples = [timed(lambda a=argv: run(["srun", *a], env)) for _ in range(n)]
            print(f"{label:<55} {fmt(samples)}")
    finally:
        run(["bash", str(STOP)], env)
        shutil.rmtree(state, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--no-default",
        action="store_true",
        help="skip the slow contrast run with Slurm's default bf_interval=30",
    )
    args = ap.parse_args()
    print(
        subprocess.run(["srun", "--version"], capture_output=True, text=True).stdout.strip(),
        "| host wall-clock times",
    )
    bench("batch_sched_delay=0,bf_interval=1", args.repeat, args.repeat)
    if not args.no_default:
        bench("batch_sched_delay=0", 1, 2)


if __name__ == "__main__":
    main()
