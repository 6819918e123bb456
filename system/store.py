"""The system store: one SQLite database (WAL) under $CS2_HOME that every process shares.

Why SQLite: shells, launchers and jobs change the machine concurrently. Every change is ONE
``BEGIN IMMEDIATE`` transaction that re-reads what it changes, so two processes racing cannot
both win, and a process killed with SIGKILL at any point loses nothing committed (WAL recovery
drops only the uncommitted tail). ``busy_timeout`` makes writers queue instead of failing.

Opening must be fast (the shell's prompt appears within 0.3 s): the common path is connect,
two pragmas and one SELECT. The schema is created on first use; its version is checked on every
open and older stores are upgraded through MIGRATIONS.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cs2sim.system import knobs
from cs2sim.system.errors import StoreAccessDenied, StoreError

if TYPE_CHECKING:
    from cs2sim.system.store_remote import RemoteConnection

__all__ = ["SCHEMA_VERSION", "DB_NAME", "MIGRATIONS", "default_home", "Store"]

DB_NAME = "cs2sim.db"
SCHEMA_VERSION = 3
BUSY_TIMEOUT_S = 10.0  # a writer waits this long for another's transaction before giving up

# The audit log is append-only: no code path changes or removes a row, and these triggers are
# the second wall (a REPLACE deletes the row it replaces without firing DELETE triggers, so an
# INSERT reusing an existing id is refused too).
AUDIT_TRIGGERS: tuple[str, ...] = (
    """CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS audit_no_reuse BEFORE INSERT ON audit
        WHEN NEW.id IS NOT NULL AND EXISTS (SELECT 1 FROM audit WHERE id = NEW.id)
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END""",
)

# Version 3 (version 1 lacked jobs.systems, version 2 the audit triggers). The CHECK constraints
# keep a hand-edited or buggy write from storing a state the state machine does not know.
SCHEMA: tuple[str, ...] = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE systems (
        name TEXT PRIMARY KEY,
        ip TEXT NOT NULL,
        model TEXT NOT NULL DEFAULT 'CS-2',
        position INTEGER NOT NULL DEFAULT 0,       -- order in the cluster description
        in_cluster INTEGER NOT NULL DEFAULT 1,     -- 0: removed from cluster.yaml, history kept
        state TEXT NOT NULL CHECK (state IN ('ACTIVE', 'STANDBY', 'ACTIVATING', 'FAULT')),
        configured_mode TEXT NOT NULL CHECK (configured_mode IN ('PIPELINED', 'WEIGHT_STREAMING')),
        active_mode TEXT NOT NULL CHECK (active_mode IN ('PIPELINED', 'WEIGHT_STREAMING')),
        state_since REAL NOT NULL,
        activating_until REAL,                     -- set only while ACTIVATING
        fault_reason TEXT                          -- set only while FAULT
    )""",
    """CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        user TEXT NOT NULL,
        system TEXT NOT NULL,                      -- '' for actions not tied to a system
        command TEXT NOT NULL,
        from_state TEXT NOT NULL,
        to_state TEXT NOT NULL,
        outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'denied', 'refused', 'error')),
        detail TEXT NOT NULL DEFAULT ''
    )""",
    """CREATE TABLE users (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL CHECK (role IN ('admin', 'user')),
        salt BLOB,                                 -- NULL: no password (the local administrator)
        hash TEXT,                                 -- 'scrypt$n$r$p$<hex>'; never the password
        created_at REAL NOT NULL
    )""",
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        system TEXT NOT NULL,
        user TEXT NOT NULL,
        mode TEXT NOT NULL CHECK (mode IN ('PIPELINED', 'WEIGHT_STREAMING')),
        command TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('RUNNING', 'COMPLETED', 'FAILED', 'CANCELLED')),
        pid INTEGER,
        pid_start TEXT,                            -- the process's start tick: detects pid reuse
        host TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        nodes TEXT NOT NULL DEFAULT '',            -- comma-separated node names
        systems TEXT NOT NULL DEFAULT ''           -- every CS-2 it holds, `system` first
    )""",
    *AUDIT_TRIGGERS,
    "CREATE INDEX jobs_by_state ON jobs (system, state)",
    "CREATE INDEX jobs_running ON jobs (state)",  # who holds a system: the RUNNING jobs, fast
    """CREATE TABLE allocations (
        node TEXT PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE
    )""",
)


def _v1_to_v2(db: sqlite3.Connection) -> None:
    """A job holds several CS-2 systems (weight streaming over num_csx systems)."""
    db.execute("ALTER TABLE jobs ADD COLUMN systems TEXT NOT NULL DEFAULT ''")
    db.execute("CREATE INDEX jobs_running ON jobs (state)")


def _v2_to_v3(db: sqlite3.Connection) -> None:
    """The audit log's triggers."""
    for statement in AUDIT_TRIGGERS:
        db.execute(statement)


