"""The kit's pytest fixtures (registered through the `pytest11` entry point: no import needed).

    cs2_system     a ThrowawaySystem for this test (its own store; removed afterwards)
    cs2_console    the interactive `cs>` on that system, at its prompt (a ConsoleSession)
    cs2_cs         run `cs -c ...` on that system: cs2_cs("system standby --yes") -> CsResult
    cs2_systems    more systems in one test: cs2_systems(cluster=..., boot_seconds=...)
    cs2_appliance  a cluster management server on a throwaway four-system cluster (an
                   ApplianceCluster: run_csx, csctl, jobs, wait_for; stopped at teardown)

Override these two in your conftest.py to change what `cs2_system` builds:

    cs2_cluster        None (the built-in cluster), a dict in the cluster.yaml schema, or a path
    cs2_boot_seconds   how long `system activate` reboots (default 0)

Each fixture is per test and keeps nothing in the process (no os.environ changes), so tests run
in parallel (pytest-xdist) without sharing a store, and nothing is left behind: every process a
system started is stopped and its directory removed at teardown.

pytest loads this module in EVERY session of an environment where cs2sim is installed, including
sessions that never use the kit. So it imports only pytest at load time; the kit itself (and
pexpect, numpy, yaml behind it) is imported when a test asks for one of these fixtures. A kit that
cannot be imported then fails that test with the reason, never the whole session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from cs2sim.scripts.testkit.console import ConsoleSession
    from cs2sim.scripts.testkit.result import CsResult
    from cs2sim.scripts.testkit.system import ThrowawaySystem

__all__ = [
    "cs2_cluster",
    "cs2_boot_seconds",
    "cs2_systems",
    "cs2_system",
    "cs2_console",
    "cs2_cs",
    "cs2_appliance",
]


@pytest.fixture
def cs2_cluster() -> Any:
    """The cluster `cs2_system` gets: None = cs2sim's built-in one (override in conftest.py)."""
    return None


@pytest.fixture
def cs2_boot_seconds() -> float:
    """How long `system activate` takes on `cs2_system` (override in conftest.py)."""
    return 0.0


@pytest.fixture
def cs2_systems(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ThrowawaySystem]]:
    """make(**ThrowawaySystem options) -> a new system; all are closed at teardown."""
    from cs2sim.scripts.testkit.system import ThrowawaySystem

    made: list[ThrowawaySystem] = []
    root = tmp_path_factory.mktemp("cs2kit")

    def make(**options: Any) -> ThrowawaySystem:
        options.setdefault("root", root)
        system = ThrowawaySystem(**options)
        made.append(system)
        return system

    yield make
    for system in made:
        system.close()


@pytest.fixture
def cs2_system(
    cs2_systems: Callable[..., ThrowawaySystem], cs2_cluster: Any, cs2_boot_seconds: float
) -> ThrowawaySystem:
    """A throwaway CS-2 for this test: ACTIVE, PIPELINED, its own store."""
    return cs2_systems(cluster=cs2_cluster, boot_seconds=cs2_boot_seconds)


@pytest.fixture
def cs2_console(cs2_system: ThrowawaySystem) -> ConsoleSession:
    """The interactive `cs>` on `cs2_system`, at its prompt."""
    return cs2_system.console()


@pytest.fixture
def cs2_cs(cs2_system: ThrowawaySystem) -> Callable[..., CsResult]:
    """cs2_cs("command; command") -> CsResult of `cs -c` on `cs2_system`."""
    return cs2_system.cs


@pytest.fixture
def cs2_appliance(cs2_systems: Callable[..., ThrowawaySystem]) -> Iterator[Any]:
    """An ApplianceCluster on the four-system example cluster (its server stopped at teardown)."""
    from cs2sim.scripts.testkit.appliance import ApplianceCluster
    from cs2sim.system.cluster import EXAMPLE_PATH

    cluster = ApplianceCluster(cs2_systems(cluster=EXAMPLE_PATH))
    yield cluster
    cluster.close()
