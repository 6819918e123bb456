"""The Weight Streaming Quickstart's Section 1 (docs/sources.md) exactly as written, and the
behaviours a person at the console relies on.

Under pexpect, the real `python -m csshell` on a pseudo-terminal with no special environment (no
PROMPT_TOOLKIT_NO_CPR), for what only a terminal shows: the Quickstart once with arrow keys, the
completion menu as drawn, Ctrl-C, a kill. The console's logic (abbreviations, questions, the
menu, Tab and `?`, permissions, a second shell's view) runs in this process
(shell_helpers.console: the shell's own prompt session on a pipe input)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import console, cs, err, make_context, out, write_password

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.login import login
from cs2sim.csshell.repl import history_path
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import login_name

QUESTION = "This puts the system in standby. Do you want to proceed?"
DOWN = "\x1b[B"


def machine_state(home: Path) -> tuple[State, ExecMode, ExecMode]:
    with Store.open(home) as store:
        s = Machine(store).status()
    return s.state, s.configured_mode, s.active_mode


def test_the_quickstarts_mode_change_choosing_with_arrow_keys(spawn: Any, home: Path) -> None:
    sh = spawn(boot_seconds=0.5)
    # Step 2
    sh.run("config execmode show", "Configured Execution Mode : PIPELINED")
    # Step 3
    sh.child.sendline("system standby")
    sh.expect(QUESTION)
    sh.child.sendline("yes")
    sh.prompt()
    # Step 4: the menu preselects the current mode; one arrow down is Weight Streaming
    sh.child.sendline("config execmode setup")
    sh.expect("Pipelined (current)")
    sh.expect("Weight Streaming")
    sh.send(DOWN)
    sh.send("\r")
    sh.expect("Selected execution mode configuration: ✔ Weight Streaming")
    sh.prompt()
    # Step 5: the reboot, then exactly one line
    sh.child.sendline("system activate")
    sh.expect("System activated in Weight Streaming mode.")
    sh.prompt()
    sh.run("config execmode show", "Configured Execution Mode : WEIGHT_STREAMING")
    sh.send("\x04")  # Ctrl-D
    assert sh.exit_status() == 0
    assert machine_state(home) == (
        State.ACTIVE,
        ExecMode.WEIGHT_STREAMING,
        ExecMode.WEIGHT_STREAMING,
    )
    history = history_path(home, login_name()).read_text()  # per account, in $CS2_HOME
    assert "+config execmode setup" in history and "+system activate" in history


def test_the_quickstarts_mode_change_typing_abbreviations_and_names(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = (
        "conf exec sh\r"
        "sys stand\rperhaps\ryes\r"  # a bad answer re-asks
        "conf exec setup\rweight streaming\r"  # typed name + Enter
        "sys act\r"
        "conf exec sh\r"
        "exit\r"
        "system show\r"  # never read: `exit` left
    )
    code, ctx = console(store, keys)
    assert code == 0
    assert ctx.prompter.asked == [QUESTION, "Select the execution mode:"]
    assert capsys.readouterr().out.count("Please answer yes or no.") == 1
    assert ctx.prompter.menus[0][1] is ExecMode.PIPELINED  # the current mode preselected
    lines = out(ctx).splitlines()
    assert lines.pop(3).startswith(
        "cs2-1 will boot into Weight Streaming mode (now Pipelined), as configured by "
    )  # who set it, then the Quickstart's line
    assert lines == [
        "Configured Execution Mode : PIPELINED",
        "System cs2-1 is in STANDBY.",
        "Selected execution mode configuration: ✔ Weight Streaming",
        "System activated in Weight Streaming mode.",
        "Configured Execution Mode : WEIGHT_STREAMING",
    ]
    assert machine_state(store.home) == (
        State.ACTIVE,
        ExecMode.WEIGHT_STREAMING,
        ExecMode.WEIGHT_STREAMING,
    )
    history = history_path(store.home, login_name()).read_text()  # per account, in $CS2_HOME
    assert "+conf exec setup" in history and "+sys act" in history


def test_setup_refused_when_active_names_the_fix(store: Store) -> None:
    code, ctx = console(store, "config execmode setup\r")
    assert code == 0
    assert err(ctx) == (
        "error: Execution mode can only be changed in STANDBY; run `system standby` first.\n"
    )
    assert ctx.prompter.asked == []  # refused before the menu
    assert machine_state(store.home)[1] is ExecMode.PIPELINED


def test_non_admin_is_refused(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = write_password(tmp_path / "alice.pw", "wonderland")
    assert cs(capsys, "-c", f"user add alice --role user --password-file {pw}")[0] == 0
    with Store.open(home) as store:
        alice = login(store, "alice", str(pw))
        code, ctx = console(
            store, "system standby\rconfig execmode setup\rconfig execmode show\r", alice
        )
        assert code == 0 and ctx.prompter.asked == []  # refused before any question
        assert err(ctx).splitlines() == [
            "error: Permission denied: `system standby` needs the admin role; "
            "you are logged in as alice (user).",
            "error: Permission denied: `config execmode setup` needs the admin role; "
            "you are logged in as alice (user).",
        ]
        assert out(ctx) == "Configured Execution Mode : PIPELINED\n"  # looking is fine
        assert machine_state(home)[0] is State.ACTIVE


def test_on_a_terminal_the_password_is_asked(spawn: Any, home: Path, tmp_path: Path) -> None:
    """getpass on the terminal: never taken from argv or the environment."""
    pw = write_password(tmp_path / "alice.pw", "wonderland")
    with Store.open(home) as store:
        assert (
            run_line(make_context(store), f"user add alice --role user --password-file {pw}") == 0
        )
    sh = spawn("--user", "alice", wait_prompt=False)
    sh.expect("Password for alice:")
    sh.child.sendline("wonderland")
    sh.prompt()
    sh.run("user list", "You are alice (user, password).")


def test_tab_completion_and_question_mark_help(store: Store) -> None:
    steps = [
        ("conf\t", "config "),  # each Tab completes the word (the next key waits for it)
        ("exec\t", "config execmode "),
        ("sh\t", "config execmode show "),
        ("?\r", None),  # `?` echoes the line as it stands, then lists <cr>
        ("conf exec ?show ?\x03", None),  # `?` lists what can follow, <cr> once the words run
    ]
    code, ctx = console(store, steps, history=False)
    assert code == 0
    lines = [" ".join(x.split()) for x in out(ctx).splitlines()]
    assert lines == [
        "cs> config execmode show ?",
        "--output-format=json|text Print as text (default) or JSON.",
        "<cr> Run `config execmode show`.",
        "Configured Execution Mode : PIPELINED",
        "cs> conf exec ?",
        "setup Choose the execution mode (STANDBY only; admin).",
        "show Show the configured execution mode.",
        "withdraw Take back a pending mode change: configure the active mode again "
        "(STANDBY; admin).",
        "cs> conf exec show ?",
        "--output-format=json|text Print as text (default) or JSON.",
        "<cr> Run `config execmode show`.",
    ]


def test_the_first_tab_on_an_empty_line_shows_every_top_level_command(spawn: Any) -> None:
    """A newcomer's first Tab: all of them, `system` and `user` too, without scrolling."""
    from cs2sim.csshell.commands import COMMANDS

    sh = spawn()
    sh.send("\t")
    for _, node in sorted(COMMANDS.root.children.items()):  # the menu's rows, top to bottom
        sh.expect(node.summary, timeout=5)
    sh.send("\x03")
    sh.prompt()
    # an ambiguous prefix opens the menu with each command's summary
    sh.send("system st\t")
    sh.expect("Put the system in STANDBY, after asking (admin).")
    sh.send("\x03")
    sh.prompt()


