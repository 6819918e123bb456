"""Machine: the Weight Streaming Quickstart's workflow, every refused pair, roles, time-based boot,
audit content."""

from __future__ import annotations

import pytest
from sys_helpers import dump

from cs2sim.system.errors import ConfigError, InvalidTransition, PermissionDenied, UsageError
from cs2sim.system.machine import Machine, boot_seconds, list_systems
from cs2sim.system.state import TRANSITIONS, Action, ExecMode, State
from cs2sim.system.users import SYSTEM

PUBLIC = [Action.STANDBY, Action.ACTIVATE, Action.SETUP, Action.FAULT]


def test_the_quickstarts_mode_change_step_by_step(machine, admin, clock, monkeypatch):
    monkeypatch.setenv("CS2_BOOT_SECONDS", "3")
    # 1. a fresh store: ACTIVE, configured = active = PIPELINED (the Quickstart's first `show`)
    s = machine.status()
    assert (s.state, s.configured_mode, s.active_mode) == (State.ACTIVE, "PIPELINED", "PIPELINED")
    assert not s.pending_mode_change and s.activating_until is None
    # 2. system standby
    clock.advance(1)
    s = machine.standby(admin)
    assert (s.state, s.state_since) == (State.STANDBY, clock.now)
    # 3. config execmode setup -> Weight Streaming: configured, pending, NOT active
    s = machine.setup_execmode(admin, ExecMode.WEIGHT_STREAMING)
    assert (s.state, s.configured_mode, s.active_mode) == (
        State.STANDBY,
        "WEIGHT_STREAMING",
        "PIPELINED",
    )
    assert s.pending_mode_change
    # 4. system activate: ACTIVATING for 3 s, still the old active mode
    clock.advance(1)
    t_activate = clock.now
    s = machine.activate(admin)
    assert s.state is State.ACTIVATING and s.activating_until == t_activate + 3
    assert s.active_mode is ExecMode.PIPELINED and s.ready_in(clock.now) == 3
    clock.advance(2.9)
    assert machine.status().state is State.ACTIVATING
    # 5. time passes: whoever reads sees ACTIVE in the new mode, since the boot's end
    clock.advance(0.2)
    s = machine.status()
    assert (s.state, s.active_mode, s.configured_mode) == (
        State.ACTIVE,
        "WEIGHT_STREAMING",
        "WEIGHT_STREAMING",
    )
    assert s.state_since == t_activate + 3 and s.activating_until is None
    assert not s.pending_mode_change
    # 6. the audit log tells the story, the boot written once by "system"
    machine.status()
    rows = [(e.user, e.command, e.from_state, e.to_state, e.outcome) for e in machine.audit()]
    assert rows == [
        (admin.name, "system standby", "ACTIVE", "STANDBY", "ok"),
        (admin.name, "config execmode setup", "STANDBY", "STANDBY", "ok"),
        (admin.name, "system activate", "STANDBY", "ACTIVATING", "ok"),
        ("system", "booted", "ACTIVATING", "ACTIVE", "ok"),
    ]
    details = [e.detail for e in machine.audit()]
    assert "WEIGHT_STREAMING" in details[1] and "next `system activate`" in details[1]
    assert "ampere" in details[2] and "ampere" in details[3]
    assert machine.audit(last=1)[0].command == "booted"


def test_the_boot_is_committed_for_every_reader(store, machine, admin, clock, monkeypatch):
    monkeypatch.setenv("CS2_BOOT_SECONDS", "5")
    machine.standby(admin)
    machine.activate(admin)
    clock.advance(5)
    other = Machine(store, clock=clock)
    assert other.status().state is State.ACTIVE
    assert machine.status().state is State.ACTIVE
    assert [e.command for e in machine.audit()].count("booted") == 1
    with store.read() as db:
        assert db.execute("SELECT state FROM systems").fetchone()[0] == "ACTIVE"


def test_zero_boot_seconds_is_active_at_once(machine, admin):
    machine.standby(admin)
    assert machine.activate(admin).state is State.ACTIVE


