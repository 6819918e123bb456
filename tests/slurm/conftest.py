"""Fixtures for the tests that need a real Slurm cluster.

Every test module here carries `pytestmark = pytest.mark.slurm`. The `slurm` fixture skips,
with the reason, when srun is absent or no cluster answers within a few seconds, so a laptop
without Slurm still passes; .ci/run starts the test cluster, so in CI they run.
"""

from __future__ import annotations

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