# MIGRATIONS[v] upgrades a store from schema v to v + 1, inside the opening transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3}


def default_home() -> Path:
    """$CS2_HOME, or ~/.cs2sim."""
    home = knobs.text("CS2_HOME")
    return Path(home).expanduser() if home else Path.home() / ".cs2sim"


class Store:
    """An open system store; use `transaction()` for every change."""

    def __init__(
        self,
        home: Path,
        path: Path,
        conn: sqlite3.Connection | None,
        remote: RemoteConnection | None = None,
    ) -> None:
        self.home = home
        self.path = path
        self._conn = conn  # None only for a member (remote)
        self.remote = remote  # set when this is a member's view of a shared store
        self._lock = threading.RLock()  # one connection; the shell may render from a thread

    # 1. open / create ---------------------------------------------------------------------
    @classmethod
    def open(cls, home: Path | None = None, *, serve: bool = True) -> Store:
        """Open (creating on first use) the store under `home` (default: default_home()).

        A store owned by another OS user is reached through its owner's store service
        (system/store_service.py), never by opening its file; the owner of a shared store
        starts that service on demand (`serve`: False for the service itself).
        """
        home = Path(home).expanduser() if home is not None else default_home()
        path = home / DB_NAME
        _make_home(home)
        _refuse_links(home, path)
        owner = _owner_uid(home, path)
        if owner is not None and owner != os.getuid() and os.getuid() != 0:
            if not os.access(home, os.X_OK):  # a private store of someone else's: say so
                raise _access_problem(home, path) or _unreadable(path, "permission denied")
            return cls._open_remote(home, path, owner)
        try:
            if not path.exists():
                _create(home, path)
            elif serve and owner == os.getuid():
                _keep_private(home, path)
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as e:
            raise _access_problem(home, path) or _unreadable(path, e) from e
        store = cls(home, path, conn)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            # WAL + NORMAL: a commit survives any process crash (kill -9), and costs no fsync;
            # only a power cut can lose the last commits (never corrupt). Right for a simulator.
            conn.execute("PRAGMA synchronous = NORMAL")
            version = store._version()
            if version is None:  # an existing file without a store in it: never recreated
                raise _empty(path)
            if version != SCHEMA_VERSION:
                store._create_or_migrate()
        except StoreError:
            conn.close()
            raise
        except sqlite3.Error as e:
            conn.close()
            raise store._error(e) from e
        except UnicodeDecodeError as e:  # a damaged schema's bytes read as text
            conn.close()
            raise store._damaged() from e
        if serve and owner == os.getuid() and _shared(home):
            from cs2sim.system.store_remote import ensure_running

            ensure_running(home)
        return store

    @classmethod
    def _open_remote(cls, home: Path, path: Path, owner: int) -> Store:
        """A member's view of a shared store: a connection to its owner's store service."""
        from cs2sim.system.store_remote import connect

        remote = connect(home, path, owner)
        store = cls(home, path, None, remote=remote)
        version = remote.schema
        if version != SCHEMA_VERSION:
            remote.close()
            raise StoreError(
                f"the shared system store at {path} has schema {version}, this "
                f"cs2sim needs {SCHEMA_VERSION}; ask its owner to open it once "
                "with this cs2sim."
            )
        return store

    def _version(self) -> int | None:
        """The stored schema version, None for an empty file; StoreError if not ours or newer."""
        conn = self._local()
        try:
            row = conn.execute("SELECT version FROM schema_version").fetchone()
        except sqlite3.OperationalError as e:
            if "no such table" not in str(e):
                raise
            # one statement, one snapshot: another process may have created the schema since
            # the SELECT above, and then its tables are ours, not a foreign file's
            tables, ours = conn.execute(
                "SELECT count(*), coalesce(sum(name = 'schema_version'), 0) FROM sqlite_master"
            ).fetchone()
            if ours:
                return self._version()
            if tables:
                raise _unreadable(self.path, "it is an SQLite file but not a cs2sim store") from e
            return None
        if row is None:
            return None  # a creator died between CREATE and INSERT (cannot commit so; defensive)
        if row[0] > SCHEMA_VERSION:
            raise StoreError(
                f"The system store at {self.path} was written by a newer cs2sim "
                f"(schema {row[0]}); upgrade cs2sim or point CS2_HOME elsewhere."
            )
        return int(row[0])

    def _create_or_migrate(self) -> None:
        """Create the schema, or upgrade an older one; re-checked under the write lock."""
        conn = self._local()
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
            conn.execute("PRAGMA journal_mode = WAL")  # persistent: done once per file
        with self.transaction() as db:
            version = self._version()  # another process may have done it meanwhile
            if version is None:
                for statement in SCHEMA:
                    db.execute(statement)
                db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
                self._register_creator(db)
                return
            while version < SCHEMA_VERSION:
                MIGRATIONS[version](db)
                version += 1
            db.execute("UPDATE schema_version SET version = ?", (version,))

    @staticmethod
    def _register_creator(db: sqlite3.Connection) -> None:
        """The OS user who creates the store is its administrator, with no password (see users)."""
        from cs2sim.system.oslogin import login_name

        db.execute(
            "INSERT INTO users (name, role, salt, hash, created_at)"
            " VALUES (?, 'admin', NULL, NULL, ?)",
            (login_name(), time.time()),
        )

    # 2. transactions ----------------------------------------------------------------------
    def _local(self) -> sqlite3.Connection:
        """The database connection; a member's store has none (its owner's service runs the
        operations)."""
        if self.remote is not None or self._conn is None:
            raise StoreError(
                f"the system store at {self.path} is shared through its owner's store service, "
                "which runs the store's operations, not SQL; this cs2sim tried to read it "
                "directly (a defect: report it)."
            )
        return self._conn

    def limit_work(self, over: Callable[[], bool]) -> None:
        """Interrupt (and roll back) any statement once `over()` says so (the service's limit
        on one operation's work; checked every 10,000 SQLite VM steps)."""
        self._local().set_progress_handler(lambda: int(over()), 10_000)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on any exception); sqlite errors -> StoreError."""
        conn = self._local()
        with self._lock:
            if conn.in_transaction:
                raise RuntimeError("nested Store.transaction(): finish the outer one first")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise self._error(e) from e
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as e:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise self._error(e) from e
                if isinstance(e, UnicodeDecodeError):
                    raise self._damaged() from e
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read-only snapshot (BEGIN DEFERRED): several SELECTs that see one committed state."""
        conn = self._local()
        with self._lock:
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    if conn.in_transaction:
                        conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise self._error(e) from e
            except UnicodeDecodeError as e:  # a damaged page's bytes read as text
                raise self._damaged() from e

    def _damaged(self) -> StoreError:
        return _unreadable(self.path, "it is damaged (it holds text that is not UTF-8)")

    def close(self) -> None:
        """Close the connection (committed data is already on disk)."""
        with self._lock:
            if self.remote is not None:
                self.remote.close()
            elif self._conn is not None:
                self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _error(self, e: sqlite3.Error) -> StoreError:
        """Turn an sqlite error into the one-sentence StoreError the user sees."""
        text = str(e)
        if "interrupted" in text:
            return StoreError(
                f"an operation on the system store at {self.path} ran longer than the store "
                "service allows and was undone; ask for less (e.g. `audit show --last 100`), "
                "or try again."
            )
        if "append-only" in text:
            return StoreError(
                f"the audit log of the system store at {self.path} is "
                "append-only; nothing was changed."
            )
        if "CHECK constraint" in text or "NOT NULL constraint" in text:
            return StoreError(
                f"the system store at {self.path} refused a value its schema "
                f"does not allow ({text}); nothing was changed."
            )
        if "locked" in text or "busy" in text:
            return StoreError(
                f"The system store at {self.path} is busy (another cs2sim process held it for "
                f"more than {BUSY_TIMEOUT_S:g} s); try again."
            )
        problem = _access_problem(self.home, self.path)  # the OS's refusal, named exactly
        if problem is not None:
            return problem
        if "readonly" in text:  # readable but not writable: moving it aside is not the fix
            return StoreError(
                f"cannot write the system store at {self.path}: {text}; give your user write "
                f"access to it and to {self.home}, or set CS2_HOME to another directory."
            )
        return _unreadable(self.path, e)


