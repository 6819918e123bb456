"""A typed-request server on a Unix socket: the accept loop, per-caller limits and idle closing
that any cs2sim service answering local users needs (the shared store's service uses it).

Each connection is served by a thread of its own, one request at a time: a request is one
system/wire.py frame, answered by one frame. The server knows nothing of what requests mean: a
`Session` made for each connection (from the kernel's account of the peer, SO_PEERCRED) answers
them. What the server bounds, whoever the peer is:

- connections: at most `per_uid` per OS user and `total` in all. A user at their limit who
  connects again takes the place of their own longest-idle connection (closed between two
  requests, so its client reconnects when it next needs one); if every one of theirs is busy,
  the new connection is refused with one sentence. When the server as a whole is full, the
  longest-idle connection of the user holding the most idle ones makes room. So one user's
  connections, idle or not, never keep another user out.
- a request: at most `request_bytes`, and all of its bytes within `receive_s` once it begins
  (system/wire.py's whole-receive deadline: a peer dribbling bytes is closed, not waited for);
- an answer: at most `result_bytes` (a larger one is replaced by a refusal saying so);
- idleness: a connection silent for `idle_s` is closed. No lock of any kind is held between
  two requests, so closing one never leaves anything half-done.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from cs2sim.system.wire import Closed, FrameError, PeerCred, encode, peer_cred, recv_obj

__all__ = ["Limits", "Session", "RequestServer"]


@dataclass(frozen=True)
class Limits:
    """What one caller may take of a server."""

    per_uid: int = 32  # connections of one OS user
    total: int = 256  # connections in all
    request_bytes: int = 256 * 1024
    result_bytes: int = 4 * 1024 * 1024
    receive_s: float = 10.0  # a request's bytes, once it begins; also sending the answer
    idle_s: float = 120.0  # a connection silent this long is closed


class Session(Protocol):
    """What answers one connection's requests."""

    def handle(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def refusal(self, text: str) -> dict[str, Any]: ...

    def close(self) -> None: ...


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: PeerCred
    last: float = field(default_factory=time.monotonic)
    busy: bool = False
    evicted: bool = False


class RequestServer:
    """Serve `listener` (a bound, listening Unix socket) until `keep_going()` says no."""

    def __init__(
        self,
        listener: socket.socket,
        session: Callable[[socket.socket, PeerCred], Session],
        refuse: Callable[[str], dict[str, Any]],
        limits: Limits = Limits(),
        keep_going: Callable[[], bool] = lambda: True,
    ) -> None:
        self.listener = listener
        self.session = session
        self.refuse = refuse  # an answer saying no, for connections refused before a session
        self.limits = limits
        self.keep_going = keep_going
        self._lock = threading.Lock()
        self._conns: dict[int, list[_Conn]] = {}  # uid -> its connections

    def count(self, uid: int | None = None) -> int:
        """Connections now open (of `uid`, or all)."""
        with self._lock:
            if uid is not None:
                return len(self._conns.get(uid, ()))
            return sum(len(v) for v in self._conns.values())

    def serve_forever(self, poll_s: float = 2.0) -> None:
        self.listener.settimeout(poll_s)
        while True:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                if not self.keep_going():
                    return
                continue
            except OSError:
                if not self.keep_going():
                    return
                time.sleep(0.05)  # EMFILE and the like: let connections end
                continue
            try:
                peer = peer_cred(sock)
            except OSError:
                sock.close()
                continue
            conn = _Conn(sock, peer)
            why = self._admit(conn)
            if why is not None:
                self._refuse(sock, why)
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _admit(self, conn: _Conn) -> str | None:
        """Take `conn` in (evicting its user's longest-idle connection when at the limit), or
        say why not."""
        lim = self.limits
        victim: _Conn | None = None
        with self._lock:
            mine = self._conns.setdefault(conn.peer.uid, [])
            total = sum(len(v) for v in self._conns.values())
            if len(mine) >= lim.per_uid or total >= lim.total:
                # at their own limit: their own longest-idle connection; the server full: that
                # of whoever holds the most (never a busy one)
                owner = (
                    mine
                    if len(mine) >= lim.per_uid
                    else max(self._conns.values(), key=lambda v: sum(not c.busy for c in v))
                )
                idle = sorted(
                    (c for c in owner if not c.busy and not c.evicted), key=lambda c: c.last
                )
                if not idle:
                    if not mine:
                        del self._conns[conn.peer.uid]
                    if len(mine) >= lim.per_uid:
                        return (
                            f"the service is already answering {len(mine)} connections "
                            f"of yours (at most {lim.per_uid} at once); wait for some to "
                            "finish and try again"
                        )
                    return (
                        f"the service is serving {total} connections (at most "
                        f"{lim.total}); try again in a moment"
                    )
                victim = idle[0]
                victim.evicted = True
                owner.remove(victim)
            mine.append(conn)
        if victim is not None:
            with contextlib.suppress(OSError):
                victim.sock.shutdown(socket.SHUT_RDWR)
        return None

    def _refuse(self, sock: socket.socket, why: str) -> None:
        with contextlib.suppress(OSError):
            sock.settimeout(1.0)
            sock.sendall(encode(self.refuse(why)))
        sock.close()

    def _serve(self, conn: _Conn) -> None:
        lim = self.limits
        session: Session | None = None
        try:
            session = self.session(conn.sock, conn.peer)
            while True:
                ready, _, _ = select.select([conn.sock], [], [], lim.idle_s)
                with self._lock:
                    if conn.evicted or not ready:
                        return
                    conn.busy = True
                try:
                    request = recv_obj(
                        conn.sock, lim.request_bytes, time.monotonic() + lim.receive_s
                    )
                except FrameError as e:
                    conn.sock.settimeout(lim.receive_s)
                    conn.sock.sendall(encode(session.refusal(f"a malformed request: {e}")))
                    return
                answer = encode(session.handle(request))
                if len(answer) - 4 > lim.result_bytes:
                    answer = encode(
                        session.refusal(
                            f"its answer is {len(answer) - 4:,} bytes, more than the "
                            f"{lim.result_bytes:,} the service sends; ask for less"
                        )
                    )
                conn.sock.settimeout(lim.receive_s)
                conn.sock.sendall(answer)
                with self._lock:
                    conn.busy = False
                    conn.last = time.monotonic()
        except (Closed, OSError, ValueError):
            return
        except Exception:  # noqa: BLE001 - one caller's failure never stops the service
            return
        finally:
            if session is not None:
                with contextlib.suppress(Exception):
                    session.close()
            with self._lock:
                mine = self._conns.get(conn.peer.uid, [])
                if conn in mine:
                    mine.remove(conn)
                if not mine:
                    self._conns.pop(conn.peer.uid, None)
            with contextlib.suppress(OSError):
                conn.sock.close()
