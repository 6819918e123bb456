"""Appliance benchmarks: the Wafer-Scale Cluster's client, csctl and the cluster server.

1. To the first step: `python run.py CSX` (its compile cached, the server running) against
   `csrun_wse ... python-ws run.py` for the same model and step count, interleaved, each from the
   moment the process is started to its first `| Train Device=` line. fc_mnist,
   params_small.yaml, one step, one system, a fresh model_dir every round (so both compile the
   run's own program inside the job alike; the CSX run's compile wsjob is skipped as cached).
2. `csctl get jobs -a` with 1,000 jobs in the server's history: the whole csctl process, and the
   request alone (one connection, one `get_jobs`, in this process).
3. The server's idle CPU with 100 queued execute jobs that cannot start (a system of every
   window held by another run): its utime + stime over a 20 s window, as a fraction of one core.
4. The server's CPU while 3 users x 10 queued jobs wait on a 2-system cluster, every job
   watched by its own connection as `run.py CSX` watches it, heartbeats included (the default
   period and a 1 s one): utime + stime over 20 s. The three users are three watcher processes
   of this OS user (a bench creates no accounts, and another uid could not run this interpreter
   here); the server's work per watch does not depend on whose it is.

All figures are host measurements on this machine. Usage: python bench/appliance_bench.py
[--rounds N] [--only first-step,history,idle,waiting]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
SMALL = ["-p", "configs/params_small.yaml", "--mode", "train", "--max_steps", "1"]


def _env(home: Path) -> dict[str, str]:
    from cs2sim.system.cluster import EXAMPLE_PATH

    return dict(os.environ, CS2_HOME=str(home), CS2_BOOT_SECONDS="0", CS2_CLUSTER=str(EXAMPLE_PATH))


def _to_first_step(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    seen = []
    took = None
    for line in proc.stdout:
        seen.append(line)
        if took is None and "| Train Device=" in line:
            took = time.perf_counter() - t0
    if proc.wait() != 0 or took is None:
        raise SystemExit(f"{' '.join(argv)} failed:\n{''.join(seen[-20:])}")
    return took


def first_step(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    from cs2sim.runtime.modelzoo import __file__ as zoo

    home = root / "home1"
    env = _env(home)
    model = root / "fc_mnist"
    shutil.copytree(Path(zoo).parent / "fc_mnist", model)
    csx = [sys.executable, "run.py", "CSX", *SMALL, "--compile_dir", str(root / "compiles")]
    wse = [
        str(BIN / "csrun_wse"),
        "--total-nodes=3",
        "--single-task-nodes=2",
        "--tasks-per-node=1",
        "--cpus-per-task=1",
        "python-ws",
        "run.py",
        *SMALL,
        "--cs_ip",
        "cs2-1",
    ]
    _to_first_step([*csx, "-o", "warm-csx"], model, env)  # starts the server, caches the compile
    _to_first_step([*wse, "-o", "warm-wse"], model, env)
    a, b = [], []
    for i in range(rounds):
        a.append(_to_first_step([*csx, "-o", f"csx-{i}"], model, env))
        b.append(_to_first_step([*wse, "-o", f"wse-{i}"], model, env))
    subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.cluster_server", "stop"],
        env=env,
        capture_output=True,
    )
    return a, b


def _stop(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.cluster_server", "stop"],
        env=env,
        capture_output=True,
    )


def history(root: Path) -> tuple[float, float]:
    from cs2sim.system.appliance.jobs import JobBook, WsJob, new_id

    home = root / "home2"
    home.mkdir(mode=0o700)
    (home / "wsjob").mkdir(mode=0o700)
    book = JobBook(home / "wsjob" / "server.db")
    now = time.time()
    for i in range(1000):
        book.add(
            WsJob(
                id=new_id(),
                kind="execute" if i % 2 else "compile",
                user="bench",
                uid=os.getuid(),
                priority="p2",
                created=now - 3600 + i,
                phase="SUCCEEDED",
                started=now - 3600 + i + 1,
                ended=now - 3600 + i + 5,
                labels={"name": f"run{i}"},
                systems=["cs2-1"] if i % 2 else [],
                num_csx=1 if i % 2 else 0,
                epoch=0,
            )
        )
    book.close()
    env = _env(home)
    subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.cluster_server", "start"],
        env=env,
        check=True,
        capture_output=True,
    )
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = subprocess.run(
            [str(BIN / "csctl"), "get", "jobs", "-a"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        times.append(time.perf_counter() - t0)
        assert len(out.splitlines()) == 1001
    from cs2sim.system.appliance.client import connect

    calls = []
    for _ in range(5):
        t0 = time.perf_counter()
        conn = connect(home)
        assert len(conn.call("get_jobs", all=True)["jobs"]) == 1000
        conn.close()
        calls.append(time.perf_counter() - t0)
    _stop(env)
    return statistics.median(times), statistics.median(calls)


def idle_cpu(root: Path) -> float:
    from cs2sim.system.appliance.client import connect
    from cs2sim.system.machine import Machine
    from cs2sim.system.state import ExecMode
    from cs2sim.system.store import Store
    from cs2sim.system.users import Identity, Role

    home = root / "home3"
    env = _env(home)
    os.environ.update(CS2_HOME=str(home), CS2_CLUSTER=env["CS2_CLUSTER"], CS2_BOOT_SECONDS="0")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    store = Store.open(home)
    # another user's run holds cs2-1: every window of four systems includes it
    Machine(store, "cs2-1").register_job(
        Identity("other", Role.USER, "bench"),
        ExecMode.WEIGHT_STREAMING,
        "held by the bench",
        sleeper.pid,
    )
    subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.cluster_server", "start"],
        env=env,
        check=True,
        capture_output=True,
    )
    conn = connect(home)
    spec = {
        "cwd": str(root),
        "run_py": str(root / "run.py"),
        "wrapper": "python-ws",
        "args": [],
        "env": {},
    }
    for i in range(100):
        conn.call(
            "submit",
            kind="execute",
            priority=("p1", "p2", "p3")[i % 3],
            num_csx=4,
            mode="WEIGHT_STREAMING",
            spec=spec,
        )
    queued = [j for j in conn.call("get_jobs")["jobs"] if j["status"]["phase"] == "QUEUED"]
    assert len(queued) == 100, len(queued)
    conn.close()
    pid = int((home / "wsjob" / "server.pid").read_text())
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    time.sleep(3)
    c0, t0 = cpu(), time.perf_counter()
    time.sleep(20)
    used = (cpu() - c0) / (time.perf_counter() - t0)
    _stop(env)
    sleeper.kill()
    return used


USERS, JOBS_EACH = 3, 10
WATCHER = """
import sys, threading
from pathlib import Path
from cs2sim.system.appliance.client import connect
home, jobs, cwd = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
spec = {"cwd": cwd, "run_py": cwd + "/run.py", "wrapper": "python-ws", "args": [], "env": {}}
names = []
for i in range(jobs):
    c = connect(home)
    names.append(c.call("submit", kind="execute", priority="p2", num_csx=1 + i % 2,
                        mode="WEIGHT_STREAMING", spec=spec)["job"]["meta"]["name"])
    c.close()
beats = [0] * jobs
first = threading.Barrier(jobs + 1)
def watch(k):
    c = connect(home)
    said = False
    for event in c.watch(names[k], attach=True):
        if not said:
            said = True
            first.wait()
        if event["event"] == "heartbeat":
            beats[k] += 1
for k in range(jobs):
    threading.Thread(target=watch, args=(k,), daemon=True).start()
first.wait()
print("ready", flush=True)
sys.stdin.readline()
print("beats", sum(beats), flush=True)
"""


def waiting_cpu(root: Path, beat: float | None) -> tuple[float, int, float]:
    """(server cores while 3 x 10 watched jobs wait, heartbeats received, period s) on a
    2-system cluster whose systems another run holds."""
    import yaml

    from cs2sim.system.cluster import EXAMPLE_PATH
    from cs2sim.system.machine import Machine
    from cs2sim.system.state import ExecMode
    from cs2sim.system.store import Store
    from cs2sim.system.users import Identity, Role

    home = root / f"home4-{beat}"
    two = root / "cluster-two.yaml"
    data = yaml.safe_load(EXAMPLE_PATH.read_text())
    data["systems"] = data["systems"][:2]
    two.write_text(yaml.safe_dump(data))
    env = dict(_env(home), CS2_CLUSTER=str(two))
    if beat is not None:
        env["CS2_HEARTBEAT_SECONDS"] = str(beat)
    saved = {k: os.environ.get(k) for k in ("CS2_HOME", "CS2_CLUSTER", "CS2_BOOT_SECONDS")}
    os.environ.update(CS2_HOME=str(home), CS2_CLUSTER=str(two), CS2_BOOT_SECONDS="0")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    store = Store.open(home)
    for name in ("cs2-1", "cs2-2"):  # another user's runs hold both systems
        Machine(store, name).register_job(
            Identity("other", Role.USER, "bench"),
            ExecMode.WEIGHT_STREAMING,
            "held by the bench",
            sleeper.pid,
        )
    subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.cluster_server", "start"],
        env=env,
        check=True,
        capture_output=True,
    )
    watchers = []
    for _ in range(USERS):
        watchers.append(
            subprocess.Popen(
                [sys.executable, "-c", WATCHER, str(home), str(JOBS_EACH), str(root)],
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        )
    for w in watchers:
        assert w.stdout is not None
        line = w.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit(f"a watcher failed: {line!r}")
    from cs2sim.system.appliance.client import connect

    conn = connect(home)
    queued = [j for j in conn.call("get_jobs")["jobs"] if j["status"]["phase"] == "QUEUED"]
    assert len(queued) == USERS * JOBS_EACH, len(queued)
    conn.close()
    pid = int((home / "wsjob" / "server.pid").read_text())
    tick = os.sysconf("SC_CLK_TCK")

    def cpu() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    time.sleep(3)
    c0, t0 = cpu(), time.perf_counter()
    time.sleep(20)
    used = (cpu() - c0) / (time.perf_counter() - t0)
    beats = 0
    for w in watchers:
        out, _ = w.communicate("stop\n", timeout=60)
        beats += int(out.split()[-1])
    _stop(env)
    sleeper.kill()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return used, beats, beat or 5.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", default="first-step,history,idle,waiting")
    args = p.parse_args()
    only = set(args.only.split(","))
    root = Path(tempfile.mkdtemp(prefix="cs2-appliance-bench-"))
    root.chmod(0o755)
    # the queued jobs' run.py: it never runs (their systems are held), but the server checks,
    # as the submitting user, that the file a submission names exists and may be read
    (root / "run.py").write_text("# the bench's queued jobs never start\n")
    try:
        if "waiting" in only:
            for beat in (None, 1.0):
                cores, beats, period = waiting_cpu(root, beat)
                print(
                    f"server while {USERS} users x {JOBS_EACH} watched jobs wait on 2 systems "
                    f"(3 watcher processes of one OS user), heartbeat every {period:g} s: "
                    f"{cores:.4f} core over 20 s, "
                    f"{beats} heartbeats received (host measurement; target: under 0.01)"
                )
        if "first-step" in only:
            a, b = first_step(root, args.rounds)
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"to the first step (host measurement, median of {args.rounds}, interleaved):")
            print(
                f"  python run.py CSX (compile cached) {ma:6.2f} s   rounds: "
                + ", ".join(f"{x:.2f}" for x in a)
            )
            print(
                f"  csrun_wse ... python-ws run.py     {mb:6.2f} s   rounds: "
                + ", ".join(f"{x:.2f}" for x in b)
            )
            print(f"  ratio CSX / csrun_wse: {ma / mb:.2f}x (target: within 1.5x)")
        if "history" in only:
            whole, call = history(root)
            print("csctl get jobs -a with 1,000 jobs in history (host measurement, median of 5):")
            print(
                f"  the csctl process: {whole:.3f} s; the request alone: {call:.3f} s "
                "(target: under 0.3 s)"
            )
        if "idle" in only:
            cores = idle_cpu(root)
            print(
                f"server idle with 100 queued jobs: {cores:.4f} core over 20 s "
                "(host measurement; target: under 0.01)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
