"""Crash-safe file writes: write a hidden temp file in the same directory, fsync, rename.

A reader never sees a half-written file under the final name (os.replace is atomic on POSIX),
and a crash leaves at most a hidden `.<name>.<pid>.tmp` that no reader matches;
`remove_stale_temps` deletes those of writers that are no longer running (a checkpoint's temp
file is as big as the checkpoint, and every kill -9 mid-write would leave one more).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_writer", "atomic_write", "remove_stale_temps"]

_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp$")


@contextmanager
def atomic_writer(path: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary temp file next to `path`; on success it replaces `path` (file mode `mode`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike[str], data: bytes | str, mode: int = 0o644) -> None:
    """Write `data` (text is UTF-8 encoded) to `path` atomically."""
    with atomic_writer(path, mode) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


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
        if m and name_re.match(m["name"]) and int(m["pid"]) != os.getpid() \
                and not _running(int(m["pid"])):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed
