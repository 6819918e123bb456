"""A store shared by several OS users keeps its roles: a member attacks it by
every means the sharing gives them, as a REAL second OS user (created here with useradd, removed
afterwards), and cannot become admin, read the password hashes, or erase or rewrite the audit
log; an existing empty store is refused, never recreated. Needs root; skipped otherwise."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rel_helpers import run_as

from cs2sim.system import store_service, users
from cs2sim.system.audit import entries
from cs2sim.system.errors import CsError, StoreError
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import DB_NAME, Store
from cs2sim.system.store_remote import SOCKET_NAME, recv_msg, send_msg

CAN = os.geteuid() == 0 and shutil.which("useradd") and shutil.which("groupadd")
pytestmark = pytest.mark.skipif(not CAN, reason="needs root and useradd/groupadd to create a "
                                "second OS user who shares the store")


@pytest.fixture
def member() -> Iterator[pwd.struct_passwd]:
    """A fresh OS user whose primary group is a fresh group (the store is shared with it)."""
    tag = uuid.uuid4().hex[:6]
    group, name = f"cs2t{tag}", f"cs2m{tag}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        subprocess.run(["useradd", "-M", "-N", "-g", group, "-s", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        try:
            yield pwd.getpwnam(name)
        finally:
            subprocess.run(["userdel", name], capture_output=True)
    finally:
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture
def shared(member: pwd.struct_passwd) -> Iterator[Path]:
    """root's store, shared with the member's group through the store service."""
    top = Path(tempfile.mkdtemp(prefix="cs2sim-share-"))
    top.chmod(0o755)
    home = top / "store"
    with Store.open(home) as store:
        Machine(store).status()
        users.add_user(store, users.local_identity(store), "alice", users.Role.ADMIN, "s3cret")
    store_service.share(home, member.pw_gid)
    pid = int((home / store_service.PID_NAME).read_text())
    try:
        yield home
    finally:
        os.kill(pid, 15)  # the service this fixture started, by its pid
        shutil.rmtree(top, ignore_errors=True)


ATTACKS = {
    "make me admin": "INSERT INTO users (name, role, created_at) VALUES (?, 'admin', 0)",
    "promote me": "UPDATE users SET role = 'admin'",
    "demote root": "UPDATE users SET role = 'user' WHERE name = 'root'",
    "drop the accounts": "DELETE FROM users",
    "erase the audit": "DELETE FROM audit",
    "rewrite the audit": "UPDATE audit SET detail = 'nothing happened'",
    "forge an audit row": "INSERT INTO audit (at, user, system, command, from_state, to_state,"
                          " outcome) VALUES (0, 'root', '', 'user add x', '', '', 'ok')",
    "standby by SQL": "UPDATE systems SET state = 'STANDBY'",
    "drop a table": "DROP TABLE audit",
    "attach a file": "ATTACH DATABASE '/tmp/cs2sim-evil.db' AS evil",
    "change the schema": "CREATE TABLE evil (a)",
}


def _attack(home: Path) -> dict[str, object]:
    """Everything a member can try; runs as the member."""
    out: dict[str, object] = {}
    db_path = home / DB_NAME
    try:  # the file itself: open, truncate
        sqlite3.connect(f"file:{db_path}?mode=rw", uri=True).execute("SELECT 1 FROM users")
        out["direct sql"] = "opened"
    except sqlite3.Error as e:
        out["direct sql"] = f"refused: {e}"
    try:
        os.truncate(db_path, 0)
        out["truncate"] = "truncated"
    except OSError as e:
        out["truncate"] = f"refused: {e.strerror}"
    try:
        os.rename(db_path, home / "x")
        out["replace"] = "renamed"
    except OSError as e:
        out["replace"] = f"refused: {e.strerror}"
    store = Store.open(home)
    out["remote"] = store.remote is not None
    for what, sql in ATTACKS.items():
        try:
            with store.transaction() as db:
                db.execute(sql, (pwd.getpwuid(os.getuid()).pw_name,) if "?" in sql else ())
            out[what] = "done"
        except CsError as e:
            out[what] = f"refused: {e}"
    with store.read() as db:
        out["hashes"] = db.execute("SELECT salt, hash FROM users").fetchall()
    for sql in ("PRAGMA writable_schema = 1", "BEGIN IMMEDIATE"):  # around the client's filter
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(home / SOCKET_NAME))
        send_msg(s, {"op": "exec", "sql": sql, "params": []})
        out[sql] = recv_msg(s)
        s.close()
    me = users.local_identity(store)
    try:
        Machine(store).standby(me)
        out["standby"] = "done"
    except CsError as e:
        out["standby"] = f"refused: {e}"
    try:
        users.authenticate(store, "alice", "guess")
        out["login"] = "in"
    except CsError as e:
        out["login"] = f"refused: {e}"
    out["me"] = (me.name, str(me.role))
    return out


def test_a_member_cannot_become_admin_read_hashes_or_touch_the_audit(shared, member):
    with Store.open(shared) as store:
        before = [(e.id, e.user, e.command, e.detail) for e in entries(store)]
        accounts = users.list_users(store)
    res = run_as(member, lambda: _attack(shared), {"CS2_HOME": str(shared), "PATH": "/usr/bin",
                                                   "HOME": "/nonexistent"})
    assert res["remote"] is True and res["me"] == (member.pw_name, "user")
    assert res["direct sql"].startswith("refused") and res["truncate"].startswith("refused")
    assert res["replace"].startswith("refused")
    for what in ATTACKS:
        assert res[what].startswith("refused: permission denied"), (what, res[what])
    assert res["hashes"] == [(None, None), (None, None)]
    assert res["PRAGMA writable_schema = 1"]["ok"] is False
    assert res["BEGIN IMMEDIATE"]["ok"] is False
    assert "needs the admin role" in res["standby"] and "Login failed" in res["login"]
    with Store.open(shared) as store:  # as root: nothing changed but the member's own rows
        assert users.list_users(store) == accounts
        assert Machine(store).status().state is State.ACTIVE
        after = [(e.id, e.user, e.command, e.detail) for e in entries(store)]
    assert after[:len(before)] == before  # the log was only appended to
    added = after[len(before):]
    assert [(u, c) for _, u, c, _ in added] == [(member.pw_name, "system standby"),
                                                  ("alice", "login")]
    assert f"by OS user {member.pw_name}" in added[1][3]
    assert (shared / DB_NAME).stat().st_size > 0


def test_a_member_can_use_the_shared_store_as_before(shared, member):
    def work() -> tuple[str, str, list[str]]:
        store = Store.open(shared)
        who = users.authenticate(store, "alice", "s3cret")  # a password login, via the service
        Machine(store).standby(who)  # alice is an admin: allowed, audited as alice
        return who.name, str(Machine(store).status().state), [e.user for e in entries(store)]

    name, state, log_users = run_as(member, work, {"CS2_HOME": str(shared), "PATH": "/usr/bin",
                                                   "HOME": "/nonexistent"})
    assert (name, state) == ("alice", "STANDBY") and log_users[-1] == "alice"


def test_an_empty_store_is_refused_not_recreated(tmp_path):
    home = tmp_path / "home"
    with Store.open(home) as store:
        Machine(store).status()
    os.truncate(home / DB_NAME, 0)  # an accident, or someone with write access
    for extra in ("-wal", "-shm"):
        (home / f"{DB_NAME}{extra}").unlink(missing_ok=True)
    with pytest.raises(StoreError, match=r"exists but holds no store \(0 bytes\), so it was "
                                         r"not recreated.*move it aside"):
        Store.open(home)
    assert (home / DB_NAME).stat().st_size == 0  # left as it was, for the owner to look at
