"""A cluster of several CS-2s at the console (in process: the shell's prompt session on a pipe
input): `cs --system NAME` acts on that system (the show commands and the toolbar name it),
`system list` lists them all, `system use` switches, and refusals and audit rows name their
system; one system is as before."""

from __future__ import annotations

from pathlib import Path

from shell_helpers import console, err, make_context, out

from cs2sim.csshell.context import Context
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.toolbar import Toolbar
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store

QUESTION = "This puts the system in standby. Do you want to proceed?"


def _four(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "cluster.yaml").write_text(EXAMPLE_PATH.read_text())


def toolbar(ctx: Context) -> str:
    return "".join(t for _, t in Toolbar(ctx, columns=lambda: 160)())


def test_system_flag_list_and_use_at_the_console(store: Store) -> None:
    _four(store.home)
    assert toolbar(make_context(store, system="cs2-2")).startswith(" cs2-2 │ ")  # names it
    keys = (
        "system show\rsystem list\r"
        "system use cs2-4\rsystem standby\ryes\rconfig execmode setup pipelined\r"
        "system use cs2-1\rconfig execmode setup pipelined\r"  # a refusal names its system
        "system use cs2-9\rsystem show\rconfig execmode show\rsoftware show\r"
    )
    code, ctx = console(store, keys, system="cs2-2")  # `cs --system cs2-2`
    assert code == 0 and ctx.prompter.asked == [QUESTION]
    shown = out(ctx)
    assert shown.startswith("System                    : cs2-2 (127.0.1.2)\n")
    listed = [line.split() for line in shown.splitlines() if line.startswith(("    cs2-", "*"))]
    assert [r[0] for r in listed] == ["cs2-1", "*", "cs2-3", "cs2-4"]  # `*`: the one acted on
    assert listed[1][1:4] == ["cs2-2", "127.0.1.2", "ACTIVE"]
    assert (
        "Now acting on cs2-4 (127.0.1.4): ACTIVE, WEIGHT_STREAMING.\n"
        "System cs2-4 is in STANDBY.\n"
        "Selected execution mode configuration: ✔ Pipelined (on cs2-4)\n"
        "Now acting on cs2-1 (127.0.1.1): ACTIVE, WEIGHT_STREAMING.\n"
        "System                    : cs2-1 (127.0.1.1)\n"  # still cs2-1 after cs2-9
    ) in shown
    after = shown.split("Running Jobs")[-1]  # config execmode show, software show
    assert after.splitlines()[1:4] == [
        "System                    : cs2-1 (127.0.1.1)",  # every show names it
        "Configured Execution Mode : WEIGHT_STREAMING",
        "system   : cs2-1 (127.0.1.1)",
    ]
    assert err(ctx).splitlines() == [
        "error: cs2-1: Execution mode can only be changed in STANDBY; run `system standby` first.",
        "error: Unknown system 'cs2-9'; known systems: cs2-1, cs2-2, cs2-3, cs2-4.",
    ]
    assert toolbar(ctx).startswith(" cs2-1 │ ")  # the one `system use` chose
    states = {n: Machine(store, n).status().state for n in ("cs2-1", "cs2-2", "cs2-4")}
    standby = [e for e in Machine(store, "cs2-4").audit() if e.command == "system standby"]
    others = [e for e in Machine(store, "cs2-1").audit() if e.command == "system standby"]
    assert states == {"cs2-1": State.ACTIVE, "cs2-2": State.ACTIVE, "cs2-4": State.STANDBY}
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
