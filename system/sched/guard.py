"""Every process of a job ends with the job: sessions, the launcher as subreaper, and a guard.

What the embedded scheduler does (runner.py calls these):

1. Each task runs in a session of its own (setsid; its session id is its pid), so everything it
   starts (children, grandchildren) carries that session id unless it leaves on purpose.
2. The launcher makes itself a child subreaper (PR_SET_CHILD_SUBREAPER) while the step runs: a
   process whose parent exits is re-parented to the launcher instead of to init, so even a
   process that left its session (a daemon's double fork) stays findable as its child.
3. When the step ends for any reason (every task exited, kill-on-bad-exit, `jobs cancel`,
   Ctrl-C, an error in the launcher), `end_processes` SIGKILLs whatever is left in the tasks'
   sessions and among the launcher's children, and waits until none is left, before the
   launcher frees the job's nodes.
4. A launcher killed with SIGKILL can do none of that, so each job has a GUARD: a small process
   forked by the launcher before the job is queued, in a session of its own. It learns the
   tasks' session ids (and the job's environment marker) through a pipe; when the pipe reaches
   EOF without a goodbye (the launcher is gone), it SIGKILLs every process of those sessions,
   and every process of this user whose environment carries the job's marker (a process that
   left its session), until none is left, and exits. The guard's process name is
   `cs2g-<launcher pid>`, and the queue counts a launcher as alive while a guard of that name
   runs (`guard_running`; queue.py reaps a job whose launcher is gone): so the next reader
   frees the nodes of a killed launcher's job only after the guard has finished, i.e. after
   every process of the job is gone. A SIGTERM to the guard is passed on to the launcher.

Zombies count as gone (they hold no resources but a pid; init reaps them).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

from cs2sim.system import procfs

__all__ = ["JobGuard", "members", "end_processes", "become_subreaper", "guard_running"]

PR_SET_CHILD_SUBREAPER = 36
KILL_WAIT_S = 5.0  # SIGKILLed processes are gone within ms; this bounds a stuck scan


def members(
    sids: set[int],
    *,
    parent: int | None = None,
    marker: bytes | None = None,
    exclude: set[int] | frozenset[int] = frozenset(),
) -> list[int]:
    """Live (non-zombie) processes in the sessions `sids`, or children of `parent`, or (this
    user's) carrying the environment entry `marker`; never this process or `exclude`."""
    me = os.getpid()
    out = []
    uid = os.getuid()
    for pid in procfs.pids():
        if pid == me or pid in exclude:
            continue
        st = procfs.read_stat(pid)
        if st is None or st.ended:
            continue
        if st.session in sids or (parent is not None and st.ppid == parent):
            out.append(pid)
        elif marker is not None and procfs.owner(pid) == uid and procfs.environ_has(pid, marker):
            out.append(pid)
    return out


def end_processes(
    sids: set[int],
    *,
    parent: int | None = None,
    marker: bytes | None = None,
    exclude: set[int] | frozenset[int] = frozenset(),
    timeout: float = KILL_WAIT_S,
) -> int:
    """SIGKILL every process `members` finds until none is left (or `timeout`); how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while True:
        found = members(sids, parent=parent, marker=marker, exclude=exclude)
        if not found or time.monotonic() > deadline:
            return len(killed)
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        if parent == os.getpid():  # our own children: reap them, or they stay zombies of ours
            for pid in found:
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.005)


PR_SET_NAME = 15
GUARD_NAME = "cs2g-{}"  # the guard's comm (at most 15 bytes: pids have at most 7 digits)


def guard_running(launcher: int) -> bool:
    """Whether a guard of the launcher `launcher` still runs (ending its job's processes)."""
    want = GUARD_NAME.format(launcher).encode()
    for pid in procfs.pids():
        if procfs.comm(pid) != want:
            continue
        st = procfs.read_stat(pid)
        if st is not None and not st.ended:
            return True
    return False


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (Linux); False if it cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class JobGuard:
    """The launcher's guard process (see the module docstring)."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.fd = pipe  # tasks must not inherit it (runner.py closes it in every child)
        self._pipe = pipe

    @classmethod
    def start(cls) -> JobGuard | None:
        """Fork the guard (None where fork or /proc is missing: nothing to guard with)."""
        if not procfs.available() or not hasattr(os, "fork"):
            return None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the guard
            code = 0
            try:
                os.close(w)
                _guard_main(r)
            except BaseException:  # noqa: BLE001 - nothing may escape a forked child
                code = 1
            os._exit(code)
        os.close(r)
        os.set_inheritable(w, False)
        return cls(pid, w)

    def watch(self, sids: list[int], marker: str | None = None) -> None:
        """Tell the guard the tasks' session ids (and the job's environment marker)."""
        words = ["w", *map(str, sids)]
        lines = " ".join(words) + "\n"
        if marker:
            lines += f"m {marker}\n"
        with contextlib.suppress(OSError):
            os.write(self._pipe, lines.encode())

    def close(self) -> None:
        """The launcher ended the job itself: the guard exits without killing anything."""
        with contextlib.suppress(OSError):
            os.write(self._pipe, b"q\n")
        with contextlib.suppress(OSError):
            os.close(self._pipe)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)


def _guard_main(r: int) -> None:
    """The guard's life: read orders until the launcher says goodbye or vanishes."""
    os.setsid()  # a terminal's Ctrl-C and hang-up are the launcher's business, not ours
    launcher = os.getppid()
    with contextlib.suppress(OSError, AttributeError):  # the name the queue looks for
        ctypes.CDLL(None, use_errno=True).prctl(
            PR_SET_NAME, GUARD_NAME.format(launcher).encode(), 0, 0, 0
        )

    def forward(sig: int, frame: object) -> None:  # `jobs cancel` signals the recorded pid
        with contextlib.suppress(OSError):
            os.kill(launcher, signal.SIGTERM)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    for fd in range(3, 256):  # hold no pipe or file of the launcher's open
        if fd != r:
            with contextlib.suppress(OSError):
                os.close(fd)
    sids: set[int] = set()
    marker: bytes | None = None
    buf = b""
    while True:
        try:
            data = os.read(r, 4096)
        except InterruptedError:
            continue
        if not data:
            break  # EOF without "q": the launcher died
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            word, _, rest = line.decode().partition(" ")
            if word == "q":
                return
            if word == "w":
                sids.update(int(x) for x in rest.split() if x.isdigit())
            elif word == "m":
                marker = rest.encode()
    if sids or marker:
        end_processes(sids, marker=marker)
