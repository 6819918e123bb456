"""The chief's door: who may take a handshake slot, for how long, and what the log says of those
refused.

Anyone on the host can connect to the chief's TCP port (`ss -ltn` shows it), so an
unauthenticated connection must never hold what the job's own tasks need:

* One deadline for the whole handshake (HELLO_TIMEOUT_S from the accept, whatever the peer
  sends): a peer that announces a 65,535-byte header and dribbles a byte every few seconds is
  closed when its time is up, not kept alive by every byte (a per-receive timeout would).
* A short queue of handshakes in progress, per lane, evicted oldest-first: a new connection
  never waits for a slot; when its lane is full the oldest handshake in it is closed (a real
  task answers the challenge in milliseconds, so only a peer that is not answering is ever the
  oldest). Connections from this host are put in lanes by the OS user that owns the peer's
  socket (the kernel's socket table, /proc/net/tcp; see proc(5)): the job's own user has a lane
  of MAX_PENDING, every other local user a lane of OTHER_USER_PENDING, so another user's flood
  only ever evicts its own connections and a job whose streamers are its own is never failed by
  others' connections. Peers on other hosts share one lane (REMOTE_PENDING).
* Every refusal is named in the job's log, at most MAX_REFUSAL_LINES lines, with what the peer
  claimed escaped (channel.printable): no terminal escape or forged line reaches a console.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs2sim.runtime.job import channel
from cs2sim.runtime.job.channel import Closed, FrameError, recv_frame, send_frame

__all__ = ["Door", "HELLO_TIMEOUT_S", "MAX_PENDING", "peer_uid"]

log = logging.getLogger("cs2sim.run")

HELLO_TIMEOUT_S = 5.0  # a connecting peer has this long, in all, to complete the handshake
MAX_PENDING = 64  # handshakes in progress from the job's own user (its tasks), oldest evicted
OTHER_USER_PENDING = 8  # ... from each other local user
REMOTE_PENDING = 32  # ... from other hosts, together
MAX_REFUSAL_LINES = 50  # refused connections named in the log, one line each, per job
OWN = "own"
REMOTE = "remote"


def _tcp_tables() -> list[Path]:
    return [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]


def peer_uid(conn: socket.socket) -> int | None:
    """The uid owning the peer's end of an accepted loopback/local TCP connection, from the
    kernel's socket table (None for a peer on another host, or when it cannot be told)."""
    try:
        here = conn.getsockname()[1]
        there = conn.getpeername()[1]
    except OSError:
        return None
    want_local, want_remote = f":{there:04X}", f":{here:04X}"
    for table in _tcp_tables():
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            # sl local_address rem_address st tx:rx tr:when retrnsmt uid ...: the peer's socket
            # is the row whose local end is the peer's port and whose remote end is ours
            if len(f) > 7 and f[1].endswith(want_local) and f[2].endswith(want_remote):
                with contextlib.suppress(ValueError):
                    return int(f[7])
    return None


