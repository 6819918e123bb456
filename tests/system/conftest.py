"""Fixtures for system/ tests: a fresh store in tmp_path, a clock tests can move, identities."""

from __future__ import annotations

import pytest
from sys_helpers import FakeClock

from cs2sim.system.machine import Machine
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role, local_identity


@pytest.fixture(autouse=True)
def cs2_home(fresh_home):
    """$CS2_HOME in tmp_path, instant reboots (tests that need a boot time set their own)."""
    return fresh_home


@pytest.fixture
def store(cs2_home):
    """A fresh Store under $CS2_HOME."""
    s = Store.open()
    yield s
    s.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def machine(store, clock) -> Machine:
    """The default system (cs2-1) on a FakeClock."""
    return Machine(store, clock=clock)


@pytest.fixture
def admin(store) -> Identity:
    """The OS user who created the store: admin by local trust."""
    who = local_identity(store)
    assert who.role is Role.ADMIN
    return who


@pytest.fixture
def alice() -> Identity:
    """A logged-in non-admin (no account needed to act as one on the machine)."""
    return Identity("alice", Role.USER, "password")
