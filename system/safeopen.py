"""Opening a file that someone else may have placed: a regular file of the expected owner, or
a refusal in one sentence; never a FIFO (whose open would wait for a writer forever), a device,
or a symlink to one.

The open itself cannot wait or follow: O_NOFOLLOW refuses a symlink at the last component,
O_NONBLOCK makes opening a FIFO return at once, and O_CLOEXEC keeps the descriptor from any
child. Only then is the descriptor itself examined (fstat: no race with a rename of the name),
and only a regular file owned by one of the expected users is read (open(2), "O_NONBLOCK" and
"O_NOFOLLOW": https://man7.org/linux/man-pages/man2/open.2.html).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from cs2sim.system.paths import UnsafePath

__all__ = ["open_regular", "kind"]


def kind(mode: int) -> str:
    """What a file of `mode` is, in words."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(
    path: str | os.PathLike[str], owners: Iterable[int] | None = None, hint: str = ""
) -> BinaryIO:
    """`path` opened for reading (binary), if it is a regular file owned by one of `owners`
    (default: this user) and writable by no other user; UnsafePath (one sentence, ending with
    `hint`) otherwise. FileNotFoundError if it does not exist."""
    path = Path(path)
    allowed = {os.getuid()} if owners is None else set(owners)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise UnsafePath(
            f"{path} cannot be opened safely ({e.strerror or e}: a symlink, or not yours)"
            f"{'; ' + hint if hint else ''}."
        ) from None
    try:
        st = os.fstat(fd)
        what = None
        if not stat.S_ISREG(st.st_mode):
            what = kind(st.st_mode)
        elif st.st_uid not in allowed:
            whose = " or ".join(f"uid {u}" for u in sorted(allowed))
            what = f"owned by uid {st.st_uid}, not by {whose}"
        elif st.st_mode & 0o002:
            what = f"writable by every user (mode {stat.S_IMODE(st.st_mode):04o})"
        if what is not None:
            raise UnsafePath(f"{path} is {what}, so it was not read{'; ' + hint if hint else ''}.")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
