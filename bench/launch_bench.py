"""Launcher benchmarks: task start-up of the Weight Streaming Quickstart's job, and the scheduler's
scale.

1. `csrun_wse --total-nodes 14 --tasks-per-node 8 --cpus-per-task 16 --single-task-nodes 2
   --cyclic python-ws <task>`: 98 tasks, each a real process. Measured from the moment the
   csrun_wse process is started to the moment the LAST task runs its first line of the command
   (each task writes time.time() to a file), and the peak memory of the whole process tree
   (launcher + 98 tasks: the sum of PSS, which counts pages shared copy-on-write once; the sum of
   RSS is printed too). The same job with `python -u` (an interpreter option, so every task is a
   cold exec of the interpreter) is the baseline the fork design avoids.
2. Launch to first step: a real training job (fc_mnist, params_small.yaml, one step) launched as
   `csrun_wse --total-nodes 1 --tasks-per-node 5` (a chief and 4 input streamer tasks, which
   find the chief, pass its channel's handshake and prime the pipeline), timed from the moment
   csrun_wse is started to the chief's first `Step=` line on the launcher's output.
3. Scheduling: 1,000 queued jobs (1..16 nodes each) on a 1,024-node cluster configuration. The
   pure decision (system/sched/fit.py) and the store-backed pass (system/sched/queue.py, one
   SQLite transaction per pass) are timed per decision, at 250 / 500 / 1,000 / 2,000 jobs to show
   the growth is linear.

All figures are host measurements on this machine. Usage: python bench/launch_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
TASK = (
    "import os, sys, time; d = sys.argv[1]; "
    "open(os.path.join(d, os.environ['SLURM_PROCID']), 'w').write(repr(time.time())); "
    "time.sleep(float(sys.argv[2]))"
)
SEED_FLAGS = [
    "--total-nodes",
    "14",
    "--tasks-per-node",
    "8",
    "--cpus-per-task",
    "16",
    "--single-task-nodes",
    "2",
    "--cyclic",
]


def _children(root: int) -> list[int]:
    """root and all its descendants (from /proc)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            parent[int(entry)] = int(stat[stat.rfind(b")") + 2 :].split()[1])
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(p for p, pp in parent.items() if pp == pid)
    return out


def _mem(pids: list[int]) -> tuple[int, int]:
    """(sum of PSS, sum of RSS) in KiB."""
    pss = rss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
                elif line.startswith("Rss:"):
                    rss += int(line.split()[1])
        except OSError:
            continue
    return pss, rss


