"""The store service: the one process that opens a SHARED store's database (docs/security.md).

Why a process. A file every member can write cannot keep roles: anyone with write access can
run SQL (make themselves admin, read the password hashes, rewrite the audit log) or truncate
it. So a shared store is owned by one OS user (its owner: the database 0600, its directory not
writable by the group), and the members reach it only through this service, which runs as the
owner, listens on `$CS2_HOME/store.sock` (0660, the directory's group), and learns each
caller's uid from the kernel (SO_PEERCRED).

What a caller may do. The service runs the caller's own SQL (system/ unchanged, through
system/store_remote.py) on a connection of its own for that caller, under a policy it enforces
with SQLite's authorizer and TEMP triggers of that connection, for the caller's account (the OS
login of the uid, or the account a password login through the service proved):

* no one reads `users.salt` / `users.hash` (they read as NULL); passwords are checked by the
  service itself (`login`), which audits a failure in the kernel's name of the caller;
* the audit log is append-only for everyone, and a row is written in the caller's own name
  (or the clock's, "system");
* a non-admin cannot add, remove or re-role accounts, and may change only their own password;
* a non-admin cannot change a system's state or mode (only complete a reboot whose time has
  come, as every reader does), nor the cluster description kept in the store;
* a non-admin writes only their own jobs, except to mark FAILED a job whose process is gone;
* no one attaches other files, changes the schema, runs PRAGMAs or manages transactions except
  through BEGIN / COMMIT / ROLLBACK messages; a statement runs at most MAX_STEPS VM steps and a
  transaction stays open at most IDLE_TX_S seconds between statements.
The queue's own tables (sched_*, slurm_jobs) are cooperative: members write them as their
launchers do (documented as outside this boundary).

Started on demand: the owner's first `Store.open` of a shared store starts it (a detached
process of the owner), and every later one finds it running.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from cs2sim.system.errors import StoreError
from cs2sim.system.store_remote import (
    PID_NAME,
    SHARED_MARK,
    SOCKET_NAME,
    Closed,
    ensure_running,
    peer_uid,
    recv_msg,
    send_msg,
)

__all__ = ["serve", "share", "is_shared", "PID_NAME"]
MAX_CLIENTS = 64
MAX_STEPS = 20_000  # progress-handler calls (x 1000 VM instructions) per statement: ~1-2 s
IDLE_TX_S = 5.0
PROTECTED = ("users", "audit", "systems", "meta", "schema_version", "jobs", "allocations")
_IF_NOT_EXISTS = re.compile(r"^\s*CREATE\s+(?:UNIQUE\s+)?(?:TABLE|INDEX)\s+IF\s+NOT\s+EXISTS\s+"
                            r"([A-Za-z_][A-Za-z0-9_]*)", re.I)
A = sqlite3  # the authorizer's action codes

# TEMP triggers of a member's connection: row-level rules the authorizer cannot express.
_DENY = "SELECT RAISE(ABORT, 'permission denied: {}')"
_NOT_ADMIN = "(SELECT role FROM temp.caller) != 'admin'"
_CALLER = "(SELECT name FROM temp.caller)"
TRIGGERS = (
    f"""CREATE TEMP TRIGGER guard_audit BEFORE INSERT ON main.audit
        WHEN NEW.user != {_CALLER} AND NEW.user != 'system'
        BEGIN {_DENY.format('audit rows are written in your own name')}; END""",
    f"""CREATE TEMP TRIGGER guard_users BEFORE UPDATE ON main.users
        WHEN {_NOT_ADMIN} AND (OLD.name != {_CALLER} OR NEW.name != OLD.name
                               OR NEW.role != OLD.role)
        BEGIN {_DENY.format('only an admin changes accounts; you may change your own password')};
        END""",
    f"""CREATE TEMP TRIGGER guard_systems BEFORE UPDATE ON main.systems
        WHEN {_NOT_ADMIN} AND NOT (OLD.state = 'ACTIVATING' AND NEW.state = 'ACTIVE'
            AND OLD.activating_until <= cs2sim_now() AND NEW.active_mode = OLD.configured_mode
            AND NEW.configured_mode = OLD.configured_mode AND NEW.name = OLD.name
            AND NEW.ip = OLD.ip AND NEW.in_cluster = OLD.in_cluster
            AND NEW.position = OLD.position AND NEW.activating_until IS NULL)
        BEGIN {_DENY.format('only an admin changes a system')}; END""",
    f"""CREATE TEMP TRIGGER guard_jobs_insert BEFORE INSERT ON main.jobs
        WHEN NEW.user != {_CALLER}
        BEGIN {_DENY.format('a job is registered in your own name')}; END""",
    f"""CREATE TEMP TRIGGER guard_jobs_update BEFORE UPDATE ON main.jobs
        WHEN {_NOT_ADMIN} AND OLD.user != {_CALLER} AND NOT (OLD.state = 'RUNNING'
            AND NEW.state = 'FAILED' AND NOT cs2sim_alive(OLD.pid, OLD.pid_start, OLD.host))
        BEGIN {_DENY.format('a job of another user')}; END""",
    f"""CREATE TEMP TRIGGER guard_jobs_delete BEFORE DELETE ON main.jobs WHEN {_NOT_ADMIN}
        BEGIN {_DENY.format('jobs are kept')}; END""",
    f"""CREATE TEMP TRIGGER guard_alloc_insert BEFORE INSERT ON main.allocations
        WHEN (SELECT user FROM main.jobs WHERE id = NEW.job_id) != {_CALLER}
        BEGIN {_DENY.format('a job of another user')}; END""",
    f"""CREATE TEMP TRIGGER guard_alloc_delete BEFORE DELETE ON main.allocations
        WHEN {_NOT_ADMIN} AND (SELECT user FROM main.jobs WHERE id = OLD.job_id) != {_CALLER}
            AND (SELECT state FROM main.jobs WHERE id = OLD.job_id) = 'RUNNING'
        BEGIN {_DENY.format('a running job of another user')}; END""",
)


def _alive(pid: Any, start: Any, host: Any) -> int:
    from cs2sim.system.jobs import process_alive, this_host

    if host != this_host() or not isinstance(pid, int):
        return 1  # only that host can tell
    return int(process_alive(pid, start if isinstance(start, str) else None))


def _login_of(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


class _Session:
    """One member's connection: their sqlite connection, identity and policy."""

    def __init__(self, sock: socket.socket, path: Path, uid: int) -> None:
        self.sock = sock
        self.uid = uid
        self.os_name = _login_of(uid)
        self.name = self.os_name
        self.role = "user"
        self.internal = True  # our own statements pass the authorizer
        self.steps = 0
        db = sqlite3.connect(path, timeout=10.0, isolation_level=None, check_same_thread=False)
        self.db = db
        db.execute("PRAGMA busy_timeout = 10000")
        db.execute("PRAGMA foreign_keys = ON")
        db.create_function("cs2sim_alive", 3, _alive)
        db.create_function("cs2sim_now", 0, time.time)
        db.execute("CREATE TEMP TABLE caller (name TEXT NOT NULL, role TEXT NOT NULL)")
        db.execute("INSERT INTO temp.caller VALUES (?, 'user')", (self.name,))
        for trigger in TRIGGERS:
            db.execute(trigger)
        if hasattr(db, "setlimit"):
            db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 22)
            db.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 1 << 20)
            db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        db.set_authorizer(self._authorize)
        db.set_progress_handler(self._progress, 1000)
        self._refresh()
        self.internal = False

    def _refresh(self) -> None:
        """Re-read the account's role (it may have changed since the last transaction)."""
        was, self.internal = self.internal, True
        try:
            row = self.db.execute("SELECT role FROM users WHERE name = ?", (self.name,)).fetchone()
            self.role = row[0] if row and row[0] in ("admin", "user") else "user"
            self.db.execute("UPDATE temp.caller SET name = ?, role = ?", (self.name, self.role))
        finally:
            self.internal = was

    def _progress(self) -> int:
        if self.internal:
            return 0
        self.steps += 1
        return int(self.steps > MAX_STEPS)

    def _authorize(self, action: int, a1: str | None, a2: str | None, db: str | None,
                   trigger: str | None) -> int:
        if self.internal or trigger is not None:
            return A.SQLITE_OK  # our statements, and our triggers' bodies
        if action in (A.SQLITE_SELECT, A.SQLITE_RECURSIVE):
            return A.SQLITE_OK
        if action == A.SQLITE_FUNCTION:
            return A.SQLITE_DENY if (a2 or "").lower() == "load_extension" else A.SQLITE_OK
        if action == A.SQLITE_READ:
            return A.SQLITE_IGNORE if a1 == "users" and a2 in ("salt", "hash") else A.SQLITE_OK
        if action not in (A.SQLITE_INSERT, A.SQLITE_UPDATE, A.SQLITE_DELETE):
            return A.SQLITE_DENY  # PRAGMA, ATTACH, schema changes, transaction statements
        table = a1 or ""
        if db == "temp" or table.startswith("sqlite_") or table == "schema_version":
            return A.SQLITE_DENY
        admin = self.role == "admin"
        if table == "audit":
            return A.SQLITE_OK if action == A.SQLITE_INSERT else A.SQLITE_DENY
        if table == "users":
            if admin or (action == A.SQLITE_UPDATE and a2 in ("salt", "hash")):
                return A.SQLITE_OK
            return A.SQLITE_DENY
        if table == "meta":
            return A.SQLITE_OK if admin else A.SQLITE_DENY
        if table == "systems":
            return A.SQLITE_OK if admin or action == A.SQLITE_UPDATE else A.SQLITE_DENY
        return A.SQLITE_OK  # jobs, allocations: the triggers; the queue's tables: cooperative

    # -- requests --------------------------------------------------------------------------------
    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "hello":
            return {"ok": True, "name": self.name, "role": self.role}
        if op == "begin":
            if self.db.in_transaction:
                return {"ok": False, "error": "a transaction is already open"}
            self._refresh()
            self.internal = True
            try:
                self.db.execute("BEGIN IMMEDIATE" if req.get("immediate") else "BEGIN")
            finally:
                self.internal = False
            return {"ok": True}
        if op in ("commit", "rollback"):
            self.internal = True
            try:
                if self.db.in_transaction:
                    self.db.execute("COMMIT" if op == "commit" else "ROLLBACK")
            finally:
                self.internal = False
            return {"ok": True}
        if op == "exec":
            return self._exec(req)
        if op == "login":
            return self._login(req)
        return {"ok": False, "error": f"unknown request {str(op)[:20]!r}"}

    def _exec(self, req: dict[str, Any]) -> dict[str, Any]:
        sql, params = req.get("sql"), req.get("params", [])
        if not isinstance(sql, str) or not isinstance(params, (list, dict)):
            return {"ok": False, "error": "a malformed statement"}
        m = _IF_NOT_EXISTS.match(sql)
        if m is not None:  # the queue's own `CREATE ... IF NOT EXISTS`: made when we started
            self.internal = True
            try:
                have = self.db.execute("SELECT count(*) FROM sqlite_master WHERE name = ?",
                                       (m.group(1),)).fetchone()[0]
            finally:
                self.internal = False
            if have:
                return {"ok": True, "rows": [], "rowcount": -1}
        self.steps = 0
        try:
            if req.get("many"):
                if not isinstance(params, list):
                    return {"ok": False, "error": "a malformed statement"}
                cur = self.db.executemany(sql, params)
            else:
                cur = self.db.execute(sql, params)
            rows = cur.fetchall()
        except sqlite3.DatabaseError as e:
            text = str(e)
            if "not authorized" in text or "permission denied" in text or "interrupted" in text:
                why = text.removeprefix("permission denied: ")
                if "not authorized" in text:
                    why = "your role may not read or change that part of the store this way"
                if "interrupted" in text:
                    why = "the statement ran too long"
                return {"ok": False, "kind": "denied", "error": (
                    f"permission denied: the store service refused this for {self.name} "
                    f"({self.role}): {why}.")}
            if "locked" in text or "busy" in text:
                return {"ok": False, "kind": "busy", "error": text}
            return {"ok": False, "error": text}
        except (ValueError, TypeError, OverflowError) as e:
            return {"ok": False, "error": f"a malformed statement ({e})"}
        names = [d[0] for d in cur.description] if cur.description else None
        return {"ok": True, "rows": rows, "rowcount": cur.rowcount, "lastrowid": cur.lastrowid,
                "description": names}

    def _login(self, req: dict[str, Any]) -> dict[str, Any]:
        """A password login, checked here (hashes never leave the service) and audited."""
        from cs2sim.system import audit
        from cs2sim.system.users import _verify

        name, password = req.get("name"), req.get("password")
        if not isinstance(name, str) or not isinstance(password, str) or len(name) > 64:
            return {"ok": False, "kind": "login", "error": "Login failed: a malformed login."}
        self.internal = True
        try:
            row = self.db.execute("SELECT role, salt, hash FROM users WHERE name = ?",
                                  (name,)).fetchone()
            if row and row[1] is not None and _verify(password, row[1], row[2]):
                self.name = name
                self._refresh()
                return {"ok": True, "role": self.role}
            reason = ("account has no password" if row and row[1] is None
                      else "wrong user name or password")
            try:  # audited under the account tried, by the kernel's user (as users.py does)
                self.db.execute("UPDATE temp.caller SET name = ?", (name,))
                self.db.execute("BEGIN IMMEDIATE")
                audit.record(self.db, user=name, command="login", outcome="denied",
                             detail=f"{reason} (by OS user {self.os_name})")
                self.db.execute("COMMIT")
            except sqlite3.Error:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            finally:
                self._refresh()
        finally:
            self.internal = False
        message = (f"Login failed: account {name} has no password (it is a local administrator); "
                   f"run `cs` as that OS user, or have an admin run `user passwd {name}`."
                   if row and row[1] is None else
                   f"Login failed for {name}: wrong user name or password; try again, or ask "
                   f"an admin to run `user passwd {name}`.")
        return {"ok": False, "kind": "login", "error": message}

    def run(self) -> None:
        try:
            while True:
                # an open transaction holds the write lock: a silent caller loses it
                self.sock.settimeout(IDLE_TX_S if self.db.in_transaction else None)
                try:
                    req = recv_msg(self.sock)
                except (TimeoutError, Closed, ValueError, OSError):
                    return
                send_msg(self.sock, self.handle(req))
        except Exception:  # noqa: BLE001 - one caller's failure never stops the service
            return
        finally:
            with contextlib.suppress(sqlite3.Error):
                self.internal = True
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            self.db.close()
            with contextlib.suppress(OSError):
                self.sock.close()


