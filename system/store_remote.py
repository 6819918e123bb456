"""A shared store seen from a member: typed requests to its owner's store service.

When several OS users share one store, only its owner opens the database file (0600 in a
directory the members cannot write); every other user's `Store` has no database connection at
all, only a `RemoteConnection` to the owner's store service (system/store_service.py) over
`$CS2_HOME/store.sock`. The functions of system/ declared as operations (system/store_ops.py)
send their request through it; the service decides who the caller is from the kernel, never from
anything sent.

Framing: system/wire.py. A connection the service closed while it was idle (or to make room
for another of the same user's) is reopened on the next request; a password login survives
that through the session token the service gave it (never the password).
"""

from __future__ import annotations

import os
import select
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cs2sim.system import store_ops
from cs2sim.system.errors import StoreAccessDenied, StoreError
from cs2sim.system.wire import (
    Closed,
    FrameError,
    peer_cred,
    recv_obj,
    send_obj,
    unix_address,
)

__all__ = [
    "SOCKET_NAME",
    "PID_NAME",
    "SHARED_MARK",
    "MAX_MESSAGE",
    "running",
    "service_pid",
    "ensure_running",
    "RemoteConnection",
    "connect",
]

SOCKET_NAME = "store.sock"
PID_NAME = "store.pid"  # the running service's pid (cs-store stop)
SHARED_MARK = "store.shared"  # written by `cs-store share`: the owner's opens start the service
START_WAIT_S = 10.0
MAX_MESSAGE = 4 * 1024 * 1024 + 64 * 1024  # the service's largest answer, and its framing
CALL_S = 60.0  # an answer takes at most this long (the service's own limits are shorter)


def _owner_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


class RemoteConnection:
    """A member's connection to the store service; `call` runs one operation."""

    def __init__(self, home: Path, path: Path, owner_uid: int) -> None:
        self._home = home
        self._path = path
        self._owner = owner_uid
        self._lock = threading.Lock()  # one request at a time on the socket
        self._sock: socket.socket | None = None
        self._opened_by = 0  # the process that connected: the service knows it as the caller
        self._token: str | None = None  # a password login's session, to resume it
        self.identity: tuple[str, str] = ("", "")
        self.schema: int | None = None
        self._open()

    # -- the socket -----------------------------------------------------------------------------
    def _open(self) -> None:
        owner = _owner_name(self._owner)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(CALL_S)
        try:
            with unix_address(self._home / SOCKET_NAME) as address:
                sock.connect(address)
        except PermissionError:
            sock.close()
            raise StoreAccessDenied(
                f"permission denied: the system store at {self._path} belongs to {owner}, and "
                f"its store service does not admit you; ask {owner} to add you to the store's "
                "group, or set CS2_HOME to a directory of your own."
            ) from None
        except OSError:
            sock.close()
            raise StoreAccessDenied(
                f"the system store at {self._path} belongs to {owner} and is shared through its "
                f"store service, which is not running; ask {owner} to run `cs-store share` (it "
                "starts the service), or set CS2_HOME to a directory of your own."
            ) from None
        if peer_cred(sock).uid != self._owner:  # someone else bound the socket: never talk
            sock.close()
            raise StoreAccessDenied(
                f"the process serving {self._home / SOCKET_NAME} is not the store's owner "
                f"{owner}; do not use this store, and tell {owner}."
            )
        self._sock = sock
        self._opened_by = os.getpid()
        hello: dict[str, Any] = {"op": "hello"}
        if self._token is not None:
            hello["resume"] = self._token
        reply = self._exchange(hello)
        if not reply.get("ok"):
            self.close()
            store_ops.raise_error(reply, self._lost("it refused the connection"))
        self.identity = (str(reply.get("name")), str(reply.get("role")))
        schema = reply.get("schema")
        self.schema = schema if isinstance(schema, int) else None

    def _lost(self, why: str) -> str:
        return (
            f"lost the connection to the store service of {self._path} ({why}); try "
            "again, or ask the store's owner whether its service is running."
        )

    def _exchange(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self._sock is not None
        try:
            try:
                send_obj(self._sock, request)
            except BrokenPipeError:  # refused on connect: its one sentence is waiting to be read
                return recv_obj(self._sock, MAX_MESSAGE, time.monotonic() + 1.0)
            return recv_obj(self._sock, MAX_MESSAGE, time.monotonic() + CALL_S)
        except (OSError, Closed, FrameError, ValueError) as e:
            self.close()
            raise StoreError(self._lost(str(e) or "it hung up")) from None

    def _closed_by_peer(self) -> bool:
        """Whether the service closed this connection while it was idle (EOF waiting)."""
        if self._sock is None:
            return True
        try:
            ready, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(ready)

    # -- operations -----------------------------------------------------------------------------
    def call(self, name: str, args: dict[str, Any]) -> Any:
        """Run operation `name` in the service; its result, or the CsError it raised."""
        request = {"op": name, "args": {k: store_ops.encode(v) for k, v in args.items()}}
        with self._lock:
            if self._opened_by != os.getpid():
                # a forked child: the service knows the socket's caller as the process that
                # connected (it records and checks that one), so each process connects itself
                self._drop_inherited()
                self._open()
            elif self._closed_by_peer():
                self.close()
                self._open()
            reply = self._exchange(request)
        if not reply.get("ok"):
            store_ops.raise_error(reply, self._lost("an answer without a reason"))
        try:
            result = store_ops.decode(reply.get("result"))
        except ValueError as e:
            raise StoreError(self._lost(f"an answer this cs2sim cannot read: {e}")) from None
        token = reply.get("session")
        if isinstance(token, str):  # a password login: this connection now acts as it
            self._token = token
            self.identity = (str(getattr(result, "name", "")), str(getattr(result, "role", "")))
        return result

    def _drop_inherited(self) -> None:
        """Forget the parent's socket in a forked child: this copy of the descriptor is closed
        (never shut down), so the parent's connection goes on."""
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None


def connect(home: Path, path: Path, owner_uid: int) -> RemoteConnection:
    """Connect to the store service of `home`; StoreError (one sentence) when there is none or
    the process answering is not the store's owner."""
    return RemoteConnection(home, path, owner_uid)


def service_pid(home: Path) -> int | None:
    """The pid of the process answering on `home`'s socket as this user, or None (the kernel
    says who answers; a pid file can be stale)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        with unix_address(Path(home) / SOCKET_NAME) as address:
            s.connect(address)
        cred = peer_cred(s)
        return cred.pid if cred.uid == os.getuid() else None
    except OSError:
        return None
    finally:
        s.close()


def running(home: Path) -> bool:
    """Whether a store service answers on `home`'s socket (as this owner's process)."""
    return service_pid(home) is not None


def ensure_running(home: Path) -> None:
    """Start the store service of a shared store if none answers (the owner's processes)."""
    home = Path(home)
    if running(home):
        return
    _spawn_detached(
        [sys.executable, "-m", "cs2sim.scripts.store_service", "serve", str(home)],
        home / "store-service.log",
    )
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if running(home):
            return
        time.sleep(0.02)
    raise StoreError(
        f"the store service of {home} did not start within {START_WAIT_S:g} s; "
        f"see {home / 'store-service.log'}."
    )


def _spawn_detached(argv: list[str], log: Path) -> None:
    """Start `argv` as a daemon (double fork, own session, no terminal): it outlives us and is
    never our zombie."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
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
