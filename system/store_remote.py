"""A shared store seen from a member: the store service's Unix socket, used like a connection.

When several OS users share one store, only its owner may open the database file (0600 in a
directory the members cannot write); every other user talks to the owner's store service
(system/store_service.py) over `$CS2_HOME/store.sock`. `RemoteConnection` offers the part of
sqlite3.Connection the system/ code uses (execute, executemany, the cursor's fetchone,
fetchall, rowcount, lastrowid, description, and the BEGIN / COMMIT / ROLLBACK statements of
Store.transaction and Store.read), so every function of system/ runs unchanged on a shared
store; the service decides what each caller may do, knowing who it is from the kernel
(SO_PEERCRED), never from anything the client says.

Messages: a 4-byte length and a JSON object (bytes values as {"$b": base64}), at most
MAX_MESSAGE bytes either way.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
import struct
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cs2sim.system.errors import AuthenticationFailed, StoreAccessDenied, StoreError

__all__ = ["SOCKET_NAME", "PID_NAME", "SHARED_MARK", "running", "ensure_running", "MAX_MESSAGE",
           "send_msg", "recv_msg", "peer_uid", "RemoteConnection", "connect", "member_log_root"]

SOCKET_NAME = "store.sock"
PID_NAME = "store.pid"  # the running service's pid (cs-store stop)
SHARED_MARK = "store.shared"  # written by `cs-store share`: the owner's opens start the service
START_WAIT_S = 10.0
MAX_MESSAGE = 4 * 1024 * 1024  # a `jobs show --all` of 200 rows is ~100 KiB
_LEN = struct.Struct("!I")


class Closed(Exception):
    """The other side hung up."""


def _enc(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"$b": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, (list, tuple)):
        return [_enc(x) for x in v]
    if isinstance(v, dict):
        return {k: _enc(x) for k, x in v.items()}
    return v


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"$b"} and isinstance(v["$b"], str):
            return base64.b64decode(v["$b"])
        return {k: _dec(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_dec(x) for x in v]
    return v


def send_msg(sock: socket.socket, obj: dict[str, Any]) -> None:
    data = json.dumps(_enc(obj), separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a store message of {len(data):,} bytes (at most {MAX_MESSAGE:,})")
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise Closed()
        got += k
    return bytes(buf)


def recv_msg(sock: socket.socket) -> dict[str, Any]:
    """The next message (bounded before allocation); ValueError when malformed."""
    n = _LEN.unpack(_recv_exact(sock, _LEN.size))[0]
    if n > MAX_MESSAGE:
        raise ValueError(f"a store message of {n:,} bytes (at most {MAX_MESSAGE:,})")
    try:
        obj = json.loads(_recv_exact(sock, n))
    except RecursionError:
        raise ValueError("a store message nested too deeply") from None
    if not isinstance(obj, dict):
        raise ValueError("a store message that is not an object")
    return _dec(obj)  # type: ignore[no-any-return]


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket, from the kernel."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


class RemoteCursor:
    """The result of one statement run by the service."""

    def __init__(self, reply: dict[str, Any]) -> None:
        self._rows = [tuple(r) for r in reply.get("rows", [])]
        self.rowcount = int(reply.get("rowcount", -1))
        self.lastrowid = reply.get("lastrowid")
        names = reply.get("description")
        self.description = tuple((n, None, None, None, None, None, None) for n in names) \
            if names else None

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows.pop(0) if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        rows, self._rows = self._rows, []
        return rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        while self._rows:
            yield self._rows.pop(0)

    def close(self) -> None:
        self._rows = []


class RemoteConnection:
    """A connection to the store service, used by system.store.Store in place of sqlite3's."""

    def __init__(self, sock: socket.socket, path: Path) -> None:
        self._sock = sock
        self._path = path
        self.in_transaction = False

    def _call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            send_msg(self._sock, request)
            reply = recv_msg(self._sock)
        except (OSError, Closed, ValueError) as e:
            why = str(e) or "it hung up"
            raise StoreError(f"lost the connection to the store service of {self._path} ({why}); "
                             "try again, or ask the store's owner whether its service is "
                             "running.") from None
        if reply.get("ok"):
            return reply
        text = str(reply.get("error", "refused"))
        kind = reply.get("kind")
        if kind == "denied":
            raise StoreAccessDenied(text)
        if kind == "login":
            raise AuthenticationFailed(text)
        if kind == "busy":
            raise sqlite3.OperationalError("database is locked")
        raise sqlite3.DatabaseError(text)

    def execute(self, sql: str, params: Iterable[Any] | dict[str, Any] = ()) -> RemoteCursor:
        word = sql.strip().split(None, 1)[0].upper() if sql.strip() else ""
        if word in ("BEGIN", "COMMIT", "ROLLBACK", "END"):  # Store's transaction statements
            op = {"BEGIN": "begin", "COMMIT": "commit", "END": "commit"}.get(word, "rollback")
            self._call({"op": op, "immediate": "IMMEDIATE" in sql.upper()})
            self.in_transaction = op == "begin"
            return RemoteCursor({})
        if word == "PRAGMA":  # the service owns the connection's settings
            return RemoteCursor({"rows": []})
        params = dict(params) if isinstance(params, dict) else list(params)
        return RemoteCursor(self._call({"op": "exec", "sql": sql, "params": params}))

    def executemany(self, sql: str, seq: Iterable[Iterable[Any]]) -> RemoteCursor:
        return RemoteCursor(self._call({"op": "exec", "sql": sql, "many": True,
                                        "params": [list(p) for p in seq]}))

    def login(self, name: str, password: str) -> str:
        """Log this connection in as account NAME (checked and audited by the service); role."""
        return str(self._call({"op": "login", "name": name, "password": password})["role"])

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def connect(home: Path, path: Path, owner_uid: int) -> RemoteConnection:
    """Connect to the store service of `home`; StoreError (one sentence) when there is none or
    the process answering is not the store's owner."""
    import pwd

    try:
        owner = pwd.getpwuid(owner_uid).pw_name
    except KeyError:
        owner = f"uid {owner_uid}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30.0)
    try:
        sock.connect(str(home / SOCKET_NAME))
    except PermissionError:
        sock.close()
        raise StoreAccessDenied(
            f"permission denied: the system store at {path} belongs to {owner}, and its store "
            f"service does not admit you; ask {owner} to add you to the store's group, or set "
            "CS2_HOME to a directory of your own.") from None
    except OSError:
        sock.close()
        raise StoreAccessDenied(
            f"the system store at {path} belongs to {owner} and is shared through its store "
            f"service, which is not running; ask {owner} to run `cs-store share` (it "
            "starts the service), or set CS2_HOME to a directory of your own.") from None
    if peer_uid(sock) != owner_uid:  # someone else bound the socket: never talk to them
        sock.close()
        raise StoreAccessDenied(f"the process serving {home / SOCKET_NAME} is not the store's "
                                f"owner {owner}; do not use this store, and tell {owner}.")
    conn = RemoteConnection(sock, path)
    hello = conn._call({"op": "hello"})
    conn.identity = (str(hello.get("name")), str(hello.get("role")))  # type: ignore[attr-defined]
    return conn