def _prepare(home: Path) -> None:
    """Create the tables members use but may not create, and sync the cluster description."""
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
    _prepare(home)
    sock_path = home / SOCKET_NAME
    tmp = home / f".{SOCKET_NAME}.{os.getpid()}"
    with contextlib.suppress(OSError):
        tmp.unlink()
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp))
    os.chown(tmp, -1, home.stat().st_gid)
    os.chmod(tmp, 0o660)  # the store's group may connect; the kernel says who they are
    os.replace(tmp, sock_path)
    sock_inode = sock_path.stat().st_ino
    srv.listen(MAX_CLIENTS)
    (home / PID_NAME).write_text(f"{os.getpid()}\n")
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    slots = threading.BoundedSemaphore(MAX_CLIENTS)
    srv.settimeout(5.0)
    inode = path.stat().st_ino
    while True:
        try:
            conn, _ = srv.accept()
        except TimeoutError:
            try:  # the store moved aside or replaced: this service is no longer its server
                if path.stat().st_ino != inode or sock_path.stat().st_ino != sock_inode:
                    return
            except OSError:
                return
            continue
        if not slots.acquire(blocking=False):
            conn.close()
            continue
        threading.Thread(target=_session, args=(conn, path, slots), daemon=True).start()


def _session(conn: socket.socket, path: Path, slots: threading.BoundedSemaphore) -> None:
    try:
        uid = peer_uid(conn)
        _Session(conn, path, uid).run()
    except Exception:  # noqa: BLE001 - a caller that cannot be served is just closed
        with contextlib.suppress(OSError):
            conn.close()
    finally:
        slots.release()


# -- the owner's side ---------------------------------------------------------------------------
def is_shared(home: Path) -> bool:
    """Whether the owner shared the store of `home` (`share` leaves the mark)."""
    return (Path(home) / SHARED_MARK).exists()


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
    ensure_running(home)
    gid = home.stat().st_gid
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)
