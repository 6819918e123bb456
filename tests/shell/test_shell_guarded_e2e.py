"""History per account, and another admin's unseen mode change asked about before a reboot, at
the console in process (the shell's prompt session on a pipe input); `cs system standby` typed
as words asks, under pexpect on a real pseudo-terminal (what asks depends on the terminal)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from shell_helpers import (
    HISTORY_LOADED,
    Shell,
    console,
    console_context,
    err,
    make_context,
    out,
    shell_env,
    write_password,
)

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.login import login
from cs2sim.csshell.repl import history_path
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import login_name

QUESTION = "This puts the system in standby. Do you want to proceed?"
UP = "\x1b[A"


def _state(home: Path) -> tuple[State, ExecMode]:
    with Store.open(home) as store:
        s = Machine(store).status()
    return s.state, s.configured_mode


def _add_admin(store: Store, tmp_path: Path, name: str, role: str = "admin") -> Path:
    pw = write_password(tmp_path / f"{name}.pw", f"{name}-secret-22")
    assert run_line(make_context(store), f"user add {name} --role {role} --password-file {pw}") == 0
    return pw


def test_history_is_per_account_and_private(store: Store, tmp_path: Path) -> None:
    alice = login(store, "alice", str(_add_admin(store, tmp_path, "alice", role="user")))
    assert console(store, "system show\r")[0] == 0  # root
    assert console(store, "config execmode show\r", alice)[0] == 0
    # alice's Up, twice: her one command, never root's `system show`; `?` shows the line
    code, ctx = console(store, [("", HISTORY_LOADED), (UP + UP + "?\x03", None)], alice)
    assert code == 0 and out(ctx).splitlines()[0] == "cs> config execmode show?"
    code, ctx = console(store, [("", HISTORY_LOADED), (UP, "system show"), ("\x03", None)])
    assert code == 0  # root's own history is still root's
    mine, hers = history_path(store.home, login_name()), history_path(store.home, "alice")
    assert "+system show" in mine.read_text() and "+system show" not in hers.read_text()
    assert "+config execmode show" in hers.read_text()
    assert "+config execmode show" not in mine.read_text()
    for f in (mine, hers):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(mine.parent.stat().st_mode) == 0o700  # this OS user's histories


@pytest.mark.slow  # two consoles under pexpect
def test_standby_given_as_words_on_a_terminal_asks(home: Path) -> None:
    sh = Shell(shell_env(home), "system", "standby")  # `ssh -t root@system cs system standby`
    sh.expect(QUESTION)
    sh.child.sendline("no")
    sh.expect("Cancelled; cs2-1 stays ACTIVE.")
    assert sh.exit_status() == 0 and _state(home)[0] is State.ACTIVE
    sh = Shell(shell_env(home), "system", "standby")
    sh.expect(QUESTION)
    sh.child.sendline("yes")
    sh.expect("System cs2-1 is in STANDBY.")
    assert sh.exit_status() == 0 and _state(home)[0] is State.STANDBY


def test_another_admins_change_is_asked_about_before_the_reboot(
    store: Store, tmp_path: Path
) -> None:
    alice = login(store, "alice", str(_add_admin(store, tmp_path, "alice")))
    root = console_context(store)  # one session of root's, before and after alice's change
    assert run_line(root, "system standby --yes; config execmode setup weight-streaming") == 0
    # root's choice is pending: alice's script replaces it only with --yes
    assert run_line(make_context(store, alice), "config execmode setup pipelined --yes") == 0
    keys = "system activate\rno\rsystem activate --expect-mode weight-streaming\r"
    code, ctx = console(store, keys, ctx=root)
    assert code == 0 and ctx.prompter.asked == ["Boot cs2-1 into Pipelined mode?"]
    said = out(ctx).split("✔ Weight Streaming\n")[1]
    assert said.startswith(
        "cs2-1 will boot into Pipelined mode (no mode change), as configured by alice"
    )
    assert "Note: alice set the configured mode to PIPELINED" in said
    assert said.endswith("Cancelled; nothing was changed (cs2-1 stays STANDBY).\n")
    assert "configured for PIPELINED, not WEIGHT_STREAMING as expected" in err(ctx)
    assert _state(store.home) == (State.STANDBY, ExecMode.PIPELINED)