class Door:
    """Accepts on `sock`, runs each handshake under one deadline in a lane of bounded size, and
    hands authenticated peers to `admit(conn, hello)`. `check(hello, chief_nonce)` says why a
    hello is refused (None: it proved the job's secret); `welcome(hello, chief_nonce)` is the
    chief's answer to a good one."""

    def __init__(
        self,
        sock: socket.socket,
        check: Callable[[dict[str, Any], str], str | None],
        welcome: Callable[[dict[str, Any], str], dict[str, Any]],
        admit: Callable[[socket.socket, dict[str, Any]], None],
        closing: Callable[[], bool],
    ) -> None:
        self._sock = sock
        self._check, self._welcome, self._admit, self._closing = check, welcome, admit, closing
        self._lock = threading.Lock()
        self._lanes: dict[Any, OrderedDict[socket.socket, float]] = {}
        self._evicted: set[socket.socket] = set()
        self.refused = 0  # connections refused (the first MAX_REFUSAL_LINES named in the log)
        self.evicted = 0  # handshakes closed to make room for newer connections
        self._uid = os.getuid()
        self._thread = threading.Thread(target=self._accept, name="chief-accept", daemon=True)
        self._thread.start()

    def pending(self) -> int:
        with self._lock:
            return sum(len(q) for q in self._lanes.values())

    # -- admission ---------------------------------------------------------------------------
    def _lane(self, conn: socket.socket, addr: Any) -> tuple[Any, int]:
        """(lane key, its size) for a new connection."""
        host = addr[0] if isinstance(addr, tuple) else ""
        local = (
            host.startswith("127.")
            or host in ("::1", "::ffff:127.0.0.1")
            or host in _local_addresses()
        )
        uid = peer_uid(conn) if local else None
        if uid is None:
            return REMOTE, REMOTE_PENDING
        if uid == self._uid:
            return OWN, MAX_PENDING
        return uid, OTHER_USER_PENDING

    def _accept(self) -> None:
        while not self._closing():
            try:
                conn, addr = self._sock.accept()
            except OSError:
                return
            try:
                lane, size = self._lane(conn, addr)
            except Exception:  # noqa: BLE001 - an unreadable table: treat as a remote peer
                lane, size = REMOTE, REMOTE_PENDING
            with self._lock:
                queue = self._lanes.setdefault(lane, OrderedDict())
                while len(queue) >= size:  # oldest-first: a slow peer is the oldest
                    old, _ = queue.popitem(last=False)
                    self._evicted.add(old)
                    self.evicted += 1
                    with contextlib.suppress(OSError):
                        old.shutdown(socket.SHUT_RDWR)  # its handshake thread sees EOF now
                queue[conn] = time.monotonic()
            threading.Thread(
                target=self._hello, args=(conn, addr, lane), daemon=True, name="chief-hello"
            ).start()

    def _leave(self, conn: socket.socket, lane: Any) -> bool:
        """Take `conn` out of its lane; False when it had been evicted meanwhile."""
        with self._lock:
            q = self._lanes.get(lane)
            if q is not None:
                q.pop(conn, None)
                if not q and lane != OWN:
                    del self._lanes[lane]
            if conn in self._evicted:
                self._evicted.discard(conn)
                return False
            return True

    def _hello(self, conn: socket.socket, addr: Any, lane: Any) -> None:
        """One handshake (runtime/job/channel.py) under one deadline; a peer that fails it is
        closed and named."""
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        header: dict[str, Any] | None = None
        why: str | None
        try:
            try:
                channel.tune(conn)
                conn.settimeout(HELLO_TIMEOUT_S)  # the challenge is small: the send buffer takes it
                chief_nonce = channel.nonce()
                send_frame(conn, {"type": "challenge", "nonce": chief_nonce})
                header, _ = recv_frame(conn, deadline=deadline)
                why = self._check(header, chief_nonce)
                if why is None:
                    conn.settimeout(max(0.01, deadline - time.monotonic()))
                    send_frame(conn, self._welcome(header, chief_nonce))
            except (Closed, TimeoutError):
                why = (
                    f"sent no complete hello within {HELLO_TIMEOUT_S:g} s"
                    if time.monotonic() >= deadline
                    else "closed the connection before its hello"
                )
            except FrameError as e:
                why = f"sent {e}"
            except OSError as e:
                why = f"failed ({e.strerror or e})"
            if not self._leave(conn, lane):
                why = (
                    "was closed to make room for newer connections while its handshake was "
                    "incomplete"
                )
            if why is not None:
                self._refuse(addr, header, why)
                conn.close()
                return
            assert header is not None
            conn.settimeout(None)
            self._admit(conn, header)
        except Exception as e:  # noqa: BLE001 - a peer must never put a traceback in the log
            self._leave(conn, lane)
            self._refuse(addr, header, f"caused an error ({type(e).__name__})")
            with contextlib.suppress(OSError):
                conn.close()

    # -- the log -------------------------------------------------------------------------------
    def _refuse(self, addr: Any, claim: dict[str, Any] | None, why: str) -> None:
        """Name a refused connection in the job's log (at most MAX_REFUSAL_LINES lines)."""
        with self._lock:
            self.refused += 1
            n = self.refused
        if n > MAX_REFUSAL_LINES + 1:
            return
        if n == MAX_REFUSAL_LINES + 1:
            log.warning(
                f"More than {MAX_REFUSAL_LINES} connections to the chief were refused; "
                "further ones are not logged."
            )
            return
        where = (
            f"{channel.printable(addr[0], 64)}:{channel.printable(addr[1], 8)}"
            if isinstance(addr, tuple) and len(addr) >= 2
            else "?"
        )
        log.warning(
            f"Refused a connection to the chief from {where}{claimed(claim)}: it "
            f"{channel.printable(why, 300)}; it is not a task of this job, and the job "
            "goes on."
        )


def claimed(claim: dict[str, Any] | None) -> str:
    """`, claiming to be streamer 0 (task 3 on node n1, pid 77)` for a refused peer's hello,
    every field escaped (channel.printable)."""
    if not claim:
        return ""

    def show(key: str) -> str:
        return channel.printable(claim.get(key))

    who = show("type")
    if claim.get("rank") is not None:
        who += f" {show('rank')}"
    return (
        f", claiming to be {who} of job {show('job')} (task {show('procid')} on node "
        f"{show('node')}, pid {show('pid')})"
    )


_LOCAL: set[str] | None = None


def _local_addresses() -> set[str]:
    """This host's own addresses (a peer connecting to one of them is on this host)."""
    global _LOCAL
    if _LOCAL is None:
        found: set[str] = set()
        with contextlib.suppress(OSError):
            for info in socket.getaddrinfo(socket.gethostname(), None):
                found.add(str(info[4][0]))
        _LOCAL = found
    return _LOCAL
