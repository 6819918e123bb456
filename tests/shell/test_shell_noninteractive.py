"""`cs -c`, `cs -f`, commands as words, commands on stdin: output, exit codes, first-error stop,
`--yes`, logins, and plain output (no colour or cursor codes) when not on a terminal."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from shell_helpers import shell_env, write_password

from cs2sim.csshell.main import main
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store

QUICKSTART = (
    "system standby --yes; config execmode setup weight-streaming; system activate; "
    "config execmode show"
)


def cs(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def state(home: Path) -> tuple[State, ExecMode, ExecMode]:
    with Store.open(home) as store:
        s = Machine(store).status()
    return s.state, s.configured_mode, s.active_mode


def test_c_runs_the_seed_change(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cs(capsys, "-c", QUICKSTART)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[2].startswith(
        "cs2-1 will boot into Weight Streaming mode (now Pipelined), as configured by "
    )  # who set it, then the Quickstart's line
    del lines[2]
    assert lines == [
        "System cs2-1 is in STANDBY.",
        "Selected execution mode configuration: ✔ Weight Streaming",
        "System activated in Weight Streaming mode.",
        "Configured Execution Mode : WEIGHT_STREAMING",
    ]
    assert state(home) == (State.ACTIVE, ExecMode.WEIGHT_STREAMING, ExecMode.WEIGHT_STREAMING)


def test_command_as_words_like_ssh_cs(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ssh root@system cs config execmode show --output-format=json` (the firmware-swap script of
    docs/sources.md)."""
    code, out, _ = cs(capsys, "config", "execmode", "show", "--output-format=json")
    assert code == 0 and '"execmode": "PIPELINED"' in out


def test_f_file_with_comments_and_blank_lines(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "change.cs"
    script.write_text(
        "# switch to weight streaming\n\nsystem standby --yes\n"
        "  # indented comment\nconfig execmode setup ws\n"
    )
    code, out, err = cs(capsys, "-f", str(script))
    assert (code, err) == (0, "")
    assert state(home)[:2] == (State.STANDBY, ExecMode.WEIGHT_STREAMING)


def test_f_file_error_names_the_file_and_line(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "change.cs"
    script.write_text("# comment\n\nconfig execmode show\nconfig execmode setup ws\nsystem show\n")
    code, out, err = cs(capsys, "-f", str(script))
    assert code == 1  # setup refused while ACTIVE; the later line never ran
    assert err == (
        f"error: {script} line 4: Execution mode can only be changed in STANDBY; "
        "run `system standby` first.\n"
    )
    assert "System" not in out


def test_stdin_commands(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("config execmode show\n# note\nsystem show\n"))
    code, out, _ = cs(capsys)
    assert code == 0
    assert out.startswith("Configured Execution Mode : PIPELINED\nSystem ")


def test_stops_at_first_error_with_its_exit_code(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cs(
        capsys, "-c", "config execmode show; config execmode setup ws; system standby --yes"
    )
    assert code == 1  # InvalidTransition
    assert out == "Configured Execution Mode : PIPELINED\n"
    assert err == (
        "error: command 2 of 3 (`config execmode setup ws`): Execution mode can only be "
        "changed in STANDBY; run `system standby` first.\n"
    )
    assert state(home)[0] is State.ACTIVE  # the third command never ran


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (["-c", "sytem show"], 2, "did you mean `system`?"),
        (["-c", "system standby"], 2, "add --yes"),
        (["--system", "cs9", "-c", "system show"], 2, "Unknown system 'cs9'; known systems: cs2-1"),
        (["--bogus"], 2, "unrecognized arguments"),
        (["-c", "x", "-f", "y"], 2, "give commands one way"),
        (["-f", "/nonexistent/file"], 2, "cannot read command file /nonexistent/file"),
        (["--password-file", "/x", "-c", "system show"], 2, "needs --user NAME"),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, fragment: str
) -> None:
    got, out, err = cs(capsys, *argv)
    assert got == code
    assert err.startswith("error: ") and err.count("\n") == 1 and fragment in err
    assert "Traceback" not in err + out


def test_global_yes_answers_confirmations(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = cs(capsys, "--yes", "-c", "system standby")
    assert code == 0 and state(home)[0] is State.STANDBY


def test_exit_stops_a_script_successfully(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cs(capsys, "-c", "exit; system standby --yes")
    assert code == 0 and state(home)[0] is State.ACTIVE


def test_user_login_with_password_file(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pw = write_password(tmp_path / "alice.pw", "wonderland")
    assert cs(capsys, "-c", f"user add alice --role user --password-file {pw}")[0] == 0
    code, out, err = cs(
        capsys,
        "--user",
        "alice",
        "--password-file",
        str(pw),
        "-c",
        "user list; system standby --yes",
    )
    assert code == 77
    assert "You are alice (user, password)." in out
    assert err.startswith(
        "error: command 2 of 2 (`system standby --yes`): Permission denied: `system standby` "
        "needs the admin role"
    )
    bad = write_password(tmp_path / "bad.pw", "guess")
    code, _, err = cs(capsys, "--user", "alice", "--password-file", str(bad), "-c", "system show")
    assert code == 77 and "Login failed for alice" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cs(capsys, "--version")
    assert code == 0 and out.startswith("cs (cs2sim) ")


def test_traceback_flag_shows_the_traceback(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Machine) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(Machine, "software", broken)
    code, _, err = cs(capsys, "-c", "software show")
    assert code == 70 and "Traceback" not in err
    assert (
        err == "error: internal error: RuntimeError: boom; rerun with --traceback and report it.\n"
    )
    code, _, err = cs(capsys, "--traceback", "-c", "software show")
    assert code == 70 and "Traceback (most recent call last)" in err


def test_real_process_piped_output_is_plain(home: Path) -> None:
    """A real `cs` with pipes: exit code, and no escape codes even with TERM set."""
    env = dict(shell_env(home, boot_seconds=0.3), TERM="xterm-256color")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cs2sim.csshell",
            "-c",
            "help; system standby --yes; system activate; system show; audit show; user list; "
            "config execmode show --output-format=json; sytem",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "\x1b" not in proc.stdout + proc.stderr
    assert "System activated in Pipelined mode." in proc.stdout
    assert proc.stderr.endswith("(`sytem`): there is no command `sytem`; did you mean `system`?\n")
    assert proc.stderr.startswith("error: command ")  # which `;` part failed


def test_real_process_quits_quietly_when_its_reader_goes(home: Path) -> None:
    """`cs ... | head -1`: no internal error, exit status 141 as for any SIGPIPE'd command."""
    proc = subprocess.Popen(
        # > a pipe buffer
        [sys.executable, "-m", "cs2sim.csshell", "-c", "; ".join(["help"] * 200)],
        env=shell_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().startswith("Commands")
    proc.stdout.close()  # the reader leaves, as `head -1` does
    _, errors = proc.communicate(timeout=60)
    assert (proc.returncode, errors) == (141, "")


def test_ctrl_d_at_the_password_prompt_is_one_sentence(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import getpass

    def eof(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr(getpass, "getpass", eof)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    code, _, err = cs(capsys, "--user", "alice", "-c", "system show")
    assert code == 77
    assert err.startswith("error: Login cancelled: no password was given for alice;")
