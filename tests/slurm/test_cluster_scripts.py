"""The test-cluster scripts (.ci/slurm/start.sh, stop.sh) start a working cluster and leave no
daemon behind, idempotently.

They run against a SECOND, private cluster (own state dir, free ports, no /etc/slurm copy), so
the cluster the other Slurm tests use is never stopped or reconfigured; the test checks that too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import (
    START,
    STOP,
    alive,
    cluster_env,
    daemons_refusal,
    free_port_block,
    probe_cluster,
)

pytestmark = pytest.mark.slurm

NODES = 2


@pytest.fixture
def private_cluster() -> Iterator[dict[str, str]]:
    """Environment for a private 2-node cluster; whatever happens, it is stopped afterwards."""
    refusal = daemons_refusal()
    if refusal:
        pytest.skip(refusal)
    # Short path: slurmstepd's unix sockets live under the spool dir (108-byte limit).
    state = Path(tempfile.mkdtemp(prefix="sci-", dir="/tmp"))
    base = free_port_block(NODES + 1)
    env = cluster_env(
        state,
        SLURM_CI_NODES=str(NODES),
        SLURM_CI_ETC="0",
        SLURM_CI_INSTALL="0",
        SLURM_CI_TIMEOUT="30",
        SLURM_CI_CTLD_PORT=str(base),
        SLURM_CI_NODE_PORT=str(base + 1),
    )
    try:
        yield env
    finally:
        subprocess.run(["bash", str(STOP)], env=env, capture_output=True, timeout=60)
        shutil.rmtree(state, ignore_errors=True)


def script(path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def daemons(state: Path) -> dict[str, int]:
    """The daemons start.sh recorded: pid file name -> pid."""
    files = [*state.glob("slurmd.*.pid"), state / "slurmctld.pid", state / "munged.pid.ours"]
    return {f.name: int(f.read_text()) for f in files if f.exists()}


def cluster_processes(state: Path, daemon_pids: set[int]) -> set[int]:
    """Every live process of the cluster in `state`: its daemons, the processes working in its
    state dir (slurmstepd is re-parented to PID 1 but runs in $SLURM_CI_DIR/log) and all their
    descendants (slurmctld's slurmscriptd, the job's tasks)."""
    parent: dict[int, int] = {}
    roots = set(daemon_pids)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if Path(os.readlink(entry / "cwd")).is_relative_to(state):
                roots.add(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    found = set(roots)
    frontier = set(roots)
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return {pid for pid in found if alive(pid)}


COMM = {"slurmctld.pid": "slurmctld", "munged.pid.ours": "munged"}


def start_running_job(env: dict[str, str], state: Path) -> tuple[subprocess.Popen[str], int]:
    """A heterogeneous job (one component per node, as csrun_wse submits) that would run for
    5 minutes; returns its srun and one task's pid."""
    pidfile = state / "task-pid.txt"
    pidfile.unlink(missing_ok=True)
    srun = subprocess.Popen(
        [
            "srun",
            "--exclusive",
            "-N1",
            ":",
            "--exclusive",
            "-N1",
            "bash",
            "-c",
            f'[ "$SLURM_PROCID" = 0 ] && echo $$ > {pidfile}; exec sleep 300',
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert srun.poll() is None, srun.communicate()
        assert time.monotonic() < deadline, "the job did not start within 30 s"
        time.sleep(0.05)
    return srun, int(pidfile.read_text())


@pytest.mark.slow  # a private Slurm cluster started and stopped twice
def test_start_stop_twice_leaves_no_daemon(private_cluster: dict[str, str]) -> None:
    env = private_cluster
    state = Path(env["SLURM_CI_DIR"])
    main_before = probe_cluster()
    etc = Path("/etc/slurm/slurm.conf")
    etc_before = etc.read_bytes() if etc.exists() else None

    for round_ in (1, 2):
        started = script(START, env)
        assert started.returncode == 0, started.stderr
        pids = daemons(state)
        assert {"slurmctld.pid", "slurmd.node1.pid", "slurmd.node2.pid"} <= set(pids)
        for name, pid in pids.items():
            assert alive(pid, COMM.get(name, "slurmd")), f"{name} ({pid}) is not running"

        # The cluster works: one task on each node.
        hosts = subprocess.run(
            ["srun", f"-N{NODES}", "bash", "-c", "echo $SLURMD_NODENAME"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert hosts.returncode == 0, hosts.stderr
        assert sorted(hosts.stdout.split()) == ["node1", "node2"]

        # Starting again is a no-op: same daemons.
        again = script(START, env)
        assert again.returncode == 0, again.stderr
        assert "already running" in again.stderr
        assert daemons(state) == pids

        if round_ == 2:
            # A dead node daemon: start.sh restarts the cluster cleanly.
            os.kill(pids["slurmd.node2.pid"], 15)
            deadline = time.monotonic() + 10
            while alive(pids["slurmd.node2.pid"], "slurmd") and time.monotonic() < deadline:
                time.sleep(0.05)
            restarted = script(START, env)
            assert restarted.returncode == 0, restarted.stderr
            for name, pid in pids.items():
                if name != "munged.pid.ours":
                    assert not alive(pid, COMM.get(name, "slurmd")), f"old {name} still runs"
            pids = daemons(state)
            for name, pid in pids.items():
                assert alive(pid, COMM.get(name, "slurmd")), f"{name} not restarted"

            # Another configuration: start.sh restarts the cluster with it.
            changed = dict(env, SLURM_CI_SCHED="batch_sched_delay=0,bf_interval=2")
            reconfigured = script(START, changed)
            assert reconfigured.returncode == 0, reconfigured.stderr
            assert "already running" not in reconfigured.stderr
            config = subprocess.run(
                ["scontrol", "show", "config"], env=env, capture_output=True, text=True, timeout=30
            ).stdout
            assert "bf_interval=2" in config
            assert not set(daemons(state).values()) & set(pids.values()) - {
                pids.get("munged.pid.ours")
            }, "start.sh did not restart the daemons for the new config"
            pids = daemons(state)

        srun, task_pid = start_running_job(env, state)
        daemon_pids = {pid for name, pid in pids.items() if name != "munged.pid.ours"}
        children = cluster_processes(state, daemon_pids)
        assert task_pid in children, "the job's task was not found among the cluster's processes"
        stopped = script(STOP, env)
        assert stopped.returncode == 0, stopped.stderr
        # One job, cancelled by its base id while the controller ran (not only killed with it).
        assert "cancelled 1 job(s)" in stopped.stderr and "still listed" not in stopped.stderr
        for name, pid in pids.items():
            assert not alive(pid), f"{name} ({pid}) survived stop.sh"
        survivors = {pid for pid in children if alive(pid)}
        assert not survivors, f"processes of the cluster survived stop.sh: {survivors}"
        srun.communicate(timeout=30)
        assert not list(state.glob("*.pid*")), "stop.sh left pid files"

        # Stopping again is a no-op.
        twice = script(STOP, env)
        assert twice.returncode == 0, twice.stderr
        assert "stopped" not in twice.stderr

    assert (etc.read_bytes() if etc.exists() else None) == etc_before, "/etc/slurm was touched"
    # The shared cluster the other tests use is exactly as usable as before.
    assert type(probe_cluster()) is type(main_before)


def test_failed_install_is_one_clear_error(tmp_path: Path) -> None:
    """When the packages are missing and apt-get cannot install them, start.sh retries once
    after `apt-get update` and then fails with one sentence naming its log (so .ci/run can go on
    and report Slurm as unavailable)."""
    if os.geteuid() != 0:
        pytest.skip("start.sh needs root.")
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    calls = tmp_path / "apt-calls"
    # `update` works, `install` fails: as on a machine whose mirror lacks the packages.
    (fakebin / "apt-get").write_text(
        f'#!/bin/sh\necho "$1" >> {calls}\n[ "$1" = update ] && exit 0\nexit 100\n'
    )
    (fakebin / "apt-get").chmod(0o755)
    # Debian keeps slurmctld, slurmd and munged in /usr/sbin: without it they look missing.
    path = f"{fakebin}:/usr/bin:/bin"
    if any(shutil.which(b, path=path) for b in ("slurmctld", "slurmd", "munged")):
        pytest.skip("the Slurm daemons are on /usr/bin or /bin here; cannot hide them")
    state = tmp_path / "state"
    env = {"PATH": path, "HOME": str(tmp_path), "SLURM_CI_DIR": str(state), "SLURM_CI_ETC": "0"}
    result = script(START, env)
    assert result.returncode == 1
    assert calls.read_text().split() == ["install", "update", "install"]
    assert result.stderr.strip().splitlines()[-1] == (
        "slurm-ci: apt-get install slurmctld slurmd slurm-client munge failed; "
        f"see {state}/log/apt-install.log."
    )
    assert not list(state.glob("*.pid")), "nothing may be started after a failed install"
