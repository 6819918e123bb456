"""Helpers for launcher tests (a uniquely named module: `conftest` is ambiguous across test
directories when the whole suite runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent

# How long a test waits for a process or a condition before calling it a hang. Generous on
# purpose: a loaded 2-core host runs a launcher 10x slower than a quiet one, and a passing test
# never waits it out (every wait returns as soon as its event happens).
HANG_S = 300.0


def script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed in the venv; run pip install -e ."
    return str(path)


def run(argv: list[str], timeout: float = HANG_S, **kw: object) -> subprocess.CompletedProcess[str]:
    """Run a console script to completion; its output as text."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


started: list[subprocess.Popen[str]] = []


def start(argv: list[str], **kw: object) -> subprocess.Popen[str]:
    """Start a launcher in the background (stopped and its pipes closed at test teardown)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
    started.append(proc)
    return proc


# A task body that records its Slurm environment (and pid) to <dir>/<SLURM_PROCID>.json
RECORD = (
    "import json, os, sys, time; "
    "d = sys.argv[1]; "
    "env = {k: v for k, v in os.environ.items() if k.startswith(('SLURM', 'CS2SIM'))}; "
    "env['pid'] = os.getpid(); env['t'] = time.time(); "
    "open(os.path.join(d, os.environ['SLURM_PROCID'] + '.json'), 'w').write(json.dumps(env)); "
    "time.sleep(float(sys.argv[2]) if len(sys.argv) > 2 else 0)"
)


def records(directory: Path) -> dict[int, dict[str, object]]:
    out = {}
    for p in directory.glob("*.json"):
        out[int(p.stem)] = json.loads(p.read_text())
    return out


def queue_state(home: Path) -> tuple[list[dict[str, object]], list[str]]:
    """Jobs and allocated nodes, read from a SEPARATE process (as another terminal would)."""
    code = (
        "import json; from cs2sim.system.store import Store; "
        "from cs2sim.system.sched import queue; "
        "s = Store.open(); jobs = queue.jobs(s, all_states=True); "
        "nodes = [r[0] for r in s._conn.execute('SELECT node FROM sched_alloc')]; "
        "print(json.dumps([[{'id': j.id, 'state': j.state, 'reason': j.reason,"
        " 'started_at': j.started_at} for j in jobs],"
        " nodes]))"
    )
    env = {**os.environ, "CS2_HOME": str(home)}
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_S,
        check=True,
    )
    jobs, nodes = json.loads(res.stdout)
    return jobs, nodes


def wait_for(predicate, timeout: float = HANG_S, step: float = 0.05):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not reached in time")