def drive(machine: Machine, admin, state: State, monkeypatch) -> None:
    """Bring a fresh machine to `state` through legal transitions."""
    if state is State.ACTIVE:
        return
    if state is State.FAULT:
        machine.inject_fault(admin, "test fault")
        return
    machine.standby(admin)
    if state is State.ACTIVATING:
        monkeypatch.setenv("CS2_BOOT_SECONDS", "100")
        machine.activate(admin)
    assert machine.status().state is state


@pytest.mark.parametrize(
    ("state", "action"), [(s, a) for s in State for a in Action if a not in TRANSITIONS[s]]
)
def test_every_missing_pair_is_refused_and_changes_nothing(
    store, machine, admin, state, action, monkeypatch
):
    drive(machine, admin, state, monkeypatch)
    who = SYSTEM if action is Action.BOOTED else admin
    before, n_audit = dump(store), len(machine.audit())
    with pytest.raises(InvalidTransition) as err:
        machine.perform(who, action, mode=ExecMode.WEIGHT_STREAMING, reason="again")
    assert dump(store) == before  # systems, users, jobs, allocations, meta: byte-for-byte
    log = machine.audit()
    assert len(log) == n_audit + 1
    last = log[-1]
    assert (last.user, last.outcome, last.from_state, last.to_state) == (
        who.name,
        "refused",
        state,
        state,
    )
    assert last.detail == str(err.value)


@pytest.mark.parametrize("action", PUBLIC)
def test_a_user_is_denied_audited_and_nothing_changes(store, machine, alice, action):
    before, n_audit = dump(store), len(machine.audit())
    with pytest.raises(PermissionDenied) as err:
        machine.perform(alice, action, mode=ExecMode.WEIGHT_STREAMING, reason="x")
    assert "needs the admin role; you are logged in as alice (user)." in str(err.value)
    assert dump(store) == before
    last = machine.audit()[-1]
    assert len(machine.audit()) == n_audit + 1
    assert (last.user, last.outcome, last.detail) == ("alice", "denied", str(err.value))


def test_denied_message_is_exact(machine, alice):
    with pytest.raises(PermissionDenied) as err:
        machine.standby(alice)
    assert str(err.value) == (
        "Permission denied: `system standby` needs the admin role; "
        "you are logged in as alice (user)."
    )
    assert err.value.exit_code == 77


def test_nobody_but_the_clock_can_boot(machine, admin, monkeypatch):
    drive(machine, admin, State.ACTIVATING, monkeypatch)
    with pytest.raises(PermissionDenied):
        machine.perform(admin, Action.BOOTED)
    with pytest.raises(InvalidTransition, match=r"ACTIVATING \(ready in 100 s\)"):
        machine.perform(SYSTEM, Action.BOOTED)  # not before its time
    assert machine.status().state is State.ACTIVATING


def test_activating_refusal_says_how_long(machine, admin, clock, monkeypatch):
    drive(machine, admin, State.ACTIVATING, monkeypatch)
    clock.advance(97.5)
    with pytest.raises(InvalidTransition) as err:
        machine.standby(admin)
    assert str(err.value) == (
        "The system is ACTIVATING (ready in 3 s); wait for it to become ACTIVE."
    )


def test_check_refuses_before_confirmation_and_audits_the_attempt(store, machine, admin, alice):
    machine.check(admin, Action.STANDBY)  # allowed: no row, no change
    assert machine.audit() == [] and machine.status().state is State.ACTIVE
    before = dump(store)
    with pytest.raises(InvalidTransition, match="run `system standby` first"):
        machine.check(admin, Action.SETUP)
    with pytest.raises(PermissionDenied):
        machine.check(alice, Action.STANDBY)
    assert dump(store) == before
    assert [e.outcome for e in machine.audit()] == ["refused", "denied"]


def test_setup_to_the_configured_mode_is_an_audited_no_op(store, machine, admin):
    machine.standby(admin)
    before = dump(store)
    s = machine.setup_execmode(admin, ExecMode.PIPELINED)
    assert s.configured_mode is ExecMode.PIPELINED and dump(store) == before
    last = machine.audit()[-1]
    assert (last.outcome, last.detail) == ("ok", "PIPELINED is already configured; nothing changed")


