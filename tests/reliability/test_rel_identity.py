"""Identity and store access as a SECOND OS user: the console run by another
user with a spoofed LOGNAME/USER, a store it may not open, a read-only CS2_HOME.

These need root (to become the other user with setuid, as `runuser` does); elsewhere they are
skipped with the reason. The child drops real, effective and saved uid before running cs.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rel_helpers import other_user, run_as

from cs2sim.system.audit import entries
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store

OTHER = other_user()
pytestmark = pytest.mark.skipif(
    OTHER is None, reason="needs root and an unprivileged user (nobody) to run cs as another user"
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp_path is private to root)."""
    top = Path(tempfile.mkdtemp(prefix="cs2sim-rel-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def cs_as_other(home: Path, *argv: str, **env: str) -> tuple[int, str, str]:
    """`cs ARGV` (csshell.main.main, in a child that IS the other user); (code, out, err)."""
    assert OTHER is not None

    def run() -> tuple[int, str, str]:
        from cs2sim.csshell.main import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        return code, out.getvalue(), err.getvalue()

    base = {
        "CS2_HOME": str(home),
        "CS2_BOOT_SECONDS": "0",
        "HOME": "/nonexistent",
        "PATH": "/usr/bin",
    }
    return run_as(OTHER, run, {**base, **env})  # type: ignore[no-any-return]


@contextlib.contextmanager
def shared_with_other(home: Path) -> Iterator[None]:
    """A store an admin has shared with the other user's group, through its store service
    (group write on the files would be no boundary; docs/security.md)."""
    from cs2sim.system.store_service import PID_NAME, share

    assert OTHER is not None
    share(home, OTHER.pw_gid)
    try:
        yield
    finally:
        os.kill(int((home / PID_NAME).read_text()), 15)  # the service share() started


def test_spoofed_logname_does_not_make_another_user_an_admin(shared: Path) -> None:
    assert OTHER is not None
    home = shared / "store"
    with Store.open(home) as store:  # created by root: root is its admin
        Machine(store).status()
        admin_name = entries(store)[0].user if entries(store) else "root"
    spoof = {"LOGNAME": "root", "USER": "root", "LNAME": "root", "USERNAME": "root"}
    with shared_with_other(home):
        code, out, err = cs_as_other(home, "-c", "system standby --yes", **spoof)
    assert code == 77, (code, out, err)
    assert f"you are logged in as {OTHER.pw_name} (user)" in err
    with Store.open(home) as store:
        assert Machine(store).status().state is State.ACTIVE  # nothing changed
        last = entries(store)[-1]
    assert (last.user, last.command, last.outcome) == (OTHER.pw_name, "system standby", "denied")
    assert admin_name != OTHER.pw_name


def test_another_users_private_store_is_exit_77_not_1(shared: Path) -> None:
    home = shared / "private"
    with Store.open(home) as store:  # 0700 directory, 0600 file: root's own
        Machine(store).status()
    code, out, err = cs_as_other(home, "system", "show")
    assert code == 77, (code, err)
    assert err.startswith("error: permission denied: cannot open the system store in")
    assert "owned by root, mode 0700" in err and "move it aside" not in err


def test_read_only_home_says_the_write_failed(shared: Path) -> None:
    """A read-only CS2_HOME is a write that failed, not an unreadable store."""
    assert OTHER is not None
    home = shared / "ro"
    home.mkdir()
    os.chown(home, OTHER.pw_uid, OTHER.pw_gid)
    home.chmod(0o555)  # the user's own directory, read-only
    code, out, err = cs_as_other(home, "system", "show")
    assert code == 77, (code, err)
    assert "cannot create the system store" in err and "is read-only for you" in err
    assert "cannot read" not in err and "move it aside" not in err
    # an existing store they may read but not write: a change names the write
    home.chmod(0o755)
    with Store.open(home) as store:
        Machine(store).status()
    for p in [home, *home.iterdir()]:
        os.chown(p, OTHER.pw_uid, OTHER.pw_gid)
    (home / "cs2sim.db").chmod(0o400)
    code, out, err = cs_as_other(home, "-c", "system show; system standby --yes")
    assert "State" in out  # reading works
    assert code == 77, (code, err)
    assert "cannot write the system store" in err and "the file is read-only for you" in err
