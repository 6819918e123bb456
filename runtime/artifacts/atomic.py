"""Files a run writes and reads in its model_dir, written crash-safe and never turned elsewhere.

Writes (`atomic_writer`, `atomic_write`): a hidden temp file in the same directory, fsync,
rename. A reader never sees a half-written file under the final name (a rename is atomic on
POSIX), and a crash leaves at most a hidden `.<name>.<pid>.tmp` that no reader matches;
`remove_stale_temps` deletes those of writers that are no longer running (a checkpoint's temp
file is as big as the checkpoint, and every kill -9 mid-write would leave one more).

A model_dir may hold files someone else planted (a copied or shared directory), so no write
follows a name there (openat(2) and open(2)'s O_NOFOLLOW / O_EXCL):

* the directories below `within` (model_dir: `performance/`, `train/`, `eval/`) are opened one
  component at a time relative to the previous directory's descriptor, with O_NOFOLLOW: a
  symlink or a non-directory there is refused with one sentence (UnsafePath);
* the temp file is created with O_CREAT | O_EXCL | O_NOFOLLOW relative to that descriptor: a
  name planted at the temp name (a symlink to another file of the user's) is removed as a name,
  never opened, and the temp file is always a new file of this run's;
* the mode is set on that new file's descriptor, so the run never changes the mode of a file it
  did not create; the rename replaces the final name's directory entry (a symlink, a FIFO)
  without opening what it names.

Reads (`open_regular`): non-blocking open, then fstat: anything but a regular file (a FIFO, a
device such as /dev/zero) is refused with one sentence (NotRegularFile, an OSError, so every
reader's fallback applies: the previous checkpoint, a directory scan, a recompile) instead of
hanging the run or reading forever.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from cs2sim.system.paths import UnsafePath

__all__ = [
    "atomic_writer",
    "atomic_write",
    "remove_stale_temps",
    "open_regular",
    "open_dir",
    "ensure_dir",
    "open_append",
    "NotRegularFile",
    "UnsafePath",
]

_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegularFile(OSError):
    """A file the run reads is a FIFO, a device or a directory (the text says which)."""

    def __str__(self) -> str:
        return str(self.strerror)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """`path` opened for binary reading, once fstat shows a regular file; NotRegularFile (an
    OSError) for a FIFO or a device, without blocking on it. `follow=False`: a symlink is
    refused too (ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(
                0,
                f"{path} is {_kind(st.st_mode)}, not a regular file; "
                "remove it, or point the run at a real file",
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_dir(
    path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None, create: bool = True
) -> int:
    """A descriptor of directory `path` (the caller closes it). Below `within`, each component
    is made if missing (`create`) and opened without following a symlink; UnsafePath when one is
    a symlink or not a directory. `within` itself (the user's model_dir) is opened as named."""
    path = Path(path)
    parts: tuple[str, ...] = ()
    if within is not None:
        with contextlib.suppress(ValueError):
            parts = path.relative_to(within).parts
            path = Path(within)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, _DIR_FLAGS)
    for i, part in enumerate(parts):
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=fd)
            nfd = os.open(part, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOTDIR, errno.ELOOP):  # a planted file or symlink
                where = path.joinpath(*parts[: i + 1])
                raise UnsafePath(
                    f"{where} is a symlink or not a directory, so the run would "
                    "write outside its model directory; remove it, or use another "
                    "model_dir."
                ) from None
            raise
        os.close(fd)
        fd = nfd
    return fd


def ensure_dir(path: str | os.PathLike[str], within: str | os.PathLike[str] | None) -> Path:
    """Make directory `path` (and its parents below `within`) without following a symlink below
    `within` (see open_dir); returns it."""
    os.close(open_dir(path, within))
    return Path(path)


@contextmanager
def atomic_writer(
    path: str | os.PathLike[str], mode: int = 0o644, within: str | os.PathLike[str] | None = None
) -> Iterator[BinaryIO]:
    """A binary temp file next to `path`; on success it replaces `path` (file mode `mode`).
    `within`: the directory (model_dir) below which no name is followed (see the module doc)."""
    path = Path(path)
    dfd = open_dir(path.parent, within)
    name, tmp = path.name, f".{path.name}.{os.getpid()}.tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                raise UnsafePath(
                    f"{path} is a directory, where the run writes a file; remove "
                    "it, or use another model_dir."
                )
        try:
            fd = os.open(tmp, _NEW_FLAGS, 0o600, dir_fd=dfd)
        except FileExistsError:  # a leftover, or a name planted there: remove the name only
            os.unlink(tmp, dir_fd=dfd)
            fd = os.open(tmp, _NEW_FLAGS, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fchmod(f.fileno(), mode)  # our new file's mode, never another file's
                os.fsync(f.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def atomic_write(
    path: str | os.PathLike[str],
    data: bytes | str,
    mode: int = 0o644,
    within: str | os.PathLike[str] | None = None,
) -> None:
    """Write `data` (text is UTF-8 encoded) to `path` atomically (see atomic_writer)."""
    with atomic_writer(path, mode, within) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def open_append(
    path: str | os.PathLike[str], within: str | os.PathLike[str] | None = None, mode: int = 0o644
) -> int:
    """A descriptor appending to the regular file `path` (created if missing), opened without
    following a symlink, below `within` as open_dir; UnsafePath for anything but a regular file
    of this user's (a FIFO is never waited on)."""
    path = Path(path)
    dfd = open_dir(path.parent, within)
    try:
        flags = (
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        )
        try:
            fd = os.open(path.name, flags, mode, dir_fd=dfd)
        except OSError as e:
            if e.errno in (errno.ENXIO, errno.ELOOP):  # a FIFO nobody reads, a symlink
                raise UnsafePath(
                    f"{path} is a symlink or a FIFO, not a file of this run; "
                    "remove it, or use another model_dir."
                ) from None
            if e.errno in (errno.EACCES, errno.EPERM):  # another user's FIFO or file there
                try:
                    st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
                except OSError:
                    raise e from None
                what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else "a file"
                raise UnsafePath(
                    f"{path} is {what} of uid {st.st_uid}, not a file of this run; "
                    "remove it, or use another model_dir."
                ) from None
            raise
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
        os.close(fd)
        what = _kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else "another user's file"
        raise UnsafePath(
            f"{path} is {what}, not a file of this run; remove it, or use another model_dir."
        )
    os.set_blocking(fd, True)
    return fd


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_temps(directory: str | os.PathLike[str], name_re: re.Pattern[str]) -> list[Path]:
    """Delete the temp files left in `directory` by dead writers of files matching `name_re`."""
    removed = []
    for p in Path(directory).iterdir():
        m = _TEMP_RE.match(p.name)
        if (
            m
            and name_re.match(m["name"])
            and int(m["pid"]) != os.getpid()
            and not _running(int(m["pid"]))
        ):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
