"""Password files are bounded before they are read: /dev/zero, a FIFO and an oversized file are
refused at once in one sentence (exit 2), at the login (`cs --user NAME --password-file FILE`,
which anyone can run) and in `user add`, never read until memory runs out or waited on."""

from __future__ import annotations

import os

import pytest
from shell_helpers import err, make_context, write_password

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.login import MAX_PASSWORD_FILE, read_password_file
from cs2sim.csshell.main import main
from cs2sim.system.errors import UsageError


def _fifo(tmp_path):
    path = tmp_path / "pw-fifo"
    os.mkfifo(path, 0o600)
    return path


def test_dev_zero_a_fifo_and_a_huge_file_are_refused(tmp_path) -> None:
    with pytest.raises(UsageError, match="/dev/zero is not a regular file"):
        read_password_file("/dev/zero")
    with pytest.raises(UsageError, match="pw-fifo is not a regular file"):
        read_password_file(_fifo(tmp_path))  # no writer: a blocking open would wait forever
    big = write_password(tmp_path / "big", "x" * (MAX_PASSWORD_FILE + 1))
    with pytest.raises(UsageError, match=f"is {MAX_PASSWORD_FILE + 2:,} bytes"):
        read_password_file(big)
    assert read_password_file(write_password(tmp_path / "ok", "s3cret")) == "s3cret"


@pytest.mark.parametrize("which", ["/dev/zero", "fifo"])
def test_the_login_form_refuses_them_in_one_sentence(home, tmp_path, capsys, which) -> None:
    path = "/dev/zero" if which == "/dev/zero" else str(_fifo(tmp_path))
    assert main(["--user", "root", "--password-file", path, "system", "show"]) == 2
    text = capsys.readouterr().err.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1
    assert "is not a regular file" in text and "MemoryError" not in text


def test_user_add_refuses_dev_zero(store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "user add bob --password-file /dev/zero") == 2
    assert "is not a regular file" in err(ctx)
