"""`system activate` says what happened and exits as the audit log says."""

from __future__ import annotations

import time

import pytest
from shell_helpers import err, make_context, out

import cs2sim.csshell.commands.system as cmd_system
from cs2sim.csshell.dispatch import run_line
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role

BOB = Identity("bob", Role.ADMIN, "password")


def test_standby_landing_after_the_boot_is_reported_with_exit_0(store, home, monkeypatch):
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0.05")
    ctx = make_context(store)
    assert run_line(ctx, "system standby --yes") == 0
    other = Store.open(home)  # another admin's shell: its own connection
    real_sleep = cmd_system._sleep_until
    looks = []

    def other_admin_moves_first(until: float | None) -> None:
        real_sleep(until)
        time.sleep(max(0.0, (until or 0) - time.time()) + 0.01)
        if not looks:  # the boot is due; bob looks first (settling it) and puts it in standby
            machine = Machine(other)
            assert machine.status().state is State.ACTIVE
            machine.standby(BOB)
        looks.append(until)

    monkeypatch.setattr(cmd_system, "_sleep_until", other_admin_moves_first)
    code = run_line(ctx, "system activate")
    other.close()
    text = out(ctx)
    assert code == 0, err(ctx)
    assert "booted into Pipelined mode at" in text
    assert "then bob put it in STANDBY at" in text and "`system standby`" in text
    log = Machine(store).audit()
    mine = [e for e in log if e.command in ("system activate", "booted", "system standby")][-3:]
    assert [(e.user, e.command, e.outcome) for e in mine] == [
        (ctx.identity.name, "system activate", "ok"),
        ("system", "booted", "ok"),
        ("bob", "system standby", "ok"),
    ]


def test_a_fault_during_the_reboot_is_a_failure_naming_who(store, home, monkeypatch):
    monkeypatch.setenv("CS2_BOOT_SECONDS", "30")
    ctx = make_context(store)
    run_line(ctx, "system standby --yes")
    other = Store.open(home)

    def fault_instead(until: float | None) -> None:
        Machine(other).inject_fault(BOB, "fan 3 stopped")

    monkeypatch.setattr(cmd_system, "_sleep_until", fault_instead)
    assert run_line(ctx, "system activate") == 1
    other.close()
    assert "The reboot did not complete: bob put cs2-1 in FAULT at" in err(ctx)
    assert not [e for e in Machine(store).audit() if e.command == "booted"]


@pytest.mark.parametrize("attempt", range(3))
def test_boot_seconds_0_never_promises_a_wait(store, home, attempt):
    """A refusal under CS2_BOOT_SECONDS=0 must not say "ready in 1 s"; the clock is
    read under the write lock, so a reboot another process committed while we waited is due."""
    import threading

    machine = Machine(store)
    ctx = make_context(store)
    run_line(ctx, "system standby --yes")
    writer = Store.open(home)
    result: list[object] = []
    with writer.transaction() as db:  # hold the lock while the other admin's standby starts
        thread = threading.Thread(target=lambda: result.append(_try_standby(machine, ctx)))
        thread.start()
        time.sleep(0.2)  # the standby is waiting for the lock now
        until = time.time()  # an activation with CS2_BOOT_SECONDS=0, committed after it began
        db.execute(
            "UPDATE systems SET state = 'ACTIVATING', state_since = ?, activating_until = ?",
            (until, until),
        )
    thread.join(30)
    writer.close()
    assert result == ["ok"], result  # the boot was due: settled to ACTIVE, then standby
    assert machine.status().state is State.STANDBY


def _try_standby(machine: Machine, ctx) -> str:
    try:
        machine.standby(ctx.identity)
        return "ok"
    except Exception as e:  # noqa: BLE001 - the test reports it
        return str(e)
