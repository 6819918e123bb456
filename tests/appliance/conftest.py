"""Fixtures of the appliance tests (the kit's `cs2_appliance` is the usual one)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from cs2sim.system.cluster import EXAMPLE_PATH


@pytest.fixture
def shared_cluster(cs2_systems):
    """A four-system cluster whose $CS2_HOME another OS user can reach (not read)."""
    from cs2sim.scripts.testkit.appliance import ApplianceCluster

    top = Path(tempfile.mkdtemp(prefix="cs2sim-appliance-"))
    top.chmod(0o755)
    system = cs2_systems(cluster=EXAMPLE_PATH, root=top)
    system.root.chmod(0o711)
    system.home.chmod(0o711)
    cluster = ApplianceCluster(system)
    yield cluster
    cluster.close()
    system.close()
    shutil.rmtree(top, ignore_errors=True)
