"""Helpers for the tests that run csrun_wse / csrun_cpu with the Slurm backend (test cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent

# The test cluster as cs2sim's cluster description: node1..node4, 16 CPUs, no GRES (its srun
# lines carry no --gres). def_cpus_per_task 17 does not fit a node, so csrun_wse lets Slurm choose
# (no --cpus-per-task) unless a case gives it: the lines the ground truth was recorded with.
CLUSTER_YAML = """\
systems:
  - {name: cs2-1, ip: 127.0.1.1, model: CS-2, execmode: PIPELINED}
memoryx: {capacity_tb: 4}
swarmx: {max_systems: 192}
nodes:
  - {name: node1, cpus: 16, memory_gb: 4, role: chief}
  - {name: node2, cpus: 16, memory_gb: 4, role: worker}
  - {name: node3, cpus: 16, memory_gb: 4, role: worker}
  - {name: node4, cpus: 16, memory_gb: 4, role: worker}
site:
  def_nodes: 4
  def_tasks_per_node: 2
  def_cpus_per_task: 17
  gres_resource: ""
  gres_node: node1
"""


def script(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is not installed in the venv; run pip install -e ."
    return str(path)


def launcher_env(home: Path, cluster: Path, scheduler: str) -> dict[str, str]:
    """The environment a user's shell would have: the venv first on PATH (the tasks run
    `python-ws` etc. by name), the store, the cluster description and the scheduler."""
    env = dict(os.environ)
    env.update(
        CS2_HOME=str(home),
        CS2_CLUSTER=str(cluster),
        CS2_SCHEDULER=scheduler,
        CS2_BOOT_SECONDS="0",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.pop("SLURM_JOB_ID", None)
    return env


def wait_all_idle(timeout: float = 40.0) -> None:
    """Slurm places a job on the lowest-numbered FREE nodes: wait until none is completing."""
    from record_layout import wait_all_idle as wait  # the recorder's, one copy

    wait(timeout)


def squeue_ids() -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i"],
        capture_output=True,
        text=True,
        timeout=10,
        stdin=subprocess.DEVNULL,
    ).stdout
    return out.split()


def gone_from_squeue(job: int | str, timeout: float = 15.0) -> bool:
    """True once squeue lists no component of `job` (a finished het job can stay COMPLETING,
    `N+1` still listed, for a moment after srun returned: poll, do not assert at once)."""
    deadline = time.monotonic() + timeout
    while True:
        if not [i for i in squeue_ids() if i.split("+")[0] == str(job)]:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def store_row(home: Path, job_id: int) -> dict[str, object] | None:
    """The store's slurm_jobs row, read from a separate process (as the console would)."""
    code = (
        "import json, sys; from cs2sim.system.store import Store; "
        "from cs2sim.system.sched.slurm import recorded_job; "
        f"print(json.dumps(recorded_job(Store.open(), {job_id})))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "CS2_HOME": str(home)},
        timeout=30,
        check=True,
    )
    return json.loads(res.stdout)
