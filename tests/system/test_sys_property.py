"""Property: any sequence of (role, action, mode, waiting) keeps the machine's invariants."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sys_helpers import FakeClock

from cs2sim.system.errors import InvalidTransition, PermissionDenied
from cs2sim.system.machine import Machine
from cs2sim.system.state import TRANSITIONS, Action, ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role, local_identity

STEP = st.one_of(
    st.tuples(st.just("wait"), st.floats(min_value=0, max_value=8)),
    st.tuples(
        st.sampled_from([Role.ADMIN, Role.USER]),
        st.sampled_from([Action.STANDBY, Action.ACTIVATE, Action.SETUP, Action.FAULT]),
        st.sampled_from(list(ExecMode)),
    ),
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, max_size=25))
@pytest.mark.slow
def test_random_sequences_keep_the_invariants(steps, monkeypatch):
    monkeypatch.setenv("CS2_BOOT_SECONDS", "5")
    with tempfile.TemporaryDirectory() as home, Store.open(Path(home)) as store:
        clock = FakeClock()
        machine = Machine(store, clock=clock)
        admin, user = local_identity(store), Identity("alice", Role.USER, "password")
        before = machine.status()
        for step in steps:
            n_log = len(machine.audit())
            if step[0] == "wait":
                clock.advance(step[1])
            else:
                role, action, mode = step
                who = admin if role is Role.ADMIN else user
                try:
                    machine.perform(who, action, mode=mode, reason="chaos")
                except PermissionDenied:
                    assert role is Role.USER and action
                except InvalidTransition:
                    assert action not in TRANSITIONS[before.state] or (
                        before.state is State.ACTIVATING and clock.now >= before.activating_until
                    )
                else:
                    assert role is Role.ADMIN
            after = machine.status()
            new = machine.audit()[n_log:]
            # 1. every attempt leaves exactly one row by its actor; the clock writes the rest
            if step[0] != "wait":
                assert [e.user for e in new if e.user != "system"] == [who.name]
            else:
                assert all(e.user == "system" for e in new)
            # 2. the state is a State, ACTIVATING exactly when a boot end is stored
            assert after.state in State and after.configured_mode in ExecMode
            assert (after.state is State.ACTIVATING) == (after.activating_until is not None)
            assert (after.state is State.FAULT) == bool(after.fault_reason)
            assert after.pending_mode_change == (after.configured_mode != after.active_mode)
            # 3. the active mode changes only through a completed activation, into the configured
            booted = [e for e in new if e.command == "booted"]
            if after.active_mode != before.active_mode:
                assert booted and after.active_mode == after.configured_mode
            if booted:
                assert booted[0].from_state == State.ACTIVATING
            # 4. the configured mode changes only by an admin's setup in STANDBY
            if after.configured_mode != before.configured_mode:
                assert step[0] == Role.ADMIN and step[1] is Action.SETUP
                assert before.state is State.STANDBY
            before = after
