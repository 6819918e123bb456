"""Process facts from Linux's /proc, read in one place.

`/proc/<pid>/stat` is one line: `pid (comm) state ppid pgrp session ... starttime ...`. The
command name (field 2) may itself hold spaces and parentheses, so the fields are split after
its LAST ')'; after that, field 3 (state) is index 0, and field N is index N - 3 (proc(5):
https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html). Every reader returns None (or an
empty answer) where /proc is missing or the process is gone: callers decide what that means.

Signalling a process by what was recorded of it (`signal_recorded`) lives here too, because it
is only safe together with these reads. A pid alone names whatever process holds that number
now; so a process is signalled only through a handle that cannot be reused: `pidfd_open(2)`
pins the process (Linux >= 5.3), its /proc facts (start tick, real and effective uid) are read
and checked against the record, the handle is checked to be still alive (so what was read was
that process's), and `pidfd_send_signal(2)` sends the signal to it (Linux >= 5.1; Python >=
3.9 has both). pidfd_open also refuses any thread that does not lead its process (EINVAL, or
ENOENT since Linux 6.9), so a pid reused by a thread is never signalled. Where pidfd_open is
missing (another kernel), the start tick and uid are read immediately before os.kill: the weaker
fallback, which a pid reused in between could still defeat (docs/security.md).
"""

from __future__ import annotations

import errno
import os
import signal
from dataclasses import dataclass

__all__ = [
    "ProcStat",
    "ProcessId",
    "identify",
    "ids",
    "pidfd_alive",
    "pidfd_supported",
    "signal_recorded",
    "available",
    "boot_time",
    "comm",
    "environ_has",
    "owner",
    "pids",
    "read_stat",
    "started_at",
]

PROC = "/proc"


@dataclass(frozen=True)
class ProcStat:
    """The fields of `/proc/<pid>/stat` the project uses."""

    state: str  # field 3: R, S, D, Z (zombie), X (dead), ...
    ppid: int  # field 4
    session: int  # field 6
    starttime: str  # field 22: clock ticks after boot, kept as the text the kernel wrote

    @property
    def ended(self) -> bool:
        """Exited (a zombie not yet reaped, or dead): no longer running anything."""
        return self.state in ("Z", "X")


def available() -> bool:
    """Whether this system has a /proc to read (Linux)."""
    return os.path.isdir(PROC)


def read_stat(pid: int | str = "self") -> ProcStat | None:
    """`/proc/<pid>/stat` parsed, None if it cannot be read or parsed."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(
            state=fields[0].decode(),
            ppid=int(fields[1]),
            session=int(fields[3]),
            starttime=fields[19].decode(),
        )
    except (IndexError, ValueError, UnicodeDecodeError):
        return None


def boot_time() -> int | None:
    """When the system booted (epoch seconds, `btime` of /proc/stat), None if unknown."""
    try:
        with open(f"{PROC}/stat", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("btime "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def started_at(pid: int | str = "self") -> float | None:
    """When the process started (epoch seconds), None if /proc cannot say."""
    st = read_stat(pid)
    btime = boot_time()
    if st is None or btime is None:
        return None
    try:
        return btime + int(st.starttime) / os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return None


def pids() -> list[int]:
    """Every process id /proc lists now (empty where there is no /proc)."""
    try:
        entries = os.listdir(PROC)
    except OSError:
        return []
    return [int(e) for e in entries if e.isdigit()]


def comm(pid: int) -> bytes | None:
    """The process's command name (`/proc/<pid>/comm`, at most 15 bytes), None if unreadable."""
    try:
        with open(f"{PROC}/{pid}/comm", "rb") as f:
            return f.read().strip()
    except OSError:
        return None


def owner(pid: int) -> int | None:
    """The uid that owns the process, None if it is gone."""
    try:
        return os.stat(f"{PROC}/{pid}").st_uid
    except OSError:
        return None


def environ_has(pid: int, entry: bytes) -> bool:
    """Whether the process's environment holds `entry` (`NAME=value`) exactly; readable only
    for this user's own processes (`/proc/<pid>/environ` is mode 0400)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            return entry in f.read().split(b"\0")
    except OSError:
        return False


def ids(pid: int) -> tuple[int, int, int] | None:
    """(thread group id, real uid, effective uid) of `pid` from `/proc/<pid>/status`, None if
    unreadable. A thread's id is readable there too: its thread group id is not its own."""
    try:
        with open(f"{PROC}/{pid}/status", "rb") as f:
            raw = f.read(8192)
    except OSError:
        return None
    tgid = ruid = euid = None
    for line in raw.split(b"\n"):
        if line.startswith(b"Tgid:"):
            tgid = int(line.split()[1])
        elif line.startswith(b"Uid:"):
            parts = line.split()
            ruid, euid = int(parts[1]), int(parts[2])
    if tgid is None or ruid is None or euid is None:
        return None
    return tgid, ruid, euid


@dataclass(frozen=True)
class ProcessId:
    """What identifies a running process for as long as it runs: its pid, its start tick (a
    reused pid has a later one) and the uid it runs as."""

    pid: int
    start: str
    uid: int


def identify(pid: int) -> ProcessId | None:
    """The identity of process `pid` as it runs now; None if it is gone, a zombie, a thread
    that does not lead its process, or runs with a real and effective uid that differ."""
    st = read_stat(pid)
    got = ids(pid)
    if st is None or st.ended or got is None:
        return None
    tgid, ruid, euid = got
    if tgid != pid or ruid != euid:
        return None
    again = read_stat(pid)  # the stat read first is still this process's
    if again is None or again.starttime != st.starttime:
        return None
    return ProcessId(pid, st.starttime, ruid)


def pidfd_supported() -> bool:
    """Whether this kernel and Python signal through pidfds (pidfd_open, pidfd_send_signal)."""
    if not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal")):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:
        return False
    return True


def signal_recorded(pid: int, start: str | None, uid: int | None, sig: int) -> bool:
    """Send `sig` to process `pid` only if it is still the process recorded as (`start`, `uid`):
    the same start tick, leading its process, running as `uid`; never to this process. True if
    sent; False if it is gone, is another process now, or nothing was recorded to check it by.
    PermissionError if the kernel says this process may not signal it."""
    if start is None or uid is None or pid <= 1 or pid == os.getpid():
        return False
    want = ProcessId(pid, start, uid)
    if not pidfd_supported():  # the weaker fallback: checked immediately before the signal
        if identify(pid) != want:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return False
        return True
    try:
        fd = os.pidfd_open(pid)  # pins this process: its pid cannot name another while open
    except OSError as e:
        if e.errno in (errno.ESRCH, errno.EINVAL, errno.ENOENT):
            return False  # gone; or a thread that does not lead its process (EINVAL, ENOENT)
        raise
    try:
        if identify(pid) != want or not pidfd_alive(fd):
            return False  # another process (or it ended: what was read may not be its)
        try:
            signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return False
        return True
    finally:
        os.close(fd)


def pidfd_alive(pidfd: int) -> bool:
    """Whether the process a pidfd pins has not exited (signal 0 sends nothing)."""
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists; whether this process may signal it is the kernel's to say
    return True
