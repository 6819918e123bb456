"""The compile directory `model_dir/cs_<sha256>/`: its checksum, reuse and atomic creation.

The checksum covers exactly what forces a recompile: the graph (ops, shapes, parameters, the
optimizer type), dtypes, batch size, execution mode, number of CS-X (weight streaming),
runconfig.multireplica, the input cluster when one is known (workers, measured rate), target
system and the compiler's version. Learning rate, max_steps, logging and checkpoint settings are
not in it, so changing them reuses the compile.

A compile is built in `model_dir/.cs_<sum>.tmp-<pid>` and renamed into place only when complete
(its last file is COMPLETE, naming the stage it reached). A killed compile leaves only a .tmp
directory, which is never reused and is removed by the next compile of the same checksum.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.atomic import open_regular

__all__ = [
    "checksum",
    "COMPLETE",
    "complete_stage",
    "staging_dir",
    "publish",
    "discard",
    "COMPILER_VERSION",
]

COMPILER_VERSION = "cs2sim-compiler-3"  # 3: the pipelined per-PE model, steps in the plan
COMPLETE = "COMPLETE"


def checksum(doc: dict[str, Any]) -> str:
    """SHA-256 (64 hex digits) of the canonical JSON of `doc`."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def complete_stage(directory: Path) -> str | None:
    """ "validate" | "compile" for a complete compile directory, else None (also for a symlink:
    model_dir's managed entries are ours, never followed)."""
    directory = Path(directory)
    if directory.is_symlink() or not directory.is_dir():
        return None
    try:
        with open_regular(directory / COMPLETE) as f:  # a FIFO there: refused, not waited on
            stage = f.read(64).decode("ascii", "replace").strip()
    except OSError:
        return None
    return stage if stage in ("validate", "compile") else None


def _remove(path: Path) -> None:
    """Remove a managed entry: a symlink is unlinked (never followed), a directory deleted."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def discard(final: Path) -> None:
    """Take a damaged compile directory (or a symlink in its place) out of the way."""
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    _remove(old)
    try:
        os.replace(final, old)
    except OSError:
        return
    _remove(old)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def staging_dir(model_dir: Path, name: str) -> Path:
    """A fresh temp directory for `name`; stale ones of dead compiles are removed first."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.glob(f".{name}.tmp-*"):
        try:
            pid = int(old.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if not _alive(pid):
            shutil.rmtree(old, ignore_errors=True)
    tmp = model_dir / f".{name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def publish(tmp: Path, final: Path, stage: str) -> None:
    """Mark `tmp` complete and rename it to `final` (replacing a lesser compile there).

    Two compiles of the same checksum may finish together (two run.py started at once): the
    rename is atomic, so one wins and the other, finding an equal or better complete directory
    in place, discards its own copy.
    """
    (tmp / COMPLETE).write_text(stage + "\n")
    rank = {"validate": 1, "compile": 2}
    for _ in range(3):
        done = complete_stage(final)
        if done is not None and rank.get(done, 0) >= rank[stage]:
            shutil.rmtree(tmp, ignore_errors=True)  # someone else already published it
            return
        try:
            if final.exists() or final.is_symlink():
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                _remove(old)
                os.replace(final, old)
                os.replace(tmp, final)
                _remove(old)
            else:
                os.replace(tmp, final)
            return
        except OSError:
            continue  # lost a race with another compile: look again
    raise OSError(f"could not publish the compile directory {final}")
