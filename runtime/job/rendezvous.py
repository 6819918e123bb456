"""Where a job's tasks find their chief: `<model_dir>/.cs2sim/rendezvous/<job id>/`.

model_dir is on the file system every node shares (Cerebras' Performance Optimization Practices), so
the chief writes its address there (`chief.json`) and, when the launcher gave no secret, the job's
secret (`secret`). Both are
for the job's user only:

* the directories `.cs2sim`, `.cs2sim/rendezvous` and `<job id>` are created 0700 and must be real
  directories (not symlinks) owned by this user and writable by no one else
  (system/paths.py's private_dir); one that is not is refused with one sentence (someone else
  could read or replace what is in it);
* the files are written 0600 (temp name + rename) and read only when they are regular files
  owned by this user, at most MAX_FILE bytes;
* the chief removes its files and directory when the job ends; after a kill -9 the next reader
  does: a chief (or a task looking for its own chief) that finds a chief.json of this host whose
  process is gone removes that job's rendezvous directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import stat
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.system.jobs import process_alive, process_start
from cs2sim.system.paths import private_dir

__all__ = [
    "ADDR_FILE",
    "SECRET_FILE",
    "read_own",
    "job_dir",
    "make_job_dir",
    "write_address",
    "read_address",
    "write_secret",
    "read_secret",
    "remove_job_dir",
    "clean_stale",
    "this_host",
]

ADDR_FILE = "chief.json"
SECRET_FILE = "secret"
MAX_FILE = 16 * 1024  # a chief.json is ~200 bytes


def this_host() -> str:
    return socket.gethostname()


def job_dir(model_dir: Path, job_id: str) -> Path:
    """The job's rendezvous directory (not created)."""
    return Path(model_dir) / ".cs2sim" / "rendezvous" / str(job_id)


_HINT = "remove it, or use a model_dir of your own"


def make_job_dir(model_dir: Path, job_id: str) -> Path:
    """The job's rendezvous directory, created 0700 (and its parent) and checked to be this
    user's alone (system/paths.py: UnsafeDirectory, one sentence, otherwise)."""
    d = job_dir(model_dir, job_id)
    d.parent.parent.parent.mkdir(parents=True, exist_ok=True)  # model_dir
    private_dir(d.parent.parent.parent, d.parent.parent.name, _HINT)  # .cs2sim: never another's
    private_dir(d.parent.parent, d.parent.name, _HINT)
    private_dir(d.parent, d.name, _HINT)
    return d


def read_own(path: Path) -> bytes | None:
    """A regular file of this user, at most MAX_FILE bytes, not followed if a symlink."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > MAX_FILE:
            return None
        return os.read(fd, MAX_FILE + 1)[:MAX_FILE]
    finally:
        os.close(fd)


def write_address(d: Path, doc: dict[str, Any]) -> None:
    """chief.json, 0600, with this process's identity (pid, start tick, host) for liveness."""
    doc = {**doc, "pid": os.getpid(), "pid_start": process_start(os.getpid()), "host": this_host()}
    atomic_write(d / ADDR_FILE, json.dumps(doc) + "\n", mode=0o600)


def read_address(d: Path) -> dict[str, Any] | None:
    """The chief's address document, or None (missing, not ours, malformed)."""
    raw = read_own(d / ADDR_FILE)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def write_secret(d: Path, secret: bytes) -> None:
    atomic_write(d / SECRET_FILE, secret.hex() + "\n", mode=0o600)


def read_secret(d: Path) -> bytes | None:
    raw = read_own(d / SECRET_FILE)
    if raw is None:
        return None
    try:
        secret = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        return None
    return secret if len(secret) >= 16 else None


def remove_job_dir(d: Path) -> None:
    """Remove a job's rendezvous files and directory (best effort; never follows a symlink)."""
    for name in (ADDR_FILE, SECRET_FILE):
        with contextlib.suppress(OSError):
            (d / name).unlink()
    with contextlib.suppress(OSError):
        d.rmdir()


def chief_gone(doc: dict[str, Any]) -> bool:
    """True when the chief a chief.json names ran on this host and its process is gone."""
    if doc.get("host") != this_host():
        return False  # only that host can tell
    pid = doc.get("pid")
    start = doc.get("pid_start")
    if type(pid) is not int or pid <= 0:
        return True
    return not process_alive(pid, start if isinstance(start, str) else None)


def clean_stale(model_dir: Path, keep: str | None = None) -> list[str]:
    """Remove the rendezvous directories of this host's chiefs that were killed (kill -9 leaves
    them); the job ids removed. `keep`: a job id to leave alone (the caller's own)."""
    root = Path(model_dir) / ".cs2sim" / "rendezvous"
    removed: list[str] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if entry.name == keep or not entry.is_dir(follow_symlinks=False):
            continue
        d = Path(entry.path)
        doc = read_address(d)
        if doc is not None and chief_gone(doc):
            remove_job_dir(d)
            if d.exists() and d.stat().st_uid == os.getuid():
                shutil.rmtree(d, ignore_errors=True)
            removed.append(entry.name)
    return removed
