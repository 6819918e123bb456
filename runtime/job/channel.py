"""The chief's channel, frame by frame: bounded frames, the job's secret, the handshake.

Anyone on the host (or the network) can connect to the chief's port, so nothing a peer sends is
trusted before it has proved it holds the job's secret, and nothing is allocated before it is
checked:

Frames. system/wire.py's framing (a 4-byte length, a JSON object), then the raw bytes of the
arrays the header lists as [name, dtype, shape]. The length is checked against MAX_HEADER
before anything is allocated; the header must parse (bounded depth: a header is at most
MAX_HEADER bytes and json's own recursion guard turns deeper nesting into an error) and be an
object; a receive may be given one deadline for all its bytes (a peer that dribbles a byte
every few seconds still runs out of time: the chief gives each handshake one deadline); arrays are
checked (`check_arrays`: numeric dtypes only, at most MAX_NDIM dimensions, a byte size within
MAX_FRAME_BYTES, and exactly the names, dtypes and shapes the receiver expects) before a single
byte is received into them. Any violation raises FrameError with one phrase saying what was
wrong; the connection is then closed by the caller (a stream cannot be resynchronised).

Secret. 32 random bytes per job, known only to the job's own tasks: the launcher hands it to
every task in $CS2SIM_JOB_SECRET (a process's environment is readable only by its user), or,
when a job is started without our launcher (a bare `srun`), the chief writes it to a 0600 file
in its 0700 rendezvous directory (runtime/job/rendezvous.py) and the other tasks read it there.

Handshake (mutual, challenge-response; the secret never crosses the wire):
    chief  -> task   {"type": "challenge", "nonce": Nc}
    task   -> chief  hello {..., "nonce": Nt, "proof": HMAC(secret, "hello"|Nc|Nt|claim)}
    chief  -> task   {"type": "welcome", "proof": HMAC(secret, "welcome"|Nt|Nc)}
The claim (type, job, rank, task) is inside the MAC, so a proof cannot be replayed for another
claim or connection (each side's nonce is fresh). A peer that fails is closed at once and named
in the job's log by the chief (runtime/job/door.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import socket
from typing import Any

import numpy as np

from cs2sim.system import knobs
from cs2sim.system.sched.pycmd import SECRET_ENV
from cs2sim.system.wire import LEN, Closed, FrameError, recv_exact_into, recv_obj

__all__ = [
    "Closed",
    "FrameError",
    "SECRET_ENV",
    "MAX_HEADER",
    "POLL_S",
    "send_frame",
    "recv_header",
    "recv_frame",
    "recv_arrays",
    "check_arrays",
    "Layout",
    "new_secret",
    "env_secret",
    "hello_proof",
    "welcome_proof",
    "proof_ok",
    "claim_text",
    "nonce",
    "printable",
    "tune",
]

MAX_HEADER = 64 * 1024  # bytes of JSON header; our largest (a hello, an error text) is < 2 KiB
MAX_ARRAYS = 64  # arrays in one frame
MAX_NDIM = 8
MAX_FRAME_BYTES = 1 << 31  # 2 GiB of array bytes in one frame (a batch of GPT-3 XL is ~16 MiB)
NUMERIC_KINDS = "biuf"  # bool, signed and unsigned integers, floats: no objects, strings, voids
POLL_S = 0.1  # how often a side blocked on the channel looks at liveness and stop flags

Layout = list[tuple[str, np.dtype, tuple[int, ...]]]  # [(name, dtype, shape)] in frame order


# -- frames ---------------------------------------------------------------------------------------
def send_frame(
    sock: socket.socket, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None
) -> None:
    """One frame: length, JSON header (with the arrays' dtype/shape), the arrays' bytes."""
    arrays = arrays or {}
    header = dict(header)
    header["arrays"] = [[k, a.dtype.str, list(a.shape)] for k, a in arrays.items()]
    head = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(LEN.pack(len(head)) + head)
    for a in arrays.values():
        sock.sendall(np.ascontiguousarray(a).data.cast("B"))


def recv_header(
    sock: socket.socket, max_header: int = MAX_HEADER, deadline: float | None = None
) -> dict[str, Any]:
    """The next frame's header (an object); its arrays' bytes are NOT read (see recv_arrays).
    With `deadline` (time.monotonic), the whole header must arrive by then (else Closed)."""
    return recv_obj(sock, max_header, deadline)


def _parse_layout(listed: Any) -> Layout:
    """The header's `arrays` entry as a layout; FrameError unless every entry is well formed."""
    if listed is None:
        return []
    if not isinstance(listed, list) or len(listed) > MAX_ARRAYS:
        raise FrameError(f"an array list that is not a list of at most {MAX_ARRAYS} entries")
    out: Layout = []
    total = 0
    for item in listed:
        if not (
            isinstance(item, list)
            and len(item) == 3
            and isinstance(item[0], str)
            and isinstance(item[1], str)
            and isinstance(item[2], list)
        ):
            raise FrameError("an array entry that is not [name, dtype, shape]")
        name, dtype_text, shape = item
        try:
            dtype = np.dtype(dtype_text)
        except (TypeError, ValueError):
            raise FrameError(
                f"array {name[:40]!r} with the unknown dtype {dtype_text[:20]!r}"
            ) from None
        if dtype.kind not in NUMERIC_KINDS or dtype.hasobject or dtype.subdtype is not None:
            raise FrameError(
                f"array {name[:40]!r} of dtype {dtype_text[:20]!r} (numeric dtypes only)"
            )
        if len(shape) > MAX_NDIM or not all(type(d) is int and 0 <= d < 1 << 40 for d in shape):
            raise FrameError(f"array {name[:40]!r} with the impossible shape {str(shape)[:60]}")
        nbytes = dtype.itemsize * math.prod(shape)
        total += nbytes
        if total > MAX_FRAME_BYTES:
            raise FrameError(f"arrays of more than {MAX_FRAME_BYTES:,} bytes in one frame")
        out.append((name, dtype, tuple(shape)))
    if len({n for n, _, _ in out}) != len(out):
        raise FrameError("two arrays of the same name")
    return out


def check_arrays(header: dict[str, Any], expected: Layout | None = None) -> Layout:
    """The frame's array layout, validated; with `expected`, it must be exactly that."""
    listed = header.get("arrays")
    if expected is not None and listed == _raw(expected):  # every batch: one list comparison
        return expected
    layout = _parse_layout(listed)
    if expected is not None and layout != expected:

        def show(lay: Layout) -> str:
            return ", ".join(f"{n} {d.str}{list(s)}" for n, d, s in lay)[:200] or "none"

        raise FrameError(f"arrays {show(layout)} where {show(expected)} were expected")
    return layout


def _raw(layout: Layout) -> list[list[Any]]:
    """A layout as a header lists it ([name, dtype.str, [dims]]), cached per layout object."""
    key = id(layout)
    hit = _RAW.get(key)
    if hit is None or hit[0] is not layout:
        hit = (layout, [[n, d.str, list(sh)] for n, d, sh in layout])
        if len(_RAW) > 64:
            _RAW.clear()
        _RAW[key] = hit
    return hit[1]


_RAW: dict[int, tuple[Layout, list[list[Any]]]] = {}


def recv_arrays(
    sock: socket.socket, layout: Layout, deadline: float | None = None
) -> dict[str, np.ndarray]:
    """Receive the arrays of a checked layout straight into new numpy arrays."""
    arrays: dict[str, np.ndarray] = {}
    for name, dtype, shape in layout:
        a = np.empty(shape, dtype=dtype)
        if a.nbytes:
            recv_exact_into(sock, a.data.cast("B"), deadline)
        arrays[name] = a
    return arrays


def recv_frame(
    sock: socket.socket, expected: Layout | None = None, deadline: float | None = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The next frame: (header, arrays); a frame carrying arrays must match `expected`
    (None: no arrays allowed at all). Raises Closed at EOF or past `deadline`, FrameError
    when malformed."""
    header = recv_header(sock, deadline=deadline)
    layout = check_arrays(header, expected if header.get("arrays") else None)
    if layout and expected is None:
        raise FrameError("arrays in a frame that carries none")
    header.pop("arrays", None)
    return header, recv_arrays(sock, layout, deadline)


def tune(sock: socket.socket) -> None:
    """A channel socket's options: batches' headers are small writes, a vanished host is noticed."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)


def printable(value: Any, limit: int = 40) -> str:
    """A peer's field as text safe for a terminal and a log: at most `limit` characters, every
    control character (an ESC starting a terminal escape sequence, a newline forging a log
    line) shown escaped as Python would write it (`\\x1b`, `\\n`)."""
    text = str(value)[:limit]
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# -- the secret and the proofs ---------------------------------------------------------------------
def new_secret() -> bytes:
    """A fresh job secret."""
    return secrets.token_bytes(32)


def env_secret() -> bytes | None:
    """The secret the launcher put in this task's environment (None when there is none)."""
    text = knobs.text(SECRET_ENV)
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        return None
    return secret if len(secret) >= 16 else None


def nonce() -> str:
    """A fresh challenge."""
    return secrets.token_hex(16)


def claim_text(hello: dict[str, Any]) -> str:
    """The part of a hello its proof covers (canonical JSON: who the task says it is)."""
    keys = ("type", "job", "rank", "procid", "node", "pid")
    return json.dumps([hello.get(k) for k in keys], separators=(",", ":"), default=str)


def _mac(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "|".join(parts).encode(), hashlib.sha256).hexdigest()


def hello_proof(secret: bytes, chief_nonce: str, task_nonce: str, claim: str) -> str:
    """What a task sends to prove it holds the secret (bound to both nonces and its claim)."""
    return _mac(secret, "hello", chief_nonce, task_nonce, claim)


def welcome_proof(secret: bytes, task_nonce: str, chief_nonce: str) -> str:
    """What the chief sends back to prove the same."""
    return _mac(secret, "welcome", task_nonce, chief_nonce)


def proof_ok(given: Any, expected: str) -> bool:
    """Constant-time comparison of a received proof."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())