def test_ctrl_c_cancels_the_line_or_the_question_never_the_shell(spawn: Any, home: Path) -> None:
    sh = spawn()
    sh.send("system standby")
    sh.send("\x03")
    sh.prompt()
    sh.child.sendline("system standby")
    sh.expect(QUESTION)
    sh.send("\x03")
    sh.expect("Cancelled.")
    sh.run("config execmode show", "Configured Execution Mode : PIPELINED")
    assert machine_state(home)[0] is State.ACTIVE
    sh.send("\x04")
    assert sh.exit_status() == 0


def test_ctrl_c_while_rebooting_stops_waiting_only(spawn: Any, home: Path) -> None:
    sh = spawn(boot_seconds=60)
    sh.child.sendline("system standby --yes")
    sh.prompt()
    sh.child.sendline("system activate")
    sh.expect("Rebooting cs2-1 into Pipelined mode")
    sh.send("\x03")
    sh.expect("keeps rebooting")
    sh.prompt()
    sh.run("system show", "ACTIVATING since")
    assert machine_state(home)[0] is State.ACTIVATING


def test_a_second_shell_sees_the_change_at_its_next_command(home: Path) -> None:
    with Store.open(home) as one, Store.open(home) as two:  # two shells, each its own store
        first, second = make_context(one), make_context(two)
        assert run_line(second, "config execmode show") == 0  # it has read the system once
        assert run_line(first, "system standby --yes") == 0
        assert run_line(first, "config execmode setup weight-streaming") == 0
        assert run_line(second, "config execmode show; system show") == 0
    shown = out(second).splitlines()
    assert shown[:3] == [
        "Configured Execution Mode : PIPELINED",
        "Configured Execution Mode : WEIGHT_STREAMING",
        "Active Execution Mode     : PIPELINED (WEIGHT_STREAMING takes effect at the next "
        "`system activate`)",
    ]
    assert shown[4].startswith("State                     : STANDBY since ")
    assert shown[-1] == "Running Jobs              : none"


def test_kill_9_while_rebooting_leaves_nothing_half_done(spawn: Any, home: Path) -> None:
    sh = spawn(boot_seconds=60)
    sh.run("system standby --yes; config execmode setup ws", "✔ Weight Streaming")
    sh.child.sendline("system activate")
    sh.expect("Rebooting cs2-1 into Weight Streaming mode")
    sh.child.kill(signal.SIGKILL)  # the shell dies mid-wait; the reboot is in the store
    sh.expect_eof()
    with Store.open(home) as store:
        assert Machine(store).status().state is State.ACTIVATING
        later = Machine(store, clock=lambda: time.time() + 61)  # whoever reads after the boot
        status = later.status()
        assert (status.state, status.active_mode) == (State.ACTIVE, ExecMode.WEIGHT_STREAMING)
        log = [(e.user, e.command, e.outcome) for e in later.audit()]
    assert [command for _, command, _ in log[-2:]] == ["system activate", "booted"]
    assert log[-1] == ("system", "booted", "ok")  # audited once, by the clock