def _refuse_links(home: Path, path: Path) -> None:
    """The store's files are opened only as regular files in CS2_HOME itself: a symbolic link
    there (dangling, or to another store) is refused, never followed or created through."""
    import stat

    for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
        p = home / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError:
            return  # named where it matters (_access_problem)
        if stat.S_ISLNK(st.st_mode):
            try:
                target = os.readlink(p)
            except OSError:
                target = "?"
            raise StoreError(
                f"the system store file {p} is a symbolic link (to {target}), which cs2sim "
                f"does not follow; replace it with the store file itself, or set CS2_HOME to "
                "the directory that holds the store."
            )
        if not stat.S_ISREG(st.st_mode):
            raise _unreadable(p, "it is not a regular file")


def _owner_uid(home: Path, path: Path) -> int | None:
    """The uid that owns the store (its file, else its directory); None if neither exists."""
    for p in (path, home):
        try:
            return p.stat().st_uid
        except OSError:
            continue
    return None


def _shared(home: Path) -> bool:
    """Whether the owner shared this store (then its service must run)."""
    from cs2sim.system.store_remote import SHARED_MARK

    return (home / SHARED_MARK).exists()


def _keep_private(home: Path, path: Path) -> None:
    """The owner's files of a store are the owner's alone: no one else writes the database or
    its directory (a member reaches a shared store through its service). Store files that an
    older cs2sim shared by group write are tightened here."""
    try:
        st = home.stat()
        if st.st_mode & 0o022 and st.st_uid == os.getuid():
            os.chmod(home, st.st_mode & ~0o022 & 0o7777)
        for name in (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm"):
            p = home / name
            try:
                mode = p.stat().st_mode
            except FileNotFoundError:
                continue
            if mode & 0o077:
                os.chmod(p, 0o600)
    except OSError:
        pass  # what cannot be tightened is reported where it matters (_access_problem)


def _create(home: Path, path: Path) -> None:
    """Create a complete store at `path` atomically: the schema is written to a temp file
    that is then linked into place, so an existing store file always holds a store (an empty
    or damaged one is an error, never silently replaced)."""
    import secrets

    tmp = home / f".{DB_NAME}.new-{os.getpid()}-{secrets.token_hex(4)}"
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))  # it holds hashes
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")  # persistent: done once per file
            conn.execute("BEGIN IMMEDIATE")
            for statement in SCHEMA:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            Store._register_creator(conn)
            conn.execute("COMMIT")
        finally:
            conn.close()  # checkpoints the WAL into the file and removes it
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: theirs is as good
    finally:
        for extra in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(f"{tmp}{extra}")


