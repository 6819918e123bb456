"""Fixtures every test directory shares, and the hypothesis profiles.

`fresh_home`: a throwaway $CS2_HOME (a new store: cs2-1 ACTIVE in PIPELINED) in tmp_path, with
instant reboots and no cluster file from the caller's environment; the directory conftests build
their own `home`/`cs2_home` fixtures on it.

Hypothesis: no per-example deadline in any profile. The numeric tests' examples run numpy
kernels whose time depends on the machine's load (2 shared cores), and a deadline would turn a
busy moment into a failure that says nothing about the code. Profiles: "default" (the README's
command) and "ci" (set by .ci/run) are the same: derandomized, so a newcomer's run, a developer's
and CI's draw the same examples and a failure replays, and without the example database;
"explore" (HYPOTHESIS_PROFILE=explore) draws random examples and keeps the failing ones in
.hypothesis/, for a developer who goes looking (docs/testing.md).

Ctrl-C: a shell that starts a command in the background (`pytest ... &` in a script, nohup)
hands it SIGINT ignored, and every process it starts inherits that, so the tests that stop a
job with SIGINT (a cancel, a Ctrl-C) would wait for a process that cannot hear it. SIGINT gets
Python's own handler back here; a handler (unlike an ignored signal) is reset to the default
when a child execs, so the jobs the tests start hear Ctrl-C as they would from a terminal.

pytest-xdist (the README's `-n auto --dist loadfile`): `auto` is one worker more than the cores
this process may use, because about a third of the suite's time is spent waiting (for jobs'
processes, sockets, daemons and deadlines) rather than computing: on 2 cores the whole suite
took 306 s with 2 workers and 268 s with 3 (4 gained nothing more). Files go to workers whole
(their module fixtures are built once), except that the real-Slurm tests of every file form
one unit: they take turns on the one test cluster anyway (tests/slurm/conftest.py), and spread
over several workers they left each waiting for the others' turns.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

_REPLAYABLE = dict(  # the same examples on every run, on every machine
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("default", **_REPLAYABLE)
settings.register_profile("ci", **_REPLAYABLE)
settings.register_profile("explore", deadline=None)  # random examples, kept in .hypothesis/
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    from cs2sim.runtime.threads import available_cores  # the runtime's own count of cores

    return available_cores() + 1


def unit_of_work(nodeid: str) -> str:
    """The file of a test, or "tests/slurm/" for every file there (one unit, see above)."""
    path = nodeid.split("::")[0]
    return "tests/slurm/" if path.startswith("tests/slurm/") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None  # xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class SlurmTestsTogether(LoadFileScheduling):  # type: ignore[misc]
        """--dist loadfile, but the files under tests/slurm/ are one unit of work."""

        def _split_scope(self, nodeid: str) -> str:  # xdist's hook for what goes together
            return unit_of_work(nodeid)

    return SlurmTestsTogether(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("dist", None) == "loadfile":
        # units go out in the order the workers collected them (pytest_collection_modifyitems
        # below puts the long ones first), not xdist's "most tests first": a file of one
        # 20-second test (the demo) was handed out last and ran alone at the end
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the units of work holding `slow` tests first, the most first, so the
    short files fill the end of the run; each file's own order is kept."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    weight: dict[str, float] = {}
    for item in items:
        unit = unit_of_work(item.nodeid)
        weight[unit] = weight.get(unit, 0.0) + (10.0 if item.get_closest_marker("slow") else 0.1)
    first = {unit: i for i, unit in enumerate(weight)}  # dicts keep the collection's order
    items.sort(key=lambda it: (-weight[unit_of_work(it.nodeid)], first[unit_of_work(it.nodeid)]))


if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def fresh_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$CS2_HOME = tmp_path/cs2home (created on first use), reboots instant, no $CS2_CLUSTER."""
    home = tmp_path / "cs2home"
    monkeypatch.setenv("CS2_HOME", str(home))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    return home