def launch_once(python_word: list[str], hold: float) -> tuple[float, int, int, int]:
    """(seconds to the last task started, peak PSS KiB, peak RSS KiB, tasks seen)."""
    with tempfile.TemporaryDirectory() as tmp:
        home, out = Path(tmp) / "home", Path(tmp) / "out"
        out.mkdir()
        env = {**os.environ, "CS2_HOME": str(home)}
        env.pop("CS2_CLUSTER", None)
        t0 = time.time()
        proc = subprocess.Popen(
            [str(BIN / "csrun_wse"), *SEED_FLAGS, *python_word, "-c", TASK, str(out), str(hold)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        peak_pss = peak_rss = 0
        while proc.poll() is None:
            pss, rss = _mem(_children(proc.pid))
            peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
            time.sleep(0.1)
        starts = [float(p.read_text()) for p in out.iterdir()]
        if proc.returncode != 0 or not starts:
            raise SystemExit(f"the benchmark job failed (exit {proc.returncode})")
        return max(starts) - t0, peak_pss, peak_rss, len(starts)


def bench_launch(runs: int) -> None:
    print(
        "== csrun_wse start to all 98 tasks started (the Weight Streaming Quickstart's layout; "
        "host measurement) =="
    )
    for label, word in (
        ("forked from the launcher (python-ws -c)", ["python-ws"]),
        ("cold exec per task (python-ws -u -c)", ["python-ws", "-u"]),
    ):
        results = [launch_once(word, hold=1.5) for _ in range(runs)]
        times = sorted(r[0] for r in results)
        pss = max(r[1] for r in results) / 1024 / 1024
        rss = max(r[2] for r in results) / 1024 / 1024
        print(
            f"{label:42s} tasks={results[0][3]}  start {times[0]:.2f}-{times[-1]:.2f} s "
            f"(median {statistics.median(times):.2f} s over {runs})  peak memory of the "
            f"tree: PSS {pss:.2f} GiB (RSS sum {rss:.2f} GiB)"
        )
    print("targets: start < 2 s, peak memory < 4 GiB")


ROOT = Path(__file__).resolve().parents[1]
FC = ROOT / "runtime" / "modelzoo" / "fc_mnist"


def first_step_once() -> float:
    """Seconds from starting csrun_wse to the chief's first `Step=` line (host measurement)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CS2_HOME": str(Path(tmp) / "home")}
        env.pop("CS2_CLUSTER", None)
        t0 = time.time()
        proc = subprocess.Popen(
            [
                str(BIN / "csrun_wse"),
                "--total-nodes",
                "1",
                "--tasks-per-node",
                "5",
                "python",
                str(FC / "run.py"),
                "-p",
                str(FC / "configs" / "params_small.yaml"),
                "-m",
                "train",
                "--max_steps",
                "1",
                "-o",
                str(Path(tmp) / "md"),
            ],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        took = None
        assert proc.stdout is not None
        for line in proc.stdout:
            if took is None and "Step=" in line:
                took = time.time() - t0
        if proc.wait() != 0 or took is None:
            raise SystemExit(f"the first-step job failed (exit {proc.returncode})")
        return took


def bench_first_step(runs: int) -> None:
    print(
        "== csrun_wse start to the first training step (chief + 4 streamers; host measurement) =="
    )
    times = sorted(first_step_once() for _ in range(runs))
    print(
        f"launch to first step: {times[0]:.2f}-{times[-1]:.2f} s (median "
        f"{statistics.median(times):.2f} s over {runs})"
    )


def _jobs(n: int, seed: int = 1) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(i + 1, rng.randint(1, 16)) for i in range(n)]


def bench_pure(n_jobs: int, n_nodes: int = 1024) -> tuple[float, int]:
    """Drain a queue of n_jobs with the pure FIFO pass; (seconds per decision, decisions)."""
    from cs2sim.system.sched.fit import NodeInfo, Pending, fifo_pass
    from cs2sim.system.sched.request import Component

    nodes = [NodeInfo(f"n{i}", 128) for i in range(n_nodes)]
    pending = [Pending(j, (Component(k, 8, 16),)) for j, k in _jobs(n_jobs)]
    # start full: every node busy, jobs end one at a time (the queue stays long)
    free: list[NodeInfo] = []
    running: list[tuple[int, list[NodeInfo]]] = [(0, list(nodes))]
    decisions = 0
    spent = 0.0
    rng = random.Random(2)
    while pending:
        _, freed = running.pop(rng.randrange(len(running)))
        free.extend(freed)
        free.sort(key=lambda n: int(n.name[1:]))
        t = time.perf_counter()
        started = list(fifo_pass(pending, free))
        spent += time.perf_counter() - t
        decisions += len(started)
        by_name = {n.name: n for n in nodes}
        for job, placed in started:
            if placed is not None:
                pending.remove(job)
                running.append((job.job_id, [by_name[x] for part in placed for x in part]))
        if not running and pending:
            raise SystemExit("bench: queue stuck")
    return spent / max(1, decisions), decisions


def bench_store(n_jobs: int, n_nodes: int = 1024) -> tuple[float, float, int]:
    """The store-backed pass on a real store: (seconds per submit, per decision, decisions)."""
    from cs2sim.system.sched import queue
    from cs2sim.system.sched.fit import NodeInfo
    from cs2sim.system.sched.request import Component, JobRequest
    from cs2sim.system.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp))
        nodes = [NodeInfo(f"n{i}", 128) for i in range(n_nodes)]
        blocker = queue.submit(
            store, JobRequest((Component(n_nodes, 1),), ("x",)), user="b", nodes=nodes
        )
        t = time.perf_counter()
        for _, k in _jobs(n_jobs):
            queue.submit(store, JobRequest((Component(k, 8, 16),), ("x",)), user="u", nodes=nodes)
        per_submit = (time.perf_counter() - t) / n_jobs
        queue.finish(store, blocker, "COMPLETED", 0)
        decisions = 0
        spent = 0.0
        rng = random.Random(3)
        while True:
            t = time.perf_counter()
            with store.transaction() as db:
                started = queue.schedule(db, nodes)
            spent += time.perf_counter() - t
            decisions += started + 1  # the jobs started and the one that blocks
            with store.read() as db:
                running = [
                    r[0] for r in db.execute("SELECT id FROM sched_jobs WHERE state = 'RUNNING'")
                ]
                left = db.execute(
                    "SELECT count(*) FROM sched_jobs WHERE state = 'PENDING'"
                ).fetchone()[0]
            if not left:
                break
            queue.finish(store, rng.choice(running), "COMPLETED", 0)
        store.close()
    return per_submit, spent / decisions, decisions


def bench_sched(sizes: list[int]) -> None:
    print("== scheduling decisions on a 1,024-node cluster configuration (host measurement) ==")
    for n in sizes:
        pure, dec = bench_pure(n)
        sub, store_dec, sdec = bench_store(n)
        print(
            f"{n:5d} queued jobs: pure decision {pure * 1e6:7.1f} us ({dec} decisions); "
            f"store-backed pass {store_dec * 1e3:6.3f} ms per decision ({sdec}), "
            f"submit {sub * 1e3:.2f} ms"
        )
    print("target: < 1 ms per scheduling decision at 1,000 queued jobs, growing linearly")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one launch run, fewer queue sizes")
    ap.add_argument(
        "--first-step-only",
        action="store_true",
        help="only the launch-to-first-step figure (5 runs)",
    )
    args = ap.parse_args()
    if args.first_step_only:
        bench_first_step(5)
        return
    bench_launch(1 if args.quick else 3)
    bench_first_step(1 if args.quick else 3)
    bench_sched([250, 1000] if args.quick else [250, 500, 1000, 2000])


if __name__ == "__main__":
    main()
