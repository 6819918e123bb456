"""Fixtures for the tests that need a real Slurm cluster.

Every test module here carries `pytestmark = pytest.mark.slurm`. The `slurm` fixture skips,
with the reason, when srun is absent or no cluster answers within a few seconds, so a laptop
without Slurm still passes; .ci/run starts the test cluster, so in CI they run.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator

import pytest
from slurm_helpers import Cluster, probe_cluster


@pytest.fixture(scope="session")
def slurm_probe() -> Cluster | str:
    return probe_cluster()


@pytest.fixture
def slurm(slurm_probe: Cluster | str) -> Cluster:
    """The running Slurm cluster (the default one: /etc/slurm/slurm.conf or $SLURM_CONF)."""
    if isinstance(slurm_probe, str):
        pytest.skip(slurm_probe)
    return slurm_probe


@pytest.fixture(autouse=True)
def one_slurm_test_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The Slurm tests of every pytest-xdist worker share one cluster of four nodes: a test that
    checks where Slurm places a job (the ground-truth layouts) must not meet another test's
    job on it, so they take turns on a lock file in the session's shared base temp dir."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # gwN's parent
    with open(shared / "slurm-tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
