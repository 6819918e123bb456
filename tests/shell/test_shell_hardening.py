"""History as private as the store; no guessed flags for secrets or
paths, on the `cs` command line and in the console."""

from __future__ import annotations

import os
import stat

import pytest
from shell_helpers import err, make_context, write_password

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.main import main
from cs2sim.csshell.repl import ForgivingFileHistory, history_problem


def test_history_file_is_0600(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(os, "umask", os.umask)  # (the process umask is whatever the user has)
    old = os.umask(0o022)
    try:
        path = tmp_path / "history"
        assert history_problem(path) is None  # the interactive shell's first touch creates it
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        path.chmod(0o644)  # left readable by an older cs2sim
        ForgivingFileHistory(str(path)).store_string("user add bob --password-file /tmp/pw")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        fresh = tmp_path / "fresh"
        ForgivingFileHistory(str(fresh)).store_string("system show")
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_cs_password_is_not_password_file(home, tmp_path, capsys) -> None:
    pw = write_password(tmp_path / "pw", "s3cret")
    assert main(["--user", "root", "--password", str(pw), "system", "show"]) == 2
    assert "unrecognized arguments: --password" in capsys.readouterr().err
    assert main(["--sys", "cs2-1", "system", "show"]) == 2  # no abbreviations at all
    assert main(["--password-fil", str(pw), "system", "show"]) == 2


@pytest.mark.parametrize("command", ["user add bob", "user passwd"])
def test_console_password_option_is_never_guessed(store, tmp_path, command) -> None:
    pw = write_password(tmp_path / "pw", "s3cret")
    ctx = make_context(store)
    assert run_line(ctx, f"{command} --password {pw}") == 2
    assert "has no option `--password`; did you mean `--password-file`?" in err(ctx)
    assert run_line(ctx, f"{command} --password-file {pw}") == 0  # the full name works
    assert run_line(ctx, "config execmode show --out json") == 0  # other options still shorten