def test_pending_change_survives_standby_and_clears_only_on_boot(machine, admin):
    machine.standby(admin)
    machine.setup_execmode(admin, ExecMode.WEIGHT_STREAMING)
    assert machine.status().pending_mode_change
    s = machine.activate(admin)  # 0 s boot
    assert (s.active_mode, s.pending_mode_change) == (ExecMode.WEIGHT_STREAMING, False)


def test_fault_and_recovery(machine, admin):
    s = machine.inject_fault(admin, "fabric link down")
    assert (s.state, s.fault_reason) == (State.FAULT, "fabric link down")
    with pytest.raises(InvalidTransition, match="run `system standby` first to clear it"):
        machine.activate(admin)
    s = machine.standby(admin)
    assert (s.state, s.fault_reason) == (State.STANDBY, "")
    assert "cleared fault: fabric link down" in machine.audit()[-1].detail
    assert machine.activate(admin).state is State.ACTIVE


def test_standby_with_running_jobs_records_them(machine, admin):
    import os

    job = machine.register_job(admin, ExecMode.PIPELINED, "python run.py", os.getpid())
    with pytest.raises(
        InvalidTransition, match=r"1 job\(s\) running: job \d+ \(.*system standby --force"
    ):
        machine.standby(admin)  # unforced: refused while a job runs, nothing changes
    assert machine.status().state is State.ACTIVE
    assert machine.audit()[-1].outcome == "refused"
    machine.standby(admin, force=True)
    # the row says it was forced, not just `system standby`
    assert machine.audit()[-1].detail == (
        f"forced: 1 job(s) running, stopped at their next step: {job.id}"
    )


def test_boot_seconds_from_the_environment(monkeypatch):
    monkeypatch.delenv("CS2_BOOT_SECONDS")
    assert boot_seconds() == 5.0
    monkeypatch.setenv("CS2_BOOT_SECONDS", "2.5")
    assert boot_seconds() == 2.5
    for bad in ("abc", "-1", "nan", "inf"):
        monkeypatch.setenv("CS2_BOOT_SECONDS", bad)
        with pytest.raises(ConfigError, match="CS2_BOOT_SECONDS"):
            boot_seconds()


def test_bad_boot_seconds_refuses_activate_before_anything(store, machine, admin, monkeypatch):
    machine.standby(admin)
    monkeypatch.setenv("CS2_BOOT_SECONDS", "soon")
    before, n = dump(store), len(machine.audit())
    with pytest.raises(ConfigError):
        machine.activate(admin)
    assert dump(store) == before and len(machine.audit()) == n


def test_unknown_system_lists_the_known_ones(store):
    assert list_systems(store) == ["cs2-1"]
    with pytest.raises(UsageError, match=r"Unknown system 'cs9'; known systems: cs2-1\."):
        Machine(store, "cs9")


def test_software_versions(machine, admin):
    soft = machine.software()
    assert soft["firmware"] == "faraday (Pipelined)"
    assert soft["CSoft"] == machine.status().software_version
    import re

    assert re.fullmatch(r"1\.4\.0-\d{12}-1-[0-9a-f]{8}", soft["CSoft"])
    machine.standby(admin)
    machine.setup_execmode(admin, ExecMode.WEIGHT_STREAMING)
    machine.activate(admin)
    assert machine.software()["firmware"] == "ampere (Weight Streaming)"


def test_a_change_that_fails_midway_is_rolled_back_and_audited_as_error(store, machine, admin):
    def broken(db, row, to, now):
        db.execute("UPDATE systems SET state = 'STANDBY'")  # written, then the change fails
        raise RuntimeError("disk on fire")

    before = dump(store)
    with pytest.raises(RuntimeError):
        machine._attempt(admin, Action.STANDBY, broken)
    assert dump(store) == before
    last = machine.audit()[-1]
    assert (last.command, last.outcome, last.detail) == (
        "system standby",
        "error",
        "RuntimeError: disk on fire",
    )
