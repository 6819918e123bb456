"""On real Slurm: with `site.system_licenses` each CS-2 system is a Slurm license of
count 1 (slurm.conf `Licenses=cs2-1:1,...`); csrun_wse asks for its job's systems, so Slurm queues
a job until they are free, as the embedded scheduler does, and `jobs show` says which it holds.

Runs on a PRIVATE cluster (own state dir, free ports, six nodes, the licenses), started and
stopped here: the shared test cluster is never reconfigured."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import START, STOP, cluster_env, daemons_refusal, free_port_block
from slurmbe_helpers import launcher_env, script

pytestmark = pytest.mark.slurm

NODES = 6  # two jobs of three whole nodes fit: the second waits for its systems, not nodes
LICENSES = "cs2-1:1,cs2-2:1,cs2-3:1,cs2-4:1"
SHAPE = ["--total-nodes=3", "--single-task-nodes=2", "--tasks-per-node=1", "--cpus-per-task=1"]
WAIT = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"
CLUSTER = (
    """\
systems:
"""
    + "".join(
        f"  - {{name: cs2-{i}, ip: 127.0.1.{i}, execmode: WEIGHT_STREAMING}}\n" for i in range(1, 5)
    )
    + """\
nodes:
"""
    + "".join(
        f"  - {{name: node{i}, cpus: 16, memory_gb: 4, role: {'chief' if i == 1 else 'worker'}}}\n"
        for i in range(1, NODES + 1)
    )
    + """\
site:
  gres_resource: ""
  gres_node: node1
  scheduler: slurm
  system_licenses: true
"""
)


@pytest.fixture
def licensed() -> Iterator[dict[str, str]]:
    """A private six-node cluster with one license per CS-2 system; stopped afterwards."""
    refusal = daemons_refusal()
    if refusal:
        pytest.skip(refusal)
    state = Path(tempfile.mkdtemp(prefix="scl-", dir="/tmp"))  # short: socket paths
    base = free_port_block(NODES + 1)
    env = cluster_env(
        state,
        SLURM_CI_NODES=str(NODES),
        SLURM_CI_ETC="0",
        SLURM_CI_INSTALL="0",
        SLURM_CI_TIMEOUT="60",
        SLURM_CI_LICENSES=LICENSES,
        SLURM_CI_CTLD_PORT=str(base),
        SLURM_CI_NODE_PORT=str(base + 1),
    )
    try:
        up = subprocess.run(
            ["bash", str(START)],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            stdin=subprocess.DEVNULL,
        )
        if up.returncode != 0:
            pytest.skip(f"a private Slurm cluster did not start: {up.stderr.strip()[-300:]}")
        yield env
    finally:
        subprocess.run(["bash", str(STOP)], env=env, capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)


def _squeue(env: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Component 0 of each job: id -> (state, licenses)."""
    out = subprocess.run(
        ["squeue", "-h", "-O", "JobID:12,HetJobOffset:6,State:12,Licenses:60"],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout
    rows = [line.split() for line in out.splitlines()]
    return {r[0]: (r[2], r[3]) for r in rows if len(r) == 4 and r[1] == "0"}


def _until(predicate, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.2)
    raise AssertionError("condition not reached in time")


@pytest.mark.slow  # whole jobs queued on real Slurm for their licenses
def test_systems_are_licenses_a_job_waits_for_its_systems(licensed, tmp_path):
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    env = {
        **launcher_env(tmp_path / "home", tmp_path / "cluster.yaml", "slurm"),
        "SLURM_CONF": licensed["SLURM_CONF"],
    }

    def launch(name: str, cs_ip: str) -> tuple[subprocess.Popen[str], Path]:
        stop = tmp_path / f"stop-{name}"
        return subprocess.Popen(
            [
                script("csrun_wse"),
                *SHAPE,
                "python-ws",
                "-c",
                WAIT,
                str(stop),
                "--cs_ip",
                cs_ip,
                "--num_csx",
                "2",
            ],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ), stop

    a, stop_a = launch("a", "cs2-1")
    b = None
    try:
        first = _until(lambda: [v for v in _squeue(licensed).values() if v[0] == "RUNNING"])
        assert first == [("RUNNING", "cs2-1:1,cs2-2:1")]
        b, stop_b = launch("b", "cs2-2")  # shares cs2-2 with a: Slurm holds it back
        _until(lambda: len(_squeue(licensed)) == 2)
        time.sleep(3)  # several backfill passes (bf_interval=1): it stays pending
        states = sorted(_squeue(licensed).values())
        assert states == [("PENDING", "cs2-2:1,cs2-3:1"), ("RUNNING", "cs2-1:1,cs2-2:1")]
        shown = subprocess.run(
            [script("cs"), "-c", "jobs show"], env=env, capture_output=True, text=True, timeout=60
        )
        assert shown.returncode == 0, shown.stderr
        lines = [line.split() for line in shown.stdout.splitlines()]
        assert lines[0][-1] == "SYSTEMS"
        assert sorted(r[-1] for r in lines[2:] if r[0].endswith("+0")) == [
            "cs2-1,cs2-2",
            "cs2-2,cs2-3",
        ]
        stop_a.touch()
        out_a, err_a = a.communicate(timeout=120)
        assert a.returncode == 0, err_a
        assert "Launching: srun --licenses=cs2-1:1,cs2-2:1 " in out_a
        stop_b.touch()  # b starts once a's licenses are back, and ends at once
        out_b, err_b = b.communicate(timeout=120)
        assert b.returncode == 0, err_b
        assert "queued and waiting for resources" in err_b and "has been allocated" in err_b
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
