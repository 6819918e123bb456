"""`fault_at_step(n)` arms the system's environment only until it fires: once the system is in
FAULT, or the timer is cancelled, later runs get no CS2SIM_FAULT_AT_STEP."""

from __future__ import annotations

from cs2sim.scripts.testkit import ThrowawaySystem

KEYS = ("CS2SIM_FAULT_AT_STEP", "CS2SIM_FAULT_REASON")


def test_cancel_disarms_at_once() -> None:
    with ThrowawaySystem() as system:
        timer = system.fault_at_step(5, reason="fabric link down")
        assert system.env["CS2SIM_FAULT_AT_STEP"] == "5"
        timer.cancel()
        assert not any(k in system.env for k in KEYS)
        assert not timer.wait(5)


def test_a_fault_that_happened_leaves_later_runs_alone() -> None:
    with ThrowawaySystem() as system:
        timer = system.fault_at_step(3)
        system.put_in("FAULT", reason="injected")
        assert timer.wait(30)
        assert not any(k in system.env for k in KEYS)


def test_a_later_fault_at_step_is_not_disarmed_by_the_earlier_timer() -> None:
    with ThrowawaySystem() as system:
        first = system.fault_at_step(3)
        second = system.fault_at_step(7)
        first.cancel()
        assert system.env["CS2SIM_FAULT_AT_STEP"] == "7"
        assert "CS2SIM_FAULT_REASON" in system.env  # the second one's, still armed
        second.cancel()
        assert "CS2SIM_FAULT_AT_STEP" not in system.env
