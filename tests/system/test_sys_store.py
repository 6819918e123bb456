"""Store: creation, WAL, schema version and migrations, unreadable stores, transactions."""

from __future__ import annotations

import sqlite3
import stat

import pytest

from cs2sim.system import store as store_module
from cs2sim.system.errors import StoreError
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import DB_NAME, SCHEMA_VERSION, Store, default_home


def test_default_home(monkeypatch, tmp_path):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "x"))
    assert default_home() == tmp_path / "x"
    monkeypatch.delenv("CS2_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_home() == tmp_path / ".cs2sim"


def test_fresh_store_layout(store, cs2_home):
    assert store.path == cs2_home / DB_NAME and store.home == cs2_home
    assert stat.S_IMODE(cs2_home.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600  # it holds password hashes
    with store.read() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert db.execute("PRAGMA busy_timeout").fetchone()[0] >= 10_000
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"systems", "audit", "users", "jobs", "allocations", "schema_version"} <= tables


def test_reopen_keeps_state(store, admin):
    Machine(store).standby(admin)
    store.close()
    with Store.open() as again:
        assert Machine(again).status().state is State.STANDBY


def test_garbage_file_is_a_store_error_with_the_path(cs2_home):
    cs2_home.mkdir()
    (cs2_home / DB_NAME).write_bytes(b"this is not a database, just bytes " * 200)
    with pytest.raises(StoreError) as err:
        Store.open()
    message = str(err.value)
    assert message.startswith(f"cannot read the system store at {cs2_home / DB_NAME}: ")
    assert message.endswith("; move it aside or set CS2_HOME to another directory.")


def test_truncated_store_is_a_store_error(store):
    path = store.path
    store.close()
    for extra in ("-wal", "-shm"):
        (path.parent / (path.name + extra)).unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes(data[:100] + b"\xff" * (len(data) - 100))  # header kept, pages destroyed
    with pytest.raises(StoreError, match="cannot read the system store at"):
        s = Store.open()
        Machine(s).status()


def test_unopenable_path_is_a_store_error(cs2_home):
    (cs2_home / DB_NAME).mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(StoreError, match=f"cannot read the system store at {cs2_home / DB_NAME}"):
        Store.open()


def test_home_that_is_a_file_is_a_store_error(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path / "plain")
    assert str(err.value) == (
        f"cannot create the cs2sim home directory {tmp_path / 'plain'}: it is not a directory; "
        "set CS2_HOME to a directory you can write."
    )


def test_home_that_cannot_be_created_says_so(tmp_path):
    (tmp_path / "plain").write_text("x")
    home = tmp_path / "plain" / "cs2home"  # works as root too, unlike a chmod-ed directory
    with pytest.raises(StoreError, match=f"cannot create the cs2sim home directory {home}: "):
        Store.open(home)


def test_a_read_only_store_says_write_access_not_move_it_aside(store):
    e = store._error(sqlite3.OperationalError("attempt to write a readonly database"))
    assert str(e).startswith(f"cannot write the system store at {store.path}: ")
    assert "move it aside" not in str(e) and "write access" in str(e)


def test_foreign_sqlite_file_is_refused(cs2_home):
    cs2_home.mkdir()
    with sqlite3.connect(cs2_home / DB_NAME) as db:
        db.execute("CREATE TABLE photos (id INTEGER)")
    with pytest.raises(StoreError, match="not a cs2sim store"):
        Store.open()


def test_newer_schema_is_refused(store):
    with store.transaction() as db:
        db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 7,))
    store.close()
    with pytest.raises(StoreError) as err:
        Store.open()
    assert str(err.value) == (
        f"The system store at {store.path} was written by a newer cs2sim "
        f"(schema {SCHEMA_VERSION + 7}); upgrade cs2sim or point CS2_HOME elsewhere."
    )


def test_older_schema_is_migrated(store, monkeypatch):
    store.close()
    calls = []

    def add_column(db):
        calls.append(1)
        db.execute("ALTER TABLE systems ADD COLUMN note TEXT")

    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    monkeypatch.setattr(store_module, "MIGRATIONS", {SCHEMA_VERSION: add_column})
    with Store.open() as s:
        with s.read() as db:
            assert db.execute("SELECT version FROM schema_version").fetchone()[0] == (
                SCHEMA_VERSION + 1
            )
            db.execute("SELECT note FROM systems")
    with Store.open():
        pass
    assert calls == [1]  # once, not on every open


def test_transaction_rolls_back_on_error(store):
    with pytest.raises(ZeroDivisionError):
        with store.transaction() as db:
            db.execute("INSERT INTO meta VALUES ('k', 'v')")
            raise ZeroDivisionError
    with store.read() as db:
        assert db.execute("SELECT count(*) FROM meta WHERE key = 'k'").fetchone()[0] == 0


def test_sqlite_errors_become_store_errors(store):
    with pytest.raises(StoreError):
        with store.transaction() as db:
            db.execute("INSERT INTO systems (name) VALUES ('broken')")  # violates NOT NULL


def test_a_held_write_lock_is_a_busy_store_error(store, monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.05)
    other = Store.open()
    holder = sqlite3.connect(store.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match=r"is busy .* try again\."):
            with other.transaction():
                pass
        with other.read() as db:  # WAL: readers are not blocked by the writer
            db.execute("SELECT count(*) FROM systems").fetchone()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        other.close()


def test_creator_is_registered_as_admin(store, admin):
    with store.read() as db:
        assert db.execute("SELECT name, role, salt, hash FROM users").fetchall() == [
            (admin.name, "admin", None, None)
        ]


def test_open_does_not_import_heavy_modules(store):
    """The shell's prompt budget: once the store knows the cluster, yaml is not even imported."""
    import subprocess
    import sys

    Machine(store)  # first use: reads the cluster YAML and caches its systems
    code = (
        "import sys; from cs2sim.system.store import Store; "
        "from cs2sim.system.machine import Machine;"
        "from cs2sim.system.users import local_identity; s = Store.open(); m = Machine(s);"
        "m.status(); local_identity(s);"
        "print(sorted(m for m in ('yaml', 'numpy', 'rich', 'prompt_toolkit') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_a_store_created_between_two_reads_is_ours_not_foreign(tmp_path):
    """Racing first opens: the schema_version read misses the table, another process commits
    the schema, then sqlite_master shows tables. That is our store, not a foreign file (a CI
    flake of test_racing_processes_leave_a_consistent_store)."""
    Store.open(tmp_path).close()  # the other process's creation, already committed

    class FirstReadMisses:
        """The connection as the racing opener saw it: its first read ran before the commit."""

        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn, self.missed = conn, False

        def execute(self, sql: str, *args):
            if "FROM schema_version" in sql and not self.missed:
                self.missed = True
                raise sqlite3.OperationalError("no such table: schema_version")
            return self.conn.execute(sql, *args)

    path = tmp_path / "cs2sim.db"
    conn = sqlite3.connect(path)
    store = Store(tmp_path, path, FirstReadMisses(conn))  # type: ignore[arg-type]
    assert store._version() is not None
    conn.close()
