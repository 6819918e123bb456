"""Acting as a caller: the cluster server never touches a path a caller named with its own rights.

The split is Slurm's: slurmd runs as root, and for each job step forks slurmstepd, which calls
initgroups(3) and setuid(2) to the job's user BEFORE it opens the user's working directory or
files, so a job can reach nothing its user could not ("Slurm Programmer's Guide", slurmstepd
in "slurmd(8)"; src/slurmd/slurmstepd/mgr.c `_drop_privileges` then `_become_user`). The server
here does the same in two places:

  * a launch (runs.py) is spawned with `preexec` below: the user's own groups (`getgrouplist`,
    computed in the parent: NSS lookups are not safe in a child forked from a threaded
    process), then its gid and uid, and only then the chdir into the caller's working
    directory (Popen's own `cwd=` would chdir as root, before any preexec function);
  * anything the server must learn about or read from a caller's paths (is the working
    directory enterable, the compile directory readable, the logs a log export zips) is done
    by `call_as`: a forked child that first becomes the user, then runs one function and
    writes its result to a pipe; the server reads at most `limit` bytes of it within
    `timeout` seconds and kills the child past either. A child that runs as the user cannot
    read anything the user could not, so what it hands back is at most what the user may see.

A server that does not run as root can act only as its own user (`Account.check_can_become`).
"""

from __future__ import annotations

import contextlib
import ctypes
import grp
import os
import pwd
import select
import signal
import stat
import time
import zipfile  # noqa: F401 - imported before any fork: a child never takes the import lock
import zlib  # noqa: F401 - the same
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from cs2sim.system.errors import CsError, PermissionDenied

__all__ = ["Account", "AsUserError", "TimedOut", "TooLarge", "call_as", "preexec", "open_job_log"]

PR_SET_PDEATHSIG = 1
_MAX_FD = os.sysconf("SC_OPEN_MAX")
_OK, _REFUSED = b"0", b"1"


class AsUserError(CsError):
    """What a child running as the caller refused, or why it could not run (one sentence);
    its exit code is the refusal's own."""

    exit_code = 1

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.exit_code = code


class TimedOut(AsUserError):
    """The child ran past its time (it was killed)."""


class TooLarge(AsUserError):
    """The child's answer passed the limit (the child was killed at the limit)."""

    exit_code = 1


@dataclass(frozen=True)
class Account:
    """An OS user as a job runs: uid, primary gid and every group `initgroups` would give."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    name: str

    @classmethod
    def of(cls, uid: int) -> Account:
        try:
            pw = pwd.getpwuid(uid)
        except KeyError:
            raise PermissionDenied(
                f"Permission denied: uid {uid} has no account on this host, so nothing can "
                "run as it; ask the admin to add it."
            ) from None
        return cls(pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(pw.pw_name, pw.pw_gid)), pw.pw_name)

    def in_group(self, gid: int) -> bool:
        return gid in self.groups

    def check_can_become(self) -> None:
        """PermissionDenied unless this process can act as the account (root, or itself)."""
        if os.geteuid() not in (0, self.uid):
            raise PermissionDenied(
                f"Permission denied: the cluster server runs as {_name(os.geteuid())} and "
                f"cannot act as {self.name}; start your own server (your own CS2_HOME), or "
                "ask the admin to run the site server as root."
            )

    def become(self) -> None:  # pragma: no cover - runs in a forked child
        """Drop to the account, groups first (no way back: real, effective, saved ids)."""
        if os.geteuid() == 0 and self.uid != 0:
            os.setgroups(list(self.groups))
            os.setresgid(self.gid, self.gid, self.gid)
            os.setresuid(self.uid, self.uid, self.uid)
        elif os.geteuid() != self.uid:
            os._exit(126)


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def open_job_log(path: Path) -> BinaryIO:
    """A job's log file for the server to read: never through a symlink, and only a regular
    file with one link owned by its directory's owner (the job's user, who may replace it,
    with a file of their own at most: what they could read anyway); OSError otherwise."""
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
        st, dst = os.fstat(fd), os.fstat(dfd)
    finally:
        os.close(dfd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != dst.st_uid or st.st_nlink != 1:
        os.close(fd)
        raise PermissionError(f"{path} is not its job's own log file")
    return os.fdopen(fd, "rb")


def preexec(account: Account, cwd: str | None) -> Callable[[], None]:
    """A launch's child setup: become the account, then enter `cwd` with its rights, then die
    with the server (set after the uid change, which clears a parent-death signal)."""

    def setup() -> None:  # pragma: no cover - runs in the child between fork and exec
        account.become()
        if cwd is not None:
            os.chdir(cwd)  # as the user: an unreadable directory fails the launch, not leaks
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # the server died before the prctl took effect
            os._exit(1)

    return setup


def call_as(account: Account, fn: Callable[[], bytes], *, limit: int, timeout: float) -> bytes:
    """`fn()`'s bytes, computed in a child that runs as `account` (module docstring).
    AsUserError carries the child's refusal (fn raised CsError: its sentence); TooLarge when
    the answer passes `limit` bytes; AsUserError when the child fails or runs past `timeout`."""
    account.check_can_become()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: never returns into the server
        try:
            # nothing of the server's goes with it: not its sockets, book or wake-up pipe (the
            # user could not reach them anyway: a process whose ids changed is not dumpable),
            # not its signal handlers
            os.closerange(0, w)
            os.closerange(w + 1, _MAX_FD)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            account.become()
            try:
                out = _OK + fn()
            except CsError as e:
                out = _REFUSED + f"{e.exit_code} {e}".encode("utf-8", "replace")
            except OSError as e:
                out = (
                    _REFUSED
                    + b"77 "
                    + (
                        f"{e.filename or 'a path'}: {e.strerror or type(e).__name__} "
                        f"(as {account.name})"
                    ).encode("utf-8", "replace")
                )
            except Exception as e:  # noqa: BLE001 - said as one sentence by the parent
                out = _REFUSED + f"1 it failed ({type(e).__name__})".encode()
            view = memoryview(out)
            while view:
                view = view[os.write(w, view) :]
        except BaseException:  # noqa: BLE001 - a broken pipe: the parent stopped reading
            pass
        finally:
            os._exit(0)
    os.close(w)
    chunks: list[bytes] = []
    size = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                raise TimedOut(
                    f"reading as {account.name} took longer than {timeout:g} s; "
                    "retry, or ask for less"
                )
            data = os.read(r, 1 << 20)
            if not data:
                break
            size += len(data)
            if size > limit + 1:
                raise TooLarge(f"it is larger than {limit >> 20} MiB")
            chunks.append(data)
    finally:
        os.close(r)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # done or not, nothing of it outlives the call
        os.waitpid(pid, 0)
    out = b"".join(chunks)
    if out[:1] == _OK:
        return out[1:]
    if out[:1] == _REFUSED:
        code, _, text = out[1:].decode("utf-8", "replace").partition(" ")
        raise AsUserError(text, int(code) if code.isdigit() else 1)
    raise AsUserError(f"the helper acting as {account.name} exited without an answer")
