"""What waiting in the embedded queue costs: idle CPU of N waiting launchers, and the
time from nodes freeing to the next job starting.

    python bench/queue_bench.py --label after [--real 10,100] [--sim 10,100,1000] [--window 20]

Setup, per case: a fresh $CS2_HOME; a blocker job (submitted by this process, so its launcher
is alive) holds all 16 nodes of the default cluster; then N waiters each ask for the whole
cluster, so they queue behind it in FIFO order.

  real  N real `csrun_wse --total-nodes=16 --tasks-per-node=1 --cpus-per-task=1 python -c ...`
        processes (N = 10, 100: what fits in memory).
  sim   N waiters as threads of 4 worker processes, each thread running the launcher's own code
        path (EmbeddedBackend.allocate / release on its own store connection): how 1,000 queued
        jobs are simulated where 1,000 interpreters would not fit.

Idle CPU: once all N are PENDING (or failed: a simulated waiter whose allocate() raised, e.g.
"the system store is busy", is counted in the last column), and 3 s more, the CPU time (utime +
stime, /proc) of the
waiting processes over --window seconds, as cores (1.0 = one core busy).
Hand-off: the blocker is finished (as its launcher would: queue.finish with a scheduling pass),
then each job that starts holds the cluster for HOLD_S and ends; `latency` is the time from one
job's end to the next one's start, for the first CHAIN hand-offs. real: from the task's last line
to the next job's first task's first line (launcher exit detection, release, wake-up, allocation,
fork); sim: from release() being called to the next waiter's allocate() returning.

All figures are host measurements on this machine (2 cores, shared: the load average is recorded).
The script uses only interfaces that exist in both versions, so the same file measures an
older checkout (run it with that checkout's venv) and this one. Results are appended to
bench/results/queue.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "queue.md"
BIN = Path(sys.executable).parent
HOLD_S = 0.3  # how long each job of the hand-off chain holds the cluster
CHAIN = 8  # hand-offs measured per case
SIM_PROCS = 4  # worker processes the simulated waiters are spread over
TICK = os.sysconf("SC_CLK_TCK")

TASK = (
    "import os, sys, time\n"
    "if os.environ['SLURM_PROCID'] == '0':\n"
    "    d, j = sys.argv[1], os.environ['SLURM_JOB_ID']\n"
    "    open(os.path.join(d, j + '.start'), 'w').write(repr(time.time()))\n"
    "    time.sleep(float(sys.argv[2]))\n"
    "    open(os.path.join(d, j + '.end'), 'w').write(repr(time.time()))\n"
)

# One simulated waiter process: T threads, each a launcher's allocate -> hold -> release.
SIM_WORKER = r"""
import json, os, sys, threading, time
from pathlib import Path
from cs2sim.system.store import Store
from cs2sim.system.sched.backend import EmbeddedBackend
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.sched.runner import StepResult

home, n, hold, out = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
ready = threading.Barrier(n + 1)

def waiter(k):
    store = Store.open(home)
    backend = EmbeddedBackend(store)
    backend.nodes  # read the cluster before queueing, as a launcher does
    req = JobRequest((Component(16, 1, 1),), ("python", "-c", "pass"), name="sim")
    ready.wait()
    try:
        alloc = backend.allocate(req, user="bench", events=lambda line: None,
                                 stop_requested=lambda: None)
    except Exception as e:  # e.g. "the system store is busy": counted, not hidden
        (out / f"failed-{os.getpid()}-{k}").write_text(f"{type(e).__name__}: {e}")
        return
    t_alloc = time.time()
    time.sleep(hold)
    t_release = time.time()
    backend.release(alloc, StepResult([], 0))
    rec = {"job": alloc.job_id, "alloc": t_alloc, "release": t_release}
    (out / f"{alloc.job_id}.json").write_text(json.dumps(rec))

threads = [threading.Thread(target=waiter, args=(k,), daemon=True) for k in range(n)]
for t in threads:
    t.start()
ready.wait()
print("ready", flush=True)
while True:
    time.sleep(3600)
