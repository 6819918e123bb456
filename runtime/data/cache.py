"""Where built data (the digits arrays, the stdlib corpus) is cached, how it is published, and
how it is checked before use.

The cache directory is `$CS2_HOME/data`, or `<tempdir>/cs2sim-data-<uid>` when CS2_HOME is not
set (or when `$CS2_HOME/data` belongs to someone else: a member of a shared store). Either way it
must be this user's private directory (system/paths.py: created exclusively, then checked for
owner and mode; another user's is refused in one sentence), so no one else can plant an entry.

Every entry is a directory built under a temporary name and renamed into place in one step, so a
reader sees a complete entry or none, and two processes building the same entry at once both
succeed (the second rename loses and its copy is removed). Its COMPLETE file, written last, is a
manifest: the SHA-256 of every file in the entry. A reader checks each file against it before
handing the entry out; an entry that does not match (edited, truncated, a file swapped for a
symlink) is removed and built again, so a cache whose labels were shifted is never trained on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from cs2sim.runtime.artifacts.atomic import open_regular
from cs2sim.system import knobs
from cs2sim.system.paths import UnsafeDirectory, private_dir, user_tmp_dir

__all__ = ["data_cache_dir", "cached_entry", "verify_entry"]

log = logging.getLogger("cs2sim.run")

COMPLETE = "COMPLETE"  # written last inside an entry: the manifest of its files' hashes
MAX_MANIFEST = 1 << 20  # bytes; ours list a handful of files
_CHUNK = 1 << 20


def data_cache_dir() -> Path:
    """This user's private cache directory: $CS2_HOME/data, or one under the system temp dir."""
    home = knobs.text("CS2_HOME")
    if home:
        try:
            Path(home).expanduser().mkdir(parents=True, exist_ok=True, mode=0o700)
            return private_dir(Path(home).expanduser(), "data")
        except UnsafeDirectory:
            pass  # a shared store's: its owner's cache; ours goes to the temp dir
        except OSError:
            pass  # a home we may not write (a member of a shared store)
    return user_tmp_dir("cs2sim-data")


def _digest(path: Path) -> str | None:
    """SHA-256 of a regular file (opened without following a symlink), None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return None
        h = hashlib.sha256()
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _manifest(entry: Path) -> dict[str, str]:
    return {p.name: _digest(p) or "" for p in sorted(entry.iterdir()) if p.name != COMPLETE}


def verify_entry(entry: Path) -> str | None:
    """Why `entry` may not be used (one phrase), or None when every file matches its manifest."""
    try:
        st = os.lstat(entry)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
            return "it is not a directory of yours"
        with open_regular(entry / COMPLETE, follow=False) as f:  # a FIFO: refused, no wait
            if os.fstat(f.fileno()).st_size > MAX_MANIFEST:
                return "its manifest is too large"
            want = json.loads(f.read(MAX_MANIFEST + 1))
    except FileNotFoundError:
        return "it is incomplete"
    except (OSError, ValueError, RecursionError):
        return "its manifest is unreadable"
    if not isinstance(want, dict) or not want.get("files"):
        return "it has no manifest (an older version's)"
    if want["files"] != _manifest(entry):
        return "its files do not match their recorded SHA-256"
    return None


def cached_entry(name: str, build: Callable[[Path], None], root: Path | None = None) -> Path:
    """The directory `root/name`, built by `build(tmpdir)` on first use and published atomically;
    an entry that fails verify_entry is rebuilt."""
    if root is None:
        root = data_cache_dir()
    else:
        Path(root).parent.mkdir(parents=True, exist_ok=True)
        root = private_dir(Path(root).parent, Path(root).name)
    final = root / name
    why = verify_entry(final)
    if why is None:
        return final
    if why != "it is incomplete":
        log.warning(f"The cached data {final} was not used: {why}; it is built again.")
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        build(tmp)
        doc = {"name": name, "files": _manifest(tmp)}
        (tmp / COMPLETE).write_text(json.dumps(doc, indent=1) + "\n")
        if os.path.lexists(final) and verify_entry(final) is not None:
            _remove(final)  # a leftover (crash, older version) or an entry that failed its check
        try:
            os.replace(tmp, final)
        except OSError:
            if verify_entry(final) is not None:  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _remove(path: Path) -> None:
    """Remove a file, a symlink (not what it points to) or a directory tree."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
