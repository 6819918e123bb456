"""Under pexpect, on a real pseudo-terminal: history per account, `cs system standby`
typed as words asks, and another admin's unseen mode change is asked about before a reboot."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import Shell, shell_env, write_password

from cs2sim.csshell.repl import history_path
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import login_name

QUESTION = "This puts the system in standby. Do you want to proceed?"
UP = "\x1b[A"

pytestmark = pytest.mark.slow  # several consoles under pexpect


def _cs(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cs2sim.csshell", *argv],
        env=shell_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def _state(home: Path) -> tuple[State, ExecMode]:
    with Store.open(home) as store:
        s = Machine(store).status()
    return s.state, s.configured_mode


def _add_admin(home: Path, tmp_path: Path, name: str, role: str = "admin") -> Path:
    pw = write_password(tmp_path / f"{name}.pw", f"{name}-secret-22")
    _cs(home, "-c", f"user add {name} --role {role} --password-file {pw}")
    return pw


def test_history_is_per_account_and_private(spawn: Any, home: Path, tmp_path: Path) -> None:
    pw = _add_admin(home, tmp_path, "alice", role="user")
    root = spawn()
    root.run("system show", "Running Jobs")
    root.send("\x04")
    assert root.exit_status() == 0
    alice = spawn("--user", "alice", "--password-file", str(pw))
    alice.send(UP)  # root's `system show` must not come back
    alice.line_is("")
    alice.run("config execmode show", "Configured Execution Mode : PIPELINED")
    alice.send("\x04")
    assert alice.exit_status() == 0
    again = spawn()
    again.send(UP)
    again.line_is("system show")  # root's own history is still root's
    again.send("\x03")
    again.prompt()
    mine, hers = history_path(home, login_name()), history_path(home, "alice")
    assert "+system show" in mine.read_text() and "+system show" not in hers.read_text()
    assert "+config execmode show" in hers.read_text()
    for f in (mine, hers):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    assert stat.S_IMODE(mine.parent.stat().st_mode) == 0o700  # this OS user's histories


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
    spawn: Any, home: Path, tmp_path: Path
) -> None:
    pw = _add_admin(home, tmp_path, "alice")
    root = spawn()
    root.run("system standby --yes; config execmode setup weight-streaming", "✔ Weight Streaming")
    # root's choice is pending: alice's script replaces it only with --yes
    _cs(
        home,
        "--user",
        "alice",
        "--password-file",
        str(pw),
        "-c",
        "config execmode setup pipelined --yes",
    )
    root.child.sendline("system activate")
    root.expect("cs2-1 will boot into Pipelined mode (no mode change), as configured by alice")
    root.expect("Note: alice set the configured mode to PIPELINED")
    root.expect("Boot cs2-1 into Pipelined mode? (yes/no) [no]:")
    root.child.sendline("no")
    root.expect("Cancelled; nothing was changed (cs2-1 stays STANDBY).")
    root.prompt()
    assert _state(home) == (State.STANDBY, ExecMode.PIPELINED)
    root.run(
        "system activate --expect-mode weight-streaming",
        "configured for PIPELINED, not WEIGHT_STREAMING as expected",
    )
    assert _state(home)[0] is State.STANDBY
