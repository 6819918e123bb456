"""Process facts from Linux's /proc, read in one place.

`/proc/<pid>/stat` is one line: `pid (comm) state ppid pgrp session ... starttime ...`. The
command name (field 2) may itself hold spaces and parentheses, so the fields are split after
its LAST ')'; after that, field 3 (state) is index 0, and field N is index N - 3 (proc(5):
https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html). Every reader returns None (or an
empty answer) where /proc is missing or the process is gone: callers decide what that means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = [
    "ProcStat",
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
