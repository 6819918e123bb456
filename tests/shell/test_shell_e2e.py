"""End to end under pexpect: the real `python -m csshell` on a pseudo-terminal, no special
environment (no PROMPT_TOOLKIT_NO_CPR): the Weight Streaming Quickstart's Section 1
(docs/sources.md) exactly as written, and the
behaviours a person at the console relies on."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shell_helpers import shell_env, write_password

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


def test_the_quickstarts_mode_change_typing_abbreviations_and_names(spawn: Any, home: Path) -> None:
    sh = spawn()
    sh.run("conf exec sh", "Configured Execution Mode : PIPELINED")
    sh.child.sendline("sys stand")
    sh.expect(QUESTION)
    sh.child.sendline("perhaps")  # a bad answer re-asks
    sh.expect("Please answer yes or no.")
    sh.expect(QUESTION)
    sh.child.sendline("yes")
    sh.prompt()
    sh.child.sendline("conf exec setup")
    sh.expect("Weight Streaming")
    sh.child.sendline("weight streaming")  # typed name + Enter
    sh.expect("Selected execution mode configuration: ✔ Weight Streaming")
    sh.prompt()
    sh.run("sys act", "System activated in Weight Streaming mode.")
    sh.run("conf exec sh", "Configured Execution Mode : WEIGHT_STREAMING")
    sh.child.sendline("exit")
    assert sh.exit_status() == 0


def test_setup_refused_when_active_names_the_fix(spawn: Any, home: Path) -> None:
    sh = spawn()
    before = sh.run(
        "config execmode setup",
        "error: Execution mode can only be changed in STANDBY; run `system standby` first.",
    )
    assert "Select the execution mode" not in before  # refused before the menu
    assert machine_state(home)[1] is ExecMode.PIPELINED


def test_non_admin_is_refused(spawn: Any, home: Path, tmp_path: Path) -> None:
    pw = write_password(tmp_path / "alice.pw", "wonderland")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "cs2sim.csshell",
            "-c",
            f"user add alice --role user --password-file {pw}",
        ],
        env=shell_env(home),
        check=True,
        capture_output=True,
        timeout=60,
    )
    sh = spawn("--user", "alice", "--password-file", str(pw))
    sh.run(
        "system standby",
        "error: Permission denied: `system standby` needs the admin role; "
        "you are logged in as alice (user).",
    )
    sh.run("config execmode setup", "error: Permission denied")
    sh.run("config execmode show", "Configured Execution Mode : PIPELINED")  # looking is fine
    assert machine_state(home)[0] is State.ACTIVE
    # on a terminal the password is asked (getpass), never taken from argv or the environment
    sh = spawn("--user", "alice", wait_prompt=False)
    sh.expect("Password for alice:")
    sh.child.sendline("wonderland")
    sh.prompt()
    sh.run("user list", "You are alice (user, password).")


def test_tab_completion_and_question_mark_help(spawn: Any) -> None:
    sh = spawn()
    sh.send("conf\t")
    sh.line_is("config ")
    sh.send("exec\t")
    sh.line_is("config execmode ")
    sh.send("sh\t")
    sh.line_is("config execmode show ")
    sh.run("", "Configured Execution Mode : PIPELINED")
    # an ambiguous prefix opens the menu with each command's summary
    sh.send("system st\t")
    sh.expect("Put the system in STANDBY, after asking (admin).")
    sh.send("\x03")
    sh.prompt()
    # `?` lists what can follow, with <cr> when the words so far already run
    sh.send("conf exec ?")
    sh.expect("setup     Choose the execution mode")
    sh.expect("show      Show the configured execution mode.")
    sh.send("show ?")
    sh.expect("<cr>")
    sh.send("\x03")
    sh.prompt()


def test_the_first_tab_on_an_empty_line_shows_every_top_level_command(spawn: Any) -> None:
    """A newcomer's first Tab: all of them, `system` and `user` too, without scrolling."""
    from cs2sim.csshell.commands import COMMANDS

    sh = spawn()
    sh.send("\t")
    for _, node in sorted(COMMANDS.root.children.items()):  # the menu's rows, top to bottom
        sh.expect(node.summary, timeout=5)
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


def test_a_second_shell_sees_the_change_at_its_next_command(spawn: Any) -> None:
    first, second = spawn(), spawn()
    first.run("system standby --yes", "System cs2-1 is in STANDBY.")
    first.run("config execmode setup weight-streaming", "✔ Weight Streaming")
    out = second.run(
        "config execmode show",
        "Configured Execution Mode : WEIGHT_STREAMING",
        "Active Execution Mode     : PIPELINED (WEIGHT_STREAMING takes effect",
    )
    assert "STANDBY" in second.run("system show", "Running Jobs")
    assert out


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
