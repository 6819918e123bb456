"""csrun_wse on real Slurm vs on the embedded scheduler: the same job, interleaved in one run.

Usage: python bench/slurm_bench.py [--rounds N]   (needs the test cluster: bash .ci/slurm/start.sh)

Two figures per scheduler, host wall-clock measurements (not CS-2 estimates):
* tasks started: from starting `csrun_wse` to the last of its tasks starting (each task writes
  time.time() as its first act), for the Weight Streaming Quickstart's shape scaled to the 4-node
  test cluster:
  --total-nodes 4 --tasks-per-node 2 --cpus-per-task 8 --single-task-nodes 2 --cyclic;
* first step: from starting `csrun_wse` to the first `Train Device=CSX, Step=` line of the Weight
Streaming Quickstart's
  python-ws GPT-J run with that shape (only when the exec and streamers code is present).
Rounds alternate embedded / slurm so both see the same machine load. Target: Slurm adds
under 1.5 s with the backfill settings (bf_interval=1).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "slurm"))

from slurm_helpers import probe_cluster  # noqa: E402
from slurmbe_helpers import CLUSTER_YAML, launcher_env, wait_all_idle  # noqa: E402

SHAPE = [
    "--total-nodes",
    "4",
    "--tasks-per-node",
    "2",
    "--cpus-per-task",
    "8",
    "--single-task-nodes",
    "2",
    "--cyclic",
]
STAMP = (
    "import os, sys, time; open(os.path.join(sys.argv[1], os.environ['SLURM_PROCID']), "
    "'w').write(repr(time.time()))"
)
QUICKSTART = [
    "python-ws",
    "run.py",
    "--model_dir",
    "model_dir",
    "--cs_ip",
    "127.0.1.1",
    "--params",
    "configs/params_continuous_pretraining.yaml",
    "--mode",
    "train",
    "--max_steps",
    "1",
]
GPTJ = REPO / "runtime" / "modelzoo" / "gptj"
BIN = Path(sys.executable).parent
VARIANTS = (
    ("embedded", "embedded", False),
    ("slurm", "slurm", False),
    ("embedded-cold", "embedded", True),
)


def tasks_started(env: dict[str, str], work: Path, cold: bool = False) -> float:
    out = Path(tempfile.mkdtemp(dir=work))
    t0 = time.time()
    res = subprocess.run(
        [str(BIN / "csrun_wse"), *SHAPE, "python3", "-c", STAMP, str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    if res.returncode != 0:
        raise SystemExit(f"csrun_wse failed ({env['CS2_SCHEDULER']}): {res.stderr[-500:]}")
    stamps = [float(p.read_text()) for p in out.iterdir()]
    assert len(stamps) == 6, stamps
    return max(stamps) - t0


def first_step(env: dict[str, str], work: Path, cold: bool = False) -> float:
    run = Path(tempfile.mkdtemp(dir=work))
    shutil.copy(GPTJ / "run.py", run / "run.py")
    shutil.copytree(GPTJ / "configs", run / "configs")
    t0 = time.perf_counter()
    # cold: `python-ws -u run.py`: the embedded backend execs a fresh interpreter per task (as
    # srun does) instead of forking its preloaded one: isolates the scheduler's own cost
    line = [QUICKSTART[0], "-u", *QUICKSTART[1:]] if cold else QUICKSTART
    proc = subprocess.Popen(
        [str(BIN / "csrun_wse"), *SHAPE, *line],
        cwd=run,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    seconds = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if seconds is None and "Train Device=CSX, Step=" in line:
            seconds = time.perf_counter() - t0
    if proc.wait() != 0 or seconds is None:
        raise SystemExit(
            f"the Quickstart's run failed ({env['CS2_SCHEDULER']}, exit {proc.returncode})"
        )
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    cluster = probe_cluster()
    if isinstance(cluster, str):
        raise SystemExit(f"slurm_bench: {cluster}")
    training = all(
        importlib.util.find_spec(m)
        for m in (
            "cs2sim.runtime.job.cs_run",
            "cs2sim.runtime.job.roles",
            "cs2sim.runtime.job.streamers",
        )
    )
    with tempfile.TemporaryDirectory(prefix="slurm-bench-") as tmp:
        work = Path(tmp)
        (work / "cluster.yaml").write_text(CLUSTER_YAML)
        base = launcher_env(work / "home", work / "cluster.yaml", "embedded")
        base.pop("CS2SIM_LAUNCH_TIMING", None)
        if training:
            for command in (
                "system standby --yes",
                "config execmode setup weight-streaming",
                "system activate",
            ):
                subprocess.run(
                    [str(BIN / "cs"), "-c", command],
                    env=base,
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
        measures = {"tasks started": tasks_started}
        if training:
            measures["first step"] = first_step
        results: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds + 1):  # round 0 warms caches up and is not counted
            for name, fn in measures.items():
                variants = VARIANTS if name == "first step" else VARIANTS[:2]
                for label, scheduler, cold in variants:
                    wait_all_idle()
                    env = {**base, "CS2_SCHEDULER": scheduler}
                    value = fn(env, work, cold)
                    if r:
                        results.setdefault((name, label), []).append(value)
    print(
        f"csrun_wse start -> ..., host wall-clock, {args.rounds} interleaved rounds, "
        f"load average {os.getloadavg()[0]:.2f}, Slurm {cluster.nodes}"
    )
    print(f"{'measure':<15} {'embedded s':>11} {'slurm s':>9} {'slurm-emb s':>12} {'ratio':>6}")
    for name in measures:
        emb = statistics.median(results[(name, "embedded")])
        slu = statistics.median(results[(name, "slurm")])
        print(
            f"{name:<15} {emb:>11.3f} {slu:>9.3f} {slu - emb:>12.3f} {slu / emb:>6.2f}  "
            f"(medians; slurm {min(results[(name, 'slurm')]):.3f}-"
            f"{max(results[(name, 'slurm')]):.3f}, embedded "
            f"{min(results[(name, 'embedded')]):.3f}-{max(results[(name, 'embedded')]):.3f})"
        )
        verdict = "meets" if slu - emb < 1.5 else "MISSES"
        print(f"{'':<15} target: Slurm adds < 1.5 s -> {verdict} ({slu - emb:.3f} s)")
        if (name, "embedded-cold") in results:
            cold = statistics.median(results[(name, "embedded-cold")])
            print(
                f"{'':<15} embedded with cold tasks (python-ws -u: exec'ed, not forked from "
                f"the preloaded launcher): {cold:.3f} s; Slurm adds {slu - cold:.3f} s over "
                f"it (ratio {slu / cold:.2f})"
            )
    if not training:
        print(
            "first step: not measured (needs runtime.cs_run, runtime.roles and "
            "runtime.data.streamers: the exec and streamers branches)"
        )


if __name__ == "__main__":
    main()
