"""Who may do what, at the system/ level (not only through the shell): every action of the
transition table needs the admin role, and only a job's owner or an admin may cancel it.

The cases come from `TRANSITIONS` itself, not from `ADMIN_ACTIONS`: an action dropped from the
admin set (say, withdrawing a pending mode) is still a case here, so the drop fails a test. Each
case reaches a state where the admin's attempt succeeds, so the role is the only reason a user
is refused; the refusal changes nothing but its audit row.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from sys_helpers import dump

from cs2sim.system.errors import PermissionDenied
from cs2sim.system.jobs import process_alive
from cs2sim.system.machine import Machine
from cs2sim.system.state import TRANSITIONS, Action, ExecMode, State
from cs2sim.system.users import Identity, Role

# BOOTED is the clock's, not a person's (its own refusal is tested in test_sys_machine.py)
CASES = [
    (state, action)
    for state, actions in TRANSITIONS.items()
    for action in actions
    if action is not Action.BOOTED
]


def reach(machine: Machine, admin: Identity, state: State, action: Action) -> None:
    """Put the system in `state`, ready for `action` to succeed for an admin."""
    if state is State.STANDBY or state is State.ACTIVATING:
        machine.standby(admin)
        if action is Action.WITHDRAW:  # a pending change to take back
            machine.setup_execmode(admin, ExecMode.WEIGHT_STREAMING)
        if state is State.ACTIVATING:
            machine.activate(admin)
    elif state is State.FAULT:
        machine.inject_fault(admin, "rehearsal")
    assert machine.status().state is state


def attempt(machine: Machine, who: Identity, action: Action) -> None:
    mode = (
        ExecMode.PIPELINED
        if machine.status().active_mode is ExecMode.WEIGHT_STREAMING
        else ExecMode.WEIGHT_STREAMING
    )
    machine.perform(who, action, mode=mode, reason="by hand")


@pytest.fixture
def slow_boot(monkeypatch):
    """A reboot that lasts an hour, so ACTIVATING stays put during a case."""
    monkeypatch.setenv("CS2_BOOT_SECONDS", "3600")


@pytest.mark.parametrize(("state", "action"), CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_a_user_is_refused_every_action_an_admin_may_take(
    store, machine, admin, alice, slow_boot, state, action
) -> None:
    reach(machine, admin, state, action)
    before = dump(store)
    with pytest.raises(PermissionDenied):
        attempt(machine, alice, action)
    assert dump(store) == before  # nothing changed ...
    last = machine.audit(last=1)[-1]
    assert (last.user, last.outcome) == ("alice", "denied")  # ... but the attempt is recorded
    attempt(machine, admin, action)  # the same action, for the admin: the role was the reason
    assert machine.audit(last=1)[-1].outcome == "ok"


def test_the_cases_cover_every_action_a_person_can_take() -> None:
    assert {a for _, a in CASES} == set(Action) - {Action.BOOTED}


@pytest.fixture
def sleeper():
    """A real process for a job record to point at."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()


def test_only_a_jobs_owner_or_an_admin_may_cancel_it(store, machine, admin, alice, sleeper):
    job = machine.register_job(alice, ExecMode.PIPELINED, "python run.py", sleeper.pid)
    bob = Identity("bob", Role.USER, "password")
    before = dump(store)
    with pytest.raises(PermissionDenied, match=f"Job {job.id} belongs to alice"):
        machine.cancel_job(bob, job.id)
    assert dump(store) == before  # still RUNNING, recorded as it was
    assert process_alive(sleeper.pid) and sleeper.poll() is None  # no signal was sent
    last = machine.audit(last=1)[-1]
    assert (last.user, last.command, last.outcome) == ("bob", "jobs cancel", "denied")
    assert machine.cancel_job(admin, job.id).id == job.id  # an admin may
    assert sleeper.wait(timeout=30) != 0  # SIGINT ended it


def test_a_jobs_owner_may_cancel_it(machine, alice, sleeper):
    job = machine.register_job(alice, ExecMode.PIPELINED, "python run.py", sleeper.pid)
    machine.cancel_job(alice, job.id)
    assert sleeper.wait(timeout=30) != 0
    assert machine.audit(last=1)[-1].outcome == "ok"
