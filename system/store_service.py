"""The store service: the one process that opens a SHARED store's database (docs/security.md).

Why a process. A file every member can write cannot keep roles: anyone with write access can
change any row or truncate it. So a shared store is owned by one OS user (its owner: the
database 0600, its directory not writable by the group), and the members reach it only through
this service, which runs as the owner and listens on `$CS2_HOME/store.sock` (0660, the
directory's group).

What a caller may ask. Only the operations of system/store_ops.py's table, as typed requests:
the console's and the launchers' own functions (show, standby, activate, register/finish/cancel
a job, the queue, the audit log, accounts). There is no SQL request, no transaction a caller
opens, and no lock held between two requests: each operation is one transaction inside the
service, on the service's own connection for that caller. The service decides who the caller
is from the kernel (SO_PEERCRED: uid and pid), never from anything the caller sends: the
account is the uid's OS login (its role from the store's accounts) unless a password login on
this connection proved another; a job's owner, process id and start time are the caller's own
(its pid from the kernel, its start time from /proc). Every permission is decided by the
operation itself, as for the owner (the same code), and audited.

Limits (system/request_server.py): connections per OS user and in all, request and answer
sizes, the time of one receive, one operation's SQLite work (`OP_S`), idle connections closed;
here, reads whose answer may be large (`HEAVY`) run at most `HEAVY_PER_UID` at once per OS user
and `HEAVY_TOTAL` in all (a caller over it waits up to `OP_S`, then is refused in one sentence).

The caller's process. SO_PEERCRED keeps the pid of the process that called connect() even
after that process has exited, when the number may name another process. So the service takes
a pidfd of the connecting process as the connection is accepted (SO_PEERPIDFD, Linux >= 6.5;
elsewhere its start tick and uid read then, the weaker fallback), and whenever an operation
records the caller's process (a job's launcher or chief) it checks, at that moment, that the
pidfd's process is still alive, so the pid, start tick and uid it records are that process's;
a request from a connection whose process has ended is refused. The service itself never
signals a caller's or a job's process: `jobs cancel` signals from the canceller's own process
(system/procfs.py `signal_recorded`).

Started on demand: the owner's first `Store.open` of a shared store starts it (a detached
process of the owner), and every later one finds it running.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cs2sim.system import procfs, store_ops
from cs2sim.system.errors import CsError, PermissionDenied, StoreError
from cs2sim.system.request_server import Limits, RequestServer
from cs2sim.system.store_remote import (
    PID_NAME,
    SHARED_MARK,
    SOCKET_NAME,
    ensure_running,
    running,
    service_pid,
)
from cs2sim.system.wire import PeerCred, unix_address

__all__ = [
    "serve",
    "share",
    "unshare",
    "stop",
    "is_shared",
    "load_operations",
    "PID_NAME",
    "LIMITS",
    "OP_S",
    "HEAVY",
]

LIMITS = Limits()
OP_S = 10.0  # one operation's SQLite work, at most (then it is interrupted and rolled back)
# reads whose answer grows with the store (the audit log, the queue's history): each may build
# up to the answer limit (4 MiB) and its encodings, so few run at once
HEAVY = frozenset({"audit.read", "audit.query", "queue.jobs", "queue.listing"})
HEAVY_PER_UID = 2
HEAVY_TOTAL = 4
_heavy_free = threading.Condition()
_heavy: dict[int, int] = {}  # uid -> heavy reads running
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux >= 6.5
TOKEN_S = 12 * 3600.0  # a password login's session lives this long
_tokens: dict[str, tuple[int, str, float]] = {}  # session token -> (uid, account, expiry)
_tokens_lock = threading.Lock()


def _login_of(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


def _refusal(text: str) -> dict[str, Any]:
    return store_ops.error_reply(
        store_ops.RequestError(f"the store service refused the request: {text}.")
    )


class _Session:
    """One connection: the caller as the kernel says, the account it acts as, its own store
    connection (operations of different callers run side by side, SQLite serialising writes)."""

    def __init__(self, home: Path, peer: PeerCred, sock: socket.socket | None = None) -> None:
        from cs2sim.system.store import Store

        self.home = home
        self.peer = peer
        self._pidfd, gone = _peer_pidfd(sock) if sock is not None else (None, False)
        # without a pidfd: the process as it was when its connection was taken (the fallback);
        # none at all if the kernel said the connecting process is already gone
        self._seen = procfs.identify(peer.pid) if self._pidfd is None and not gone else None
        self.os_name = _login_of(peer.uid)
        self.account = self.os_name
        self.via = "local"
        self.store = Store.open(home, serve=False)
        self._deadline = 0.0
        self.store.limit_work(self._over_time)

    def _over_time(self) -> bool:
        return time.monotonic() > self._deadline

    def refusal(self, text: str) -> dict[str, Any]:
        return _refusal(text)

    def close(self) -> None:
        self.store.close()
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = None

    def process(self) -> procfs.ProcessId:
        """The connecting process, verified now: its pid, start tick and uid as /proc says,
        read while its pidfd shows it alive (so not a process that reused its pid); refused
        once it has ended."""
        ident = procfs.identify(self.peer.pid)
        if self._pidfd is not None:
            alive = procfs.pidfd_alive(self._pidfd)
        else:
            alive = ident is not None and ident == self._seen
        if ident is None or not alive or ident.uid != self.peer.uid:
            raise store_ops.RequestError(
                f"the store service refused the request: the process that opened this "
                f"connection (pid {self.peer.pid}) has ended or changed its user, so it cannot "
                "be recorded as this request's; each process connects for itself: connect again."
            )
        return ident

    def identity(self) -> Any:
        """The account this connection acts as, its role as the store says now."""
        from cs2sim.system.users import Identity, Role, role_of

        role = role_of(self.store, self.account)
        return Identity(self.account, role if role is not None else Role.USER, self.via)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        from cs2sim.system.store import SCHEMA_VERSION

        self._deadline = time.monotonic() + OP_S
        name = request.get("op")
        if name == "hello":
            self._resume(request.get("resume"))
            me = self.identity()
            return {"ok": True, "name": me.name, "role": str(me.role), "schema": SCHEMA_VERSION}
        op = store_ops.OPERATIONS.get(name) if isinstance(name, str) else None
        if op is None:
            return _refusal(f"there is no request named {str(name)[:40]!r}")
        raw = request.get("args", {})
        if not isinstance(raw, dict):
            return _refusal(f"the arguments of {op.name} are not a mapping")
        try:
            args = {str(k): store_ops.decode(v) for k, v in raw.items()}
        except ValueError as e:
            return _refusal(f"an argument of {op.name} is malformed: {e}")
        me = self.identity()
        caller = store_ops.Caller(self.peer.uid, self.peer.pid, self.os_name, me, self.process)
        fills = {
            "identity": lambda: me,
            "user": lambda: me.name,
            "admin": lambda: str(me.role) == "admin",
            "pid": lambda: self.process().pid,
            "nodes": self._nodes,
            "none": lambda: None,
        }
        try:
            with _heavy_slot(self.peer.uid, op.name in HEAVY):
                result = store_ops.run(op, self.store, caller, args, fills)
                reply = {"ok": True, "result": store_ops.encode(result)}
        except CsError as e:
            return store_ops.error_reply(e)
        except Exception as e:  # noqa: BLE001 - said in one sentence, and logged for the owner
            sys.stderr.write(
                f"{time.strftime('%F %T')} {op.name} for {self.os_name}: {type(e).__name__}: {e}\n"
            )
            return store_ops.error_reply(
                StoreError(
                    f"the store service could not do {op.name} ({type(e).__name__}); its owner "
                    f"finds the reason in {self.home / 'store-service.log'}"
                )
            )
        if op.becomes and getattr(result, "via", None) == "password":
            self.account, self.via = result.name, "password"
            reply["session"] = self._new_token()
        return reply

    def _nodes(self) -> Any:
        from cs2sim.system.sched.queue import cluster_nodes

        return cluster_nodes(self.store)

    def _new_token(self) -> str:
        token = secrets.token_urlsafe(32)
        now = time.time()
        with _tokens_lock:
            for t, (_, _, until) in list(_tokens.items()):
                if until < now:
                    del _tokens[t]
            if len(_tokens) >= 4096:  # bounded: the oldest sessions go first
                del _tokens[min(_tokens, key=lambda t: _tokens[t][2])]
            _tokens[token] = (self.peer.uid, self.account, now + TOKEN_S)
        return token

    def _resume(self, token: object) -> None:
        """A reconnecting client's password login, if its token is this uid's and current."""
        if not isinstance(token, str):
            return
        with _tokens_lock:
            entry = _tokens.get(token)
        if entry is not None and entry[0] == self.peer.uid and entry[2] > time.time():
            self.account, self.via = entry[1], "password"


def _peer_pidfd(sock: socket.socket) -> tuple[int | None, bool]:
    """A pidfd of the process that connected `sock` (SO_PEERPIDFD), None where the kernel has
    none to give; and whether the kernel said that process is gone already (ESRCH)."""
    try:
        fd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError as e:
        return None, e.errno == errno.ESRCH
    return (fd, False) if isinstance(fd, int) and fd >= 0 else (None, False)


@contextlib.contextmanager
def _heavy_slot(uid: int, heavy: bool) -> Any:
    """Hold one of the caller's heavy-read places while a HEAVY read runs (waiting up to OP_S
    for one); RequestError in one sentence when none frees in time."""
    if not heavy:
        yield
        return
    deadline = time.monotonic() + OP_S
    with _heavy_free:
        while _heavy.get(uid, 0) >= HEAVY_PER_UID or sum(_heavy.values()) >= HEAVY_TOTAL:
            left = deadline - time.monotonic()
            if left <= 0:
                raise store_ops.RequestError(
                    f"the store service refused the request: {HEAVY_PER_UID} large reads of "
                    f"yours (or {HEAVY_TOTAL} in all) were already running for {OP_S:.0f} s; "
                    "ask for fewer rows (--last N), or wait for them to finish."
                )
            _heavy_free.wait(left)
        _heavy[uid] = _heavy.get(uid, 0) + 1
    try:
        yield
    finally:
        with _heavy_free:
            _heavy[uid] -= 1
            if not _heavy[uid]:
                del _heavy[uid]
            _heavy_free.notify_all()


def load_operations() -> dict[str, store_ops.Operation]:
    """Import every module that declares operations (and the values they return): the table."""
    import importlib

    for module in ("users", "audit", "systems", "machine", "sched.queue", "sched.slurm_records"):
        importlib.import_module(f"cs2sim.system.{module}")
    return store_ops.OPERATIONS


def _prepare(home: Path) -> None:
    """Create the queue's tables, and sync the cluster description, before serving."""
    from cs2sim.system.machine import list_systems
    from cs2sim.system.sched.queue import SCHEMA as QUEUE_SCHEMA
    from cs2sim.system.sched.slurm import SCHEMA as SLURM_SCHEMA
    from cs2sim.system.store import Store

    with Store.open(home, serve=False) as store:
        with store.transaction() as db:
            for statement in (*QUEUE_SCHEMA, *SLURM_SCHEMA):
                db.execute(statement)
        list_systems(store)


