"""One framing for every socket cs2sim serves: a 4-byte length, then a JSON object.

Three servers speak it: the shared store's service (a Unix socket), the cluster management
server (a Unix socket, or TCP with TLS) and a job's chief (TCP, where the JSON header may be
followed by raw array bytes that the header announces; runtime/job/channel.py). Anyone who can
reach a socket can send it anything, so a receiver checks before it allocates:

- the length against a limit the receiver chooses (`max_bytes`), before reading the body;
- the body must be JSON (json's own recursion guard turns absurd nesting into an error) and an
  object;
- the whole receive runs against one *deadline* (a monotonic time), not a timeout per
  `recv`: a peer that sends one byte every few seconds still runs out of time, so a slow peer
  cannot hold a slot longer than the deadline (the classic slowloris defence).

Any violation raises FrameError with one phrase saying what was wrong; the caller then closes
the connection (a byte stream cannot be resynchronised).

`peer_cred` asks the kernel who is at the other end of a Unix socket (SO_PEERCRED, see
unix(7)): the pid, uid and gid the peer had when it connected. Servers decide permissions from
that, never from anything the client says about itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "Closed",
    "FrameError",
    "LEN",
    "PeerCred",
    "peer_cred",
    "encode",
    "send_obj",
    "recv_exact_into",
    "recv_obj",
    "recv_body",
    "unix_address",
]

LEN = struct.Struct("!I")  # the frame's length prefix: 4 bytes, network order


class Closed(Exception):
    """The peer closed the connection (or the deadline passed while waiting for it)."""


class FrameError(Exception):
    """The peer sent something that is not a valid frame (the text says what)."""


class PeerCred(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_cred(sock: socket.socket) -> PeerCred:
    """Who is at the other end of a connected Unix socket, from the kernel (SO_PEERCRED)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return PeerCred(pid, uid, gid)


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
    """An address to bind or connect a Unix socket at `path`, for the duration of the call.

    A Unix socket's address is limited to 107 bytes (unix(7), `sun_path`); a deeper path (a
    pytest tmp dir, a long $CS2_HOME) is reached through this process's open descriptor of its
    directory, `/proc/self/fd/<n>/<name>`, which names the same directory entry.
    """
    text = os.fspath(path)
    if len(os.fsencode(text)) < 100:
        yield text
        return
    fd = os.open(Path(path).parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{Path(path).name}"
    finally:
        os.close(fd)


def encode(obj: dict[str, Any], max_bytes: int | None = None) -> bytes:
    """A frame's bytes: length prefix and compact JSON; ValueError past `max_bytes`."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    if max_bytes is not None and len(body) > max_bytes:
        raise ValueError(f"a message of {len(body):,} bytes (at most {max_bytes:,})")
    return LEN.pack(len(body)) + body


def send_obj(sock: socket.socket, obj: dict[str, Any], max_bytes: int | None = None) -> None:
    sock.sendall(encode(obj, max_bytes))


def recv_exact_into(sock: socket.socket, view: memoryview, deadline: float | None = None) -> None:
    """Fill `view` from the socket; Closed on EOF or when `deadline` (time.monotonic) passes.

    With a deadline, each recv waits at most the time left, so the total is bounded however
    the peer dribbles its bytes. Without one, the socket's own timeout (if any) applies per recv.
    """
    got = 0
    while got < len(view):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Closed("deadline passed")
            sock.settimeout(left)
        try:
            n = sock.recv_into(view[got:])
        except TimeoutError:
            if deadline is not None:
                raise Closed("deadline passed") from None
            raise
        if n == 0:
            raise Closed()
        got += n


def recv_body(sock: socket.socket, max_bytes: int, deadline: float | None = None) -> bytearray:
    """The next frame's body (length checked against `max_bytes` before allocating)."""
    size = bytearray(LEN.size)
    recv_exact_into(sock, memoryview(size), deadline)
    n = LEN.unpack(size)[0]
    if n > max_bytes:  # checked before allocating: a 4 GiB length costs nothing
        raise FrameError(f"a message of {n:,} bytes (at most {max_bytes:,})")
    body = bytearray(n)
    recv_exact_into(sock, memoryview(body), deadline)
    return body


def recv_obj(sock: socket.socket, max_bytes: int, deadline: float | None = None) -> dict[str, Any]:
    """The next frame as a JSON object; FrameError when it is not one, Closed on EOF/deadline."""
    body = recv_body(sock, max_bytes, deadline)
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as e:  # RecursionError: nesting deeper than json allows
        raise FrameError(f"a message that is not JSON ({type(e).__name__})") from None
    if not isinstance(obj, dict):
        raise FrameError(f"a message that is a JSON {type(obj).__name__}, not an object")
    return obj
