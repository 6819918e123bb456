"""Directories under $CS2_HOME that every user of the store writes in (wake-ups, histories).

Each is created with the store directory's sharing: private (0700) when $CS2_HOME is, and
group/other-accessible like it when it is shared, with the sticky bit then, so no user can
remove another's file. What goes inside stays private to its owner (its own modes).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = ["shared_dir", "private_dir"]


def shared_dir(home: Path, name: str) -> Path:
    """`home/name`, created (once) with home's sharing; OSError if it cannot be."""
    path = Path(home) / name
    if not path.is_dir():
        shared = stat.S_IMODE(Path(home).stat().st_mode) & 0o077
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            os.chmod(path, 0o700 | shared | (stat.S_ISVTX if shared & 0o022 else 0))
    return path


def private_dir(parent: Path, name: str) -> Path:
    """`parent/name`, created 0700 (its owner's alone); OSError if it cannot be."""
    path = Path(parent) / name
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    return path