def serve(home: Path) -> None:
    """Serve the store of `home` until it is gone or SIGTERM; the caller is its owner."""
    from cs2sim.system.store import DB_NAME

    home = Path(home)
    path = home / DB_NAME
    if path.stat().st_uid != os.getuid():
        raise StoreError(f"only the owner of {path} can serve it")
    load_operations()
    _prepare(home)
    sock_path = home / SOCKET_NAME
    tmp = home / f".{SOCKET_NAME}.{os.getpid()}"
    with contextlib.suppress(OSError):
        tmp.unlink()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with unix_address(tmp) as address:  # a deep $CS2_HOME is past sun_path's 107 bytes
        srv.bind(address)
    os.chown(tmp, -1, home.stat().st_gid)
    os.chmod(tmp, 0o660)  # the store's group may connect; the kernel says who they are
    os.replace(tmp, sock_path)
    sock_inode = sock_path.stat().st_ino
    srv.listen(128)
    pid_tmp = home / f".{PID_NAME}.{os.getpid()}"
    pid_tmp.write_text(f"{os.getpid()}\n")
    os.replace(pid_tmp, home / PID_NAME)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    inode = path.stat().st_ino

    def still_ours() -> bool:  # the store moved aside or replaced: no longer its server
        try:
            return path.stat().st_ino == inode and sock_path.stat().st_ino == sock_inode
        except OSError:
            return False

    RequestServer(
        srv, lambda sock, peer: _Session(home, peer, sock), _refusal, LIMITS, still_ours
    ).serve_forever()


