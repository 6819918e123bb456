"""The shared store's operation round trip, as a member of the sharing group sees it.

A store owned by root is shared (`cs-store share`) with a fresh OS group, and a fresh OS user of
that group (created here with useradd, removed at the end; so this needs root) times, in a
process of its own, what the console and the launchers ask of the store most:

- `Machine(store)`: opening the machine (the cluster's systems and the system's address);
- `status()`: `system show`'s read (settles a finished reboot or a dead job first);
- `entries(store, 20)`: `audit show --last 20`;
- `list_users(store)`: `user list`.

and, for comparison, the owner's own `status()` on the same store (in-process SQLite, no
service), and where this checkout has it, what `jobs cancel` adds to check a recorded process
before signalling it: `procfs.signal_recorded` (pidfd_open, the start tick and uid from /proc,
the pidfd checked alive, pidfd_send_signal, close) sending signal 0 to a live process, beside a
bare `os.kill(pid, 0)`. Medians over `--runs` calls after a warm-up; all figures are host
measurements on this machine (2 shared cores: the load average is printed). The script uses
only interfaces that exist before and after the store served operations instead of SQL, so the
same file measures a pristine main checkout: run it with that checkout's interpreter (its venv,
where cs2sim is installed from it), or put a directory whose `cs2sim/` maps onto that checkout
first on PYTHONPATH (`--label before`).

    python bench/store_bench.py [--runs 300] [--label after]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _median_ms(fn: Callable[[], Any], runs: int) -> float:
    for _ in range(max(3, runs // 10)):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000.0


def _member(home: Path, runs: int) -> dict[str, float]:
    from cs2sim.system.audit import entries
    from cs2sim.system.machine import Machine
    from cs2sim.system.store import Store
    from cs2sim.system.users import list_users

    store = Store.open(home)
    assert store.remote is not None, "the member must reach the store through its service"
    machine = Machine(store)
    return {
        "member Machine(store)": _median_ms(lambda: Machine(store), runs),
        "member status()": _median_ms(machine.status, runs),
        "member audit --last 20": _median_ms(lambda: entries(store, 20), runs),
        "member user list": _median_ms(lambda: list_users(store), runs),
    }


def _signal_costs(runs: int) -> dict[str, float]:
    """A cancel's signal, checked through a pidfd against the record, vs a bare kill (signal 0:
    nothing is delivered; the checks are all that is timed)."""
    from cs2sim.system import procfs

    if not hasattr(procfs, "signal_recorded"):
        return {}  # a checkout from before the check
    target = subprocess.Popen(["sleep", "600"])
    try:
        me = procfs.identify(target.pid)
        assert me is not None
        assert procfs.signal_recorded(target.pid, me.start, me.uid, 0)
        return {
            "checked signal (pidfd)": _median_ms(
                lambda: procfs.signal_recorded(target.pid, me.start, me.uid, 0), runs
            ),
            "bare os.kill": _median_ms(lambda: os.kill(target.pid, 0), runs),
        }
    finally:
        target.kill()
        target.wait()


def _as(user: pwd.struct_passwd, fn: Callable[[], Any], env: dict[str, str]) -> Any:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.environ.clear()
            os.environ.update(env)
            out: Any = ("ok", fn())
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            out = ("raised", f"{type(e).__name__}: {e}")
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise SystemExit(f"the member's process failed: {value}")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--label", default="this checkout")
    args = ap.parse_args()
    if os.geteuid() != 0 or not shutil.which("useradd"):
        print("store_bench needs root and useradd (it creates a member OS user)")
        return 1
    from cs2sim.system import store_service
    from cs2sim.system.machine import Machine
    from cs2sim.system.store import Store

    tag = uuid.uuid4().hex[:6]
    group, name = f"cs2b{tag}", f"cs2b{tag}m"
    top = Path(tempfile.mkdtemp(prefix="cs2sim-store-bench-"))
    top.chmod(0o755)
    home = top / "store"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    service: int | None = None
    try:
        subprocess.run(
            ["useradd", "-M", "-N", "-g", group, "-s", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        member = pwd.getpwnam(name)
        os.environ["CS2_HOME"] = str(home)
        with Store.open(home) as store:
            Machine(store).status()
        store_service.share(home, member.pw_gid)
        service = int((home / store_service.PID_NAME).read_text())
        env = {
            "CS2_HOME": str(home),
            "PATH": "/usr/bin:/bin",
            "HOME": "/nonexistent",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        }
        figures = _as(member, lambda: _member(home, args.runs), env)
        with Store.open(home) as store:
            machine = Machine(store)
            figures["owner status() (in-process)"] = _median_ms(machine.status, args.runs)
        figures.update(_signal_costs(args.runs))
    finally:
        if service is not None:
            os.kill(service, signal.SIGTERM)
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
        shutil.rmtree(top, ignore_errors=True)
    import cs2sim.system

    load = os.getloadavg()[0]
    print(
        json.dumps(
            {
                "label": args.label,
                "tree": str(Path(cs2sim.system.__file__).parent),
                "load": round(load, 2),
                "runs": args.runs,
                "median_ms": {k: round(v, 3) for k, v in figures.items()},
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