def _empty(path: Path) -> StoreError:
    try:
        size = f"{path.stat().st_size:,} bytes"
    except OSError:
        size = "unreadable"
    return StoreError(
        f"the system store at {path} exists but holds no store ({size}), so it was not "
        "recreated (that would silently drop its accounts and audit log); restore it from a "
        "backup, or move it aside to start a new store."
    )


def _make_home(home: Path) -> None:
    """Create $CS2_HOME (0700: the store holds password hashes); StoreError if it cannot be."""
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except PermissionError as e:
        raise StoreAccessDenied(
            f"cannot create the cs2sim home directory {home}: permission denied; "
            "set CS2_HOME to a directory you can write."
        ) from e
    except OSError as e:
        reason = "it is not a directory" if isinstance(e, FileExistsError) else e.strerror
        raise StoreError(
            f"cannot create the cs2sim home directory {home}: {reason}; "
            "set CS2_HOME to a directory you can write."
        ) from e


def _owner(p: Path) -> str:
    """`owned by NAME, mode 0700`, for a message about access (best effort)."""
    import pwd

    try:
        st = p.stat()
    except OSError:
        return "owner unknown"
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = f"uid {st.st_uid}"
    return f"owned by {owner}, mode {st.st_mode & 0o7777:04o}"


def _read_only_fs(p: Path) -> bool:
    try:
        return bool(os.statvfs(p).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _access_problem(home: Path, path: Path) -> StoreError | None:
    """What the OS refuses this (real) user about the store, as one sentence, or None when
    file modes are not the problem. Checked with os.access, i.e. for the real uid (who runs
    cs), after a failure, so the common path costs nothing. Exit 77 for a permission refusal;
    a read-only file system is not one (exit 1) but is named as what it is."""
    if _read_only_fs(home):
        return StoreError(
            f"cannot write the system store at {path}: {home} is on a read-only file system; "
            "set CS2_HOME to a directory on a writable file system."
        )
    if not os.access(home, os.X_OK):
        return StoreAccessDenied(
            f"permission denied: cannot open the system store in {home} ({_owner(home)}); "
            "run cs as that user, ask them for access, or set CS2_HOME to a directory of your own."
        )
    exists = path.exists()
    if exists and not os.access(path, os.R_OK):
        return StoreAccessDenied(
            f"permission denied: cannot read the system store at {path} ({_owner(path)}); "
            "run cs as that user, ask them for access, or set CS2_HOME to a directory of your own."
        )
    # A store is written in place and beside itself (WAL: cs2sim.db-wal, -shm), so both the
    # file and its directory must be writable; creating one needs the directory.
    if not os.access(home, os.W_OK):
        verb = "write" if exists else "create"
        return StoreAccessDenied(
            f"cannot {verb} the system store at {path}: its directory {home} is read-only "
            f"for you ({_owner(home)}); give your user write access to {home}, "
            "or set CS2_HOME to a directory you can write."
        )
    if exists and not os.access(path, os.W_OK):
        return StoreAccessDenied(
            f"cannot write the system store at {path}: the file is read-only for you "
            f"({_owner(path)}); give your user write access to it, "
            "or set CS2_HOME to a directory you can write."
        )
    return None


def _unreadable(path: Path, reason: object) -> StoreError:
    """The store cannot be used at all: say where it is and how to get past it."""
    if isinstance(reason, OSError) and reason.strerror:
        reason = reason.strerror
    return StoreError(
        f"cannot read the system store at {path}: {reason}; "
        "move it aside or set CS2_HOME to another directory."
    )
