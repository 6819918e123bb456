"""Directories cs2sim creates: shared ones under $CS2_HOME, and private ones anywhere, including
shared places such as /tmp where another user may have created the name first.

Shared (`shared_dir`): directories under $CS2_HOME that every user of the store writes in
(wake-ups, histories). Each is created with the store directory's sharing: private (0700) when
$CS2_HOME is, and group/other-accessible like it when it is shared, with the sticky bit then, so
no user can remove another's file. What goes inside stays private to its owner (its own modes).

Private (`private_dir`, `user_tmp_dir`): the one helper for a directory that must be this user's
alone. It is created with mkdir's exclusive semantics (mkdir fails on any existing name, a
symlink included, so nothing is followed), then checked with lstat before use: a real
directory, owned by this user, writable by no one else. A name that fails is refused with one
sentence (UnsafeDirectory); it is never used, chmod'ed or followed, because another user who
created it first could have planted symlinks or files in it (the classic /tmp race, see
"Secure Programming for Linux and Unix HOWTO", section "Avoid Race Conditions"). An own
directory that others may only read and enter is tightened to 0700 (they could not have put
anything in it).

A per-user directory in a shared place (`user_tmp_dir`: `/tmp/cs2sim-<uid>`) fails safe: when
the name is taken by another user (who can create it first, and in a sticky /tmp only they or
root can remove it), the run uses the first of the user's own places that is free
(`user_tmp_places`: `~/.cache/cs2sim/run/<prefix>`, then `<temp dir>/<prefix>-<uid>.1` ... `.8`)
and says so in one warning line (`DirectoryMoved`), instead of stopping. Readers of such a
directory (`jobs log`) look in the same places, in the same order, and use only the ones that
pass the same check.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from cs2sim.system.errors import CsError, CsWarning

__all__ = [
    "shared_dir",
    "private_dir",
    "user_tmp_dir",
    "user_tmp_places",
    "user_tmp_dirs",
    "DirectoryMoved",
    "check_private",
    "UnsafePath",
    "UnsafeDirectory",
]


class UnsafePath(CsError, PermissionError):
    """A path cs2sim would write through is not the user's own (a symlink, another user's
    directory, a FIFO where a file belongs); an OSError too, for callers that treat any
    file-system failure alike; exit code 77, like other permission refusals."""

    exit_code = 77

    def __init__(self, message: str) -> None:
        PermissionError.__init__(self, errno.EACCES, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UnsafeDirectory(UnsafePath):
    """A directory that must be this user's alone is not."""


def shared_dir(home: Path, name: str) -> Path:
    """`home/name`, created (once) with home's sharing; OSError if it cannot be."""
    path = Path(home) / name
    if not path.is_dir():
        home_st = Path(home).stat()
        shared = stat.S_IMODE(home_st.st_mode) & 0o077
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            if shared & 0o070:  # in home's group, not the creator's (`cs-store share GROUP`)
                with contextlib.suppress(PermissionError):
                    os.chown(path, -1, home_st.st_gid)
            os.chmod(path, 0o700 | shared | (stat.S_ISVTX if shared & 0o022 else 0))
    return path


def check_private(
    path: Path, hint: str = "remove it, or set CS2_HOME to a directory of your own"
) -> None:
    """UnsafeDirectory unless `path` is a real directory of this user that no one else may write
    (not followed if a symlink); one that others may only read is tightened to 0700."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        what = "a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        what = "not a directory"
    elif st.st_uid != os.getuid():
        what = f"owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    elif st.st_mode & 0o022:
        what = f"writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    else:
        if st.st_mode & 0o077:
            os.chmod(path, 0o700)  # ours, and no one else could write in it
        return
    raise UnsafeDirectory(
        f"{path} is {what}, so another user could read or replace what cs2sim keeps there; {hint}."
    )


def private_dir(parent: Path, name: str, hint: str | None = None) -> Path:
    """`parent/name`, created 0700 if missing (exclusively: an existing name is never followed)
    and checked to be this user's alone; UnsafeDirectory if it is not, OSError if it cannot be
    made."""
    path = Path(parent) / name
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    if hint is None:
        check_private(path)
    else:
        check_private(path, hint)
    return path


class DirectoryMoved(CsWarning):
    """This user's directory in a shared place was taken by another user: another is used."""


FALLBACKS = 8  # numbered names tried in the temp dir after the home's cache
_said: set[str] = set()  # the moves this process has already said (once each)


def user_tmp_places(prefix: str) -> list[tuple[Path, ...]]:
    """Where this user's `prefix` directory may be, in the order tried: each as the chain of
    directories to create below an existing parent (every one checked to be this user's)."""
    tmp = Path(tempfile.gettempdir())
    uid = os.getuid()
    places: list[tuple[Path, ...]] = [(tmp / f"{prefix}-{uid}",)]
    try:
        cache = Path.home() / ".cache"
        places.append(
            (cache / "cs2sim", cache / "cs2sim" / "run", cache / "cs2sim" / "run" / prefix)
        )
    except (KeyError, RuntimeError):
        pass  # no home directory to speak of
    places += [(tmp / f"{prefix}-{uid}.{k}",) for k in range(1, FALLBACKS + 1)]
    return places


def _make(chain: tuple[Path, ...]) -> Path:
    if chain[0].parent.name == ".cache":
        chain[0].parent.mkdir(mode=0o700, exist_ok=True)  # ~/.cache, in the user's own home
    for d in chain:
        private_dir(d.parent, d.name)
    return chain[-1]


def user_tmp_dir(prefix: str) -> Path:
    """This user's private directory in a shared place: `<system temp dir>/<prefix>-<uid>`
    (the name is predictable, so it is checked like any private_dir before use), or, when
    another user holds that name, the first own place of `user_tmp_places` (said once, in one
    warning line). UnsafeDirectory only if every place is taken."""
    import warnings

    first: UnsafeDirectory | None = None
    for chain in user_tmp_places(prefix):
        try:
            path = _make(chain)
        except UnsafeDirectory as e:
            first = first or e
            continue
        except OSError:
            continue  # a home we cannot write: the next place
        if first is not None and str(path) not in _said:
            _said.add(str(path))
            warnings.warn(
                DirectoryMoved(
                    f"{user_tmp_places(prefix)[0][0]} is not yours alone (another user created "
                    f"it, or may write in it), so cs2sim uses {path} instead; ask an admin to "
                    "remove it to go back"
                ),
                stacklevel=2,
            )
        return path
    raise first or UnsafeDirectory(
        f"no private directory for {prefix} could be made in {tempfile.gettempdir()} or your "
        "home; set TMPDIR to a directory of your own"
    )


def user_tmp_dirs(prefix: str) -> list[Path]:
    """The places of `user_tmp_places` that exist now and are this user's own (checked, never
    created): where a reader looks for what a run kept there."""
    found = []
    for chain in user_tmp_places(prefix):
        try:
            for d in chain:
                check_private(d)
        except OSError:
            continue
        found.append(chain[-1])
    return found
