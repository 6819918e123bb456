"""Several processes racing, and SIGKILL mid-transition: the store stays consistent."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3

import pytest
import sys_workers

from cs2sim.system.machine import COMMAND_WORDS, Machine
from cs2sim.system.state import Action, ExecMode, State, next_state
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

ACTIONS_BY_WORDS = {words: action for action, words in COMMAND_WORDS.items()}


def replay(log) -> tuple[State, ExecMode, ExecMode]:
    """Re-run the audit log through the transition table; every row must follow from the last."""
    state, configured, active = State.ACTIVE, ExecMode.PIPELINED, ExecMode.PIPELINED
    for e in log:
        action = ACTIONS_BY_WORDS.get(e.command)
        if action is None:
            continue
        assert e.from_state == state, f"row {e.id} starts from {e.from_state}, store was {state}"
        if e.outcome != "ok":
            assert e.to_state == state
            continue
        state = next_state(state, action)
        assert e.to_state == state
        if action is Action.SETUP:  # "configured X (was Y)..." or "X is already configured..."
            words = e.detail.split()
            configured = ExecMode(words[0] if "already" in e.detail else words[1])
        if action is Action.BOOTED:
            active = configured
    return state, configured, active


def test_racing_processes_leave_a_consistent_store(cs2_home, monkeypatch):
    # no store yet: the racers also race to create it (exactly one wins; the others use it)
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0.01")  # reboots finish while others race
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:  # bounded: a Pool whose worker died would wait forever
        attempts = pool.starmap_async(
            sys_workers.race, [(str(cs2_home), seed, 40) for seed in range(3)]
        ).get(timeout=600)
    with Store.open() as store:
        machine = Machine(store)
        status = machine.status()
        log = machine.audit()
        admin = local_identity(store)
    assert status.state in State and status.configured_mode in ExecMode
    assert status.active_mode in ExecMode
    # exactly one audit row per attempt, and the log replays to the stored state
    tried = [e for e in log if e.user == admin.name and e.command in ACTIONS_BY_WORDS]
    assert len(tried) == sum(attempts) == 120
    assert [e.id for e in log] == sorted({e.id for e in log})
    assert replay(log) == (status.state, status.configured_mode, status.active_mode)
    oks = [e.command for e in log if e.outcome == "ok"]
    assert oks.count("booted") <= oks.count("system activate")
    assert {e.outcome for e in tried} <= {"ok", "refused"}


def test_sigkill_mid_transition_loses_nothing_committed(cs2_home):
    ctx = multiprocessing.get_context("spawn")
    done, holding = ctx.Event(), ctx.Event()
    child = ctx.Process(target=sys_workers.commit_then_hang, args=(str(cs2_home), 5, done, holding))
    child.start()
    try:
        assert holding.wait(60), "the child never reached its transaction"
        assert done.is_set()
        probe = sqlite3.connect(cs2_home / "cs2sim.db", timeout=0.05)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            probe.execute("BEGIN IMMEDIATE")  # the child really holds the write lock
        probe.close()
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == -signal.SIGKILL
    with Store.open() as store:
        machine = Machine(store)
        admin = local_identity(store)
        status = machine.status()
        log = machine.audit()
        # the 5 committed transitions are there (standby, activate, standby, activate, standby)
        committed = [e.command for e in log if e.user == admin.name and e.outcome == "ok"]
        assert committed == ["system standby", "system activate"] * 2 + ["system standby"]
        assert status.state is State.STANDBY and status.fault_reason == ""
        assert all(e.user != "ghost" for e in log)  # the uncommitted half is gone
        assert replay(log)[0] is State.STANDBY
        assert machine.activate(admin).state is State.ACTIVE  # and the store is writable