# -- the owner's side ---------------------------------------------------------------------------
def is_shared(home: Path) -> bool:
    """Whether the owner shared the store of `home` (`share` leaves the mark)."""
    return (Path(home) / SHARED_MARK).exists()


def _owner_only(home: Path, what: str) -> None:
    from cs2sim.system.store import DB_NAME

    try:
        owner = (Path(home) / DB_NAME).stat().st_uid
    except OSError:
        owner = Path(home).stat().st_uid
    if owner != os.getuid():
        raise PermissionDenied(
            f"Permission denied: only the store's owner {_login_of(owner)} may {what} the "
            f"store service of {home}; ask them to."
        )


def stop(home: Path) -> bool:
    """Stop the store service of `home` (its owner only); False if none was running. The
    kernel names the process serving the socket, so a stale pid file never aims the signal."""
    home = Path(home)
    _owner_only(home, "stop")
    pid = service_pid(home)
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and service_pid(home) == pid:
        time.sleep(0.02)
    if service_pid(home) == pid:
        raise StoreError(
            f"the store service of {home} (process {pid}) did not stop within "
            f"5 s; end it with `kill {pid}`."
        )
    return True


def unshare(home: Path) -> None:
    """Make the store of `home` private again (its owner only): the service stopped, the mark
    and socket removed, the directory 0700."""
    home = Path(home)
    _owner_only(home, "unshare")
    with contextlib.suppress(FileNotFoundError):
        (home / SHARED_MARK).unlink()  # first: an owner's `cs` meanwhile does not restart it
    stop(home)
    with contextlib.suppress(FileNotFoundError):
        (home / SOCKET_NAME).unlink()
    os.chmod(home, 0o700)
    _share_server_dir(home, 0o700)


def _share_server_dir(home: Path, mode: int) -> None:
    """The cluster server's directory (`<home>/wsjob`, its socket inside) follows the store's
    sharing: the members reach the server's socket (the server tells who they are from the
    kernel); its files inside stay the server's own (0600)."""
    import stat

    path = home / "wsjob"
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # home is the owner's alone: no race
            return
    except FileNotFoundError:
        return
    os.chown(path, -1, home.stat().st_gid)
    os.chmod(path, mode)


def share(home: Path, group: str | int | None = None) -> str:
    """Share the store of `home` with the OS group `group` (default: the directory's): the
    database files 0600, the directory 0750 in that group, the service started; its group."""
    import grp

    from cs2sim.system.store import DB_NAME

    home = Path(home)
    if group is not None:
        gid = group if isinstance(group, int) else grp.getgrnam(group).gr_gid
        os.chown(home, -1, gid)
    os.chmod(home, 0o750)
    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(home / name, 0o600)
    (home / SHARED_MARK).write_text("shared through the store service (cs-store share)\n")
    _share_server_dir(home, 0o750)
    ensure_running(home)
    gid = home.stat().st_gid
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


__all__ += ["running"]
