"""`safeopen.open_regular`: a file someone else may have placed is read only if it is a regular
file of the expected owner that not every user may write; a FIFO, a device, a symlink or another
user's file is refused in one sentence at once (never waited on)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cs2sim.system.paths import UnsafePath
from cs2sim.system.safeopen import open_regular


def test_a_regular_file_of_this_user_is_read(tmp_path: Path) -> None:
    (tmp_path / "task-0.log").write_bytes(b"hello\n")
    with open_regular(tmp_path / "task-0.log") as f:
        assert f.read() == b"hello\n"
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing.log")


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "is a FIFO, so it was not read"),
        (lambda p: p.symlink_to("/etc/hostname"), "cannot be opened safely"),
        (lambda p: p.mkdir(), "is a directory, so it was not read"),
    ],
)
def test_what_is_not_a_regular_file_is_refused(tmp_path: Path, make, said: str) -> None:
    path = tmp_path / "task-0.log"
    make(path)
    with pytest.raises(UnsafePath, match=said) as e:
        open_regular(path, hint="remove it")
    assert e.value.exit_code == 77 and str(e.value).endswith("; remove it.")
    with pytest.raises(UnsafePath, match="is a character device"):
        open_regular("/dev/null")


def test_another_users_or_a_world_writable_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "task-0.log"
    path.write_text("planted\n")
    path.chmod(0o666)
    with pytest.raises(UnsafePath, match=r"writable by every user \(mode 0666\)"):
        open_regular(path)
    path.chmod(0o644)
    with pytest.raises(UnsafePath, match=f"owned by uid {os.getuid()}, not by uid 4242"):
        open_regular(path, [4242])
    if os.geteuid() == 0:
        os.chown(path, 4242, 4242)
        with pytest.raises(UnsafePath, match="owned by uid 4242, not by uid 0"):
            open_regular(path)
