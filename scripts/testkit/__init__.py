"""cs2sim's testing kit: test your own CS-2 automation against a throwaway simulated CS-2.

Installed with the project; pytest finds its fixtures by itself (entry point ``pytest11``), so a
test file needs no import and no conftest:

    def test_my_mode_switch(cs2_system):
        cs2_system.put_in("ACTIVE", mode="PIPELINED")        # a starting point, set directly
        result = cs2_system.cs("config execmode show --output-format=json")
        assert result.ok and result.json()["execmode"] == "PIPELINED"

    def test_my_interactive_script(cs2_console):
        cs2_console.send("system standby")                   # asks a question ...
        out = cs2_console.answer("yes")                       # ... answered here
        assert "STANDBY" in out

The same objects work without pytest:

    from cs2sim.scripts.testkit import ThrowawaySystem
    with ThrowawaySystem() as system:
        system.cs("system standby --yes")

What each piece is:
* ``ThrowawaySystem``  a CS-2 of its own: a fresh $CS2_HOME (store, audit log, history) in a
                       temporary directory, an optional cluster description, reboots compressed
                       (0 s unless you ask), removed with every process it started on close.
* ``CsResult``         what one ``cs -c`` run printed and its exit status.
* ``ConsoleSession``   the interactive ``cs>`` under pexpect, answering confirmations and the
                       setup menu; output comes back without the toolbar and escape codes.
See docs/testkit.md for the fixtures and fault injection.
"""

from __future__ import annotations

from cs2sim.scripts.testkit.console import ConsoleSession
from cs2sim.scripts.testkit.result import CsResult
from cs2sim.scripts.testkit.system import ThrowawaySystem

__all__ = ["ThrowawaySystem", "ConsoleSession", "CsResult"]
