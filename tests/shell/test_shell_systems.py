"""A cluster of several CS-2s at the console, under pexpect: `cs --system NAME` acts on
that system (the show commands and the toolbar name it), `system list` lists them all, `system
use` switches, and refusals and audit rows name their system; one system is as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shell_helpers import make_context, out

from cs2sim.csshell.dispatch import run_line
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store

QUESTION = "This puts the system in standby. Do you want to proceed?"


def _four(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "cluster.yaml").write_text(EXAMPLE_PATH.read_text())


def test_system_flag_list_and_use_over_a_terminal(spawn: Any, home: Path) -> None:
    _four(home)
    sh = spawn("--system", "cs2-2")
    sh.run("system show", "System                    : cs2-2 (127.0.1.2)")
    sh.expect("cs2-2 │ ")  # the toolbar names the system acted on
    listed = sh.run("system list", "127.0.1.4")
    rows = [line.split() for line in listed.splitlines() if "127.0.1." in line]
    assert [r[0] for r in rows] == ["cs2-1", "*", "cs2-3", "cs2-4"]  # `*`: the one acted on
    assert rows[1][1:4] == ["cs2-2", "127.0.1.2", "ACTIVE"]
    sh.run("system use cs2-4", "Now acting on cs2-4 (127.0.1.4): ACTIVE, WEIGHT_STREAMING.")
    sh.child.sendline("system standby")
    sh.expect(QUESTION)
    sh.child.sendline("yes")
    sh.expect("System cs2-4 is in STANDBY.")
    sh.prompt()
    sh.run(
        "config execmode setup pipelined",
        "Selected execution mode configuration: ✔ Pipelined (on cs2-4)",
    )
    sh.run("system use cs2-1")
    # a refusal says which system refused
    sh.run(
        "config execmode setup pipelined",
        "error: cs2-1: Execution mode can only be changed in STANDBY",
    )
    sh.run(
        "system use cs2-9",
        "error: Unknown system 'cs2-9'; known systems: cs2-1, cs2-2, cs2-3, cs2-4.",
    )
    sh.run("system show", "System                    : cs2-1 (127.0.1.1)")  # still cs2-1
    shown = sh.run("config execmode show", "Configured Execution Mode : WEIGHT_STREAMING")
    assert "System                    : cs2-1 (127.0.1.1)" in shown  # every show names it
    sh.run("software show", "system   : cs2-1 (127.0.1.1)")
    sh.send("\x04")
    assert sh.exit_status() == 0
    with Store.open(home) as store:
        states = {n: Machine(store, n).status().state for n in ("cs2-1", "cs2-2", "cs2-4")}
        standby = [e for e in Machine(store, "cs2-4").audit() if e.command == "system standby"]
        others = [e for e in Machine(store, "cs2-1").audit() if e.command == "system standby"]
    assert states == {"cs2-1": State.ACTIVE, "cs2-2": State.ACTIVE, "cs2-4": State.STANDBY}
    with Store.open(home) as store:
        assert Machine(store, "cs2-4").status().configured_mode.value == "PIPELINED"
        assert Machine(store, "cs2-2").status().configured_mode.value == "WEIGHT_STREAMING"
    assert [e.system for e in standby] == ["cs2-4"] and others == []


def test_one_system_looks_as_before(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "jobs show; audit show --last 1") == 0
    text = out(ctx)
    assert "SYSTEMS" not in text and " system " not in text.splitlines()[1]
    ctx = make_context(store)
    assert run_line(ctx, "system show") == 0
    assert "Reserved" not in out(ctx)
    ctx = make_context(store)
    assert run_line(ctx, "config execmode show; software show") == 0
    assert "System" not in out(ctx) and "system " not in out(ctx)  # the Quickstart's lines alone