"""


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15: utime, stime
    return total / TICK


def pending_count(home: Path) -> int:
    """PENDING rows, read without a write lock (a plain sqlite connection)."""
    try:
        db = sqlite3.connect(home / "cs2sim.db", timeout=30)
        try:
            return int(
                db.execute("SELECT count(*) FROM sched_jobs WHERE state = 'PENDING'").fetchone()[0]
            )
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def wait_pending(
    home: Path, n: int, procs: list[subprocess.Popen], limit: float, out: Path | None = None
) -> tuple[float, int]:
    """(seconds until every waiter queued or failed, how many queued); RuntimeError after
    `limit`. A simulated waiter that failed leaves a `failed-*` file in `out`; a real one exits."""
    t0 = time.monotonic()
    while True:
        queued = pending_count(home)
        if out is not None:
            failed = len(list(out.glob("failed-*")))
        else:  # a real launcher that exited while queued failed (e.g. "store busy")
            failed = sum(1 for p in procs if p.poll() is not None)
        if queued + failed >= n:
            return time.monotonic() - t0, queued
        if time.monotonic() - t0 > limit:
            raise RuntimeError(f"only {queued} of {n} jobs queued in {limit:g} s")
        time.sleep(0.5)


def block(home: Path) -> tuple[object, int, object]:
    """(store, blocker job id, nodes): a job of this process holding every node."""
    from cs2sim.system.sched import queue
    from cs2sim.system.sched.request import Component, JobRequest
    from cs2sim.system.store import Store

    store = Store.open(home)
    nodes = queue.cluster_nodes(store)
    req = JobRequest((Component(len(nodes), 1, 1),), ("blocker",), name="blocker")
    return store, queue.submit(store, req, user="bench", nodes=nodes), nodes


def release(store: object, job_id: int, nodes: object) -> float:
    """Finish the blocker as its launcher would; the time its nodes became free."""
    from cs2sim.system.sched import queue

    queue.finish(store, job_id, "COMPLETED", 0, nodes)  # type: ignore[arg-type]
    return time.time()


def measure_idle(pids: list[int], window: float) -> float:
    """Cores used by `pids` over `window` seconds."""
    c0, t0 = cpu_seconds(pids), time.monotonic()
    time.sleep(window)
    return (cpu_seconds(pids) - c0) / (time.monotonic() - t0)


def chain_latencies(out: Path, t_free: float, kind: str, n: int) -> list[float]:
    # n: the waiters that queued
    """The hand-off latencies of the first min(n, CHAIN) jobs (s), waiting for them."""
    want = min(n, CHAIN)
    deadline = time.monotonic() + 60 + want * (HOLD_S + 5)
    while time.monotonic() < deadline:
        done = _records(out, kind)
        if len(done) >= want and (kind == "sim" or all("end" in r for r in done[: want - 1])):
            break
        time.sleep(0.2)
    done = _records(out, kind)[:want]
    lat, prev = [], t_free
    for r in done:
        lat.append(r["start"] - prev)
        prev = r.get("end", 0.0)
    return lat


def _records(out: Path, kind: str) -> list[dict[str, float]]:
    recs = []
    if kind == "real":
        for p in out.glob("*.start"):
            r = {"start": float(p.read_text())}
            end = p.with_suffix(".end")
            if end.exists():
                r["end"] = float(end.read_text())
            recs.append(r)
    else:
        for p in out.glob("*.json"):
            try:
                d = json.loads(p.read_text())
            except ValueError:
                continue
            recs.append({"start": d["alloc"], "end": d["release"]})
    return sorted(recs, key=lambda r: r["start"])


def run_real(n: int, window: float) -> tuple[float, list[float], tuple[float, int, int]]:
    """(idle cores, hand-off latencies, (seconds to queue, how many queued, how many failed))."""
    with tempfile.TemporaryDirectory() as tmp:
        home, out = Path(tmp) / "home", Path(tmp) / "out"
        out.mkdir()
        env = {**os.environ, "CS2_HOME": str(home)}
        env.pop("CS2_CLUSTER", None)
        store, blocker, nodes = block(home)
        procs: list[subprocess.Popen] = []
        try:
            for _ in range(n):
                procs.append(
                    subprocess.Popen(
                        [
                            str(BIN / "csrun_wse"),
                            "--total-nodes=16",
                            "--tasks-per-node=1",
                            "--cpus-per-task=1",
                            "python",
                            "-c",
                            TASK,
                            str(out),
                            str(HOLD_S),
                        ],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        cwd=tmp,
                    )
                )
            queued = wait_pending(home, n, procs, 60 + 3 * n)
            time.sleep(3)
            idle = measure_idle([p.pid for p in procs], window)
            lat = chain_latencies(out, release(store, blocker, nodes), "real", queued[1])
            broken = sum(1 for p in procs if p.poll() not in (None, 0))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            store.close()  # type: ignore[attr-defined]
    return idle, lat, (*queued, broken)


def run_sim(n: int, window: float) -> tuple[float, list[float], tuple[float, int, int]]:
    """(idle cores, hand-off latencies, (seconds to queue, how many queued, how many failed))."""
    with tempfile.TemporaryDirectory() as tmp:
        home, out = Path(tmp) / "home", Path(tmp) / "out"
        out.mkdir()
        env = {**os.environ, "CS2_HOME": str(home)}
        env.pop("CS2_CLUSTER", None)
        store, blocker, nodes = block(home)
        per = [n // SIM_PROCS + (1 if i < n % SIM_PROCS else 0) for i in range(SIM_PROCS)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", SIM_WORKER, str(home), str(k), str(HOLD_S), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for k in per
            if k
        ]
        try:
            queued = wait_pending(home, n, procs, 300 + 2 * n, out)
            time.sleep(3)
            idle = measure_idle([p.pid for p in procs], window)
            lat = chain_latencies(out, release(store, blocker, nodes), "sim", queued[1])
            broken = len(list(out.glob("failed-*")))
        finally:
            for p in procs:
                p.kill()
                p.wait()
            store.close()  # type: ignore[attr-defined]
    return idle, lat, (*queued, broken)


def _fmt_lat(lat: list[float]) -> str:
    if not lat:
        return "none started"
    ms = [x * 1e3 for x in lat]
    return (
        f"median {statistics.median(ms):.0f} ms (min {min(ms):.0f}, max {max(ms):.0f}, "
        f"{len(ms)} hand-offs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", default="this checkout", help="what is measured (before/after)")
    ap.add_argument("--real", default="10,100", help="counts of real launchers ('' for none)")
    ap.add_argument("--sim", default="10,100,1000", help="counts of simulated waiters")
    ap.add_argument("--window", type=float, default=20.0, help="idle CPU window, seconds")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    head = (
        f"\n## {args.label}: {time.strftime('%Y-%m-%d %H:%M')} (load {load:.1f}, "
        f"{os.cpu_count()} CPUs), `python bench/queue_bench.py --real {args.real} --sim "
        f"{args.sim} --window {args.window:g}`\n\n"
        "| waiters | kind | queued (in) | idle CPU (cores, all waiters) | per waiter | "
        "nodes free -> next job started | waiters that failed |\n"
        "|---:|---|---:|---:|---:|---|---|\n"
    )
    rows = []
    cases = [("real", int(x)) for x in args.real.split(",") if x]
    cases += [("sim", int(x)) for x in args.sim.split(",") if x]
    for kind, n in cases:
        idle, lat, (took, queued, broken) = (run_real if kind == "real" else run_sim)(
            n, args.window
        )
        why = " (`the system store is busy`)" if broken and kind == "sim" else ""
        row = (
            f"| {n:,} | {kind} | {queued:,} ({took:.0f} s) | {idle:.4f} | "
            f"{idle / max(1, queued) * 1e3:.3f} m | {_fmt_lat(lat)} | {broken:,}{why} |"
        )
        print(row, flush=True)
        rows.append(row)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    if not RESULTS.exists():
        RESULTS.write_text(
            "# Waiting in the embedded queue (host measurements)\n\n"
            "See bench/queue_bench.py's docstring for what is measured. "
            "`m` = thousandths of a core.\n"
        )
    with RESULTS.open("a") as f:
        f.write(head + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