def member_log_root() -> Path:
    """Where a member's launcher writes its task logs (the shared home is the owner's)."""
    import tempfile

    root = Path(tempfile.gettempdir()) / f"cs2sim-{os.getuid()}" / "slurm"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def running(home: Path) -> bool:
    """Whether a store service answers on `home`'s socket (as this owner's process)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(str(Path(home) / SOCKET_NAME))
        return peer_uid(s) == os.getuid()
    except OSError:
        return False
    finally:
        s.close()


def ensure_running(home: Path) -> None:
    """Start the store service of a shared store if none answers (the owner's processes)."""
    home = Path(home)
    if running(home):
        return
    _spawn_detached([sys.executable, "-m", "cs2sim.scripts.store_service", "serve", str(home)],
                    home / "store-service.log")
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if running(home):
            return
        time.sleep(0.02)
    raise StoreError(f"the store service of {home} did not start within {START_WAIT_S:g} s; "
                     f"see {home / 'store-service.log'}.")


def _spawn_detached(argv: list[str], log: Path) -> None:
    """Start `argv` as a daemon (double fork, own session, no terminal): it outlives us and is
    never our zombie."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                os.dup2(null, 0)
                os.dup2(out, 1)
                os.dup2(out, 2)
                os.closerange(3, 1024)
                os.execv(argv[0], argv)
        finally:
            os._exit(0)
    os.close(out)
    os.close(null)
    os.waitpid(pid, 0)
