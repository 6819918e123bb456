"""Bounded JSON reading for files a run trusts: the checkpoint index, a checkpoint's metadata,
a compile directory's plan.json.

Such a file may be damaged or written by someone else, so it is read with limits checked BEFORE
parsing: at most `max_bytes` bytes and at most `max_depth` levels of nesting (json and the
decoders that walk the result recurse once per level; 100,000 nested `[` would otherwise be a
RecursionError, i.e. an internal error instead of a fallback). Every violation is a ValueError
with one phrase, which the callers turn into their usual fallback (a previous checkpoint, a
directory scan, a recompile).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["MAX_BYTES", "MAX_DEPTH", "loads", "read"]

MAX_BYTES = 64 * 1024 * 1024  # far above any index, metadata or plan we write
MAX_DEPTH = 100  # ours nest at most ~20 levels
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # strings (skipped whole) and brackets


def _depth(text: str, limit: int) -> None:
    depth = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                raise ValueError(f"it nests deeper than {limit} levels")
        elif c in "]}":
            depth -= 1


def loads(text: str | bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with the size and depth limits; ValueError when a limit or the syntax fails."""
    if len(text) > max_bytes:
        raise ValueError(f"it is larger than {max_bytes:,} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("it is not UTF-8 text") from None
    _depth(text, max_depth)
    try:
        return json.loads(text)
    except RecursionError:  # defensive: the depth check above comes first
        raise ValueError(f"it nests deeper than {max_depth} levels") from None


def read(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> Any:
    """A JSON file, bounded (its size is checked before it is read); OSError if unreadable."""
    from cs2sim.runtime.artifacts.atomic import open_regular

    path = Path(path)
    with open_regular(path) as f:  # a FIFO or a device: NotRegularFile (an OSError), no hang
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise ValueError(f"it is larger than {max_bytes:,} bytes")
        data = f.read(max_bytes + 1)
    return loads(data, max_bytes=max_bytes, max_depth=max_depth)
