"""Helpers for the tests that run on a real Slurm cluster (tests/slurm)."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
START = REPO / ".ci" / "slurm" / "start.sh"
STOP = REPO / ".ci" / "slurm" / "stop.sh"

# How long a healthy cluster may take to answer; more means it is not usable for tests.
ANSWER_SECONDS = 10
# Tests that start Slurm daemons of their own (munged, slurmctld, slurmd) run only when this is
# 1: .ci/run sets it; a developer's `python -m pytest` as root never starts daemons by itself.
DAEMONS_ENV = "CS2SIM_TEST_DAEMONS"


def daemons_refusal() -> str | None:
    """Why a test may not start Slurm daemons here (one sentence), or None when it may."""
    if os.environ.get(DAEMONS_ENV) != "1":
        return f"starts Slurm daemons of its own: set {DAEMONS_ENV}=1 to allow it (.ci/run does)."
    if os.geteuid() != 0:
        return "start.sh needs root (it starts munged and slurmd)."
    missing = [b for b in ("slurmctld", "slurmd", "srun", "munged") if shutil.which(b) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing): "
            "run `bash .ci/slurm/start.sh` as root once to install it."
        )
    return None


@dataclass(frozen=True)
class Cluster:
    """A Slurm cluster that answered: its node names as sinfo reports them."""

    nodes: tuple[str, ...]


def probe_cluster(env: dict[str, str] | None = None) -> Cluster | str:
    """The running cluster, or one sentence saying why there is none to test against."""
    if shutil.which("srun") is None:
        return (
            "srun is not installed: the Slurm tests need a running Slurm cluster "
            "(start the test cluster with `bash .ci/slurm/start.sh` as root)."
        )
    try:
        info = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N"],
            capture_output=True,
            text=True,
            timeout=ANSWER_SECONDS,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        if info.returncode != 0:
            return (
                f"no Slurm cluster answers ({last_line(info.stderr)}); "
                "start one with `bash .ci/slurm/start.sh`."
            )
        ping = subprocess.run(
            ["srun", "-N1", "true"],
            capture_output=True,
            text=True,
            timeout=ANSWER_SECONDS,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except subprocess.TimeoutExpired as exc:
        return (
            f"the Slurm cluster did not answer `{' '.join(exc.cmd)}` within "
            f"{ANSWER_SECONDS} s; restart it with `bash .ci/slurm/start.sh`."
        )
    if ping.returncode != 0:
        return f"the Slurm cluster cannot run a job (srun -N1 true: {last_line(ping.stderr)})."
    return Cluster(nodes=tuple(sorted(set(info.stdout.split()), key=node_key)))


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def node_key(name: str) -> tuple[str, int]:
    """node10 sorts after node9."""
    m = re.fullmatch(r"(.*?)(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list ('node[1-3,5]', 'node2', 'a1,b[2-3]') as names, in order."""
    names: list[str] = []
    for prefix, ranges in re.findall(r"([^,\[]+)(?:\[([^\]]*)\])?,?", nodelist):
        if not ranges:
            names.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}")
    return names


def alive(pid: int, comm: str | None = None) -> bool:
    """The process exists and is not a zombie (PID 1 on the CI machines reaps orphans lazily,
    so an exited daemon lingers as state Z); with `comm`, it also has that name."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X") and (comm is None or name == comm)


def cluster_env(state_dir: Path, **knobs: str) -> dict[str, str]:
    """The environment for start.sh/stop.sh and Slurm clients of the cluster in `state_dir`."""
    env = dict(os.environ)
    env.update(SLURM_CI_DIR=str(state_dir), SLURM_CONF=str(state_dir / "slurm.conf"), **knobs)
    return env


def free_port_block(count: int) -> int:
    """A base port such that base..base+count-1 are all free on 127.0.0.1 right now."""
    for base in range(24000 + os.getpid() % 1000 * 7, 40000, 97):
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports for a second test cluster")
