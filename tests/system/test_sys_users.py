"""Accounts: local trust, password login, hashing, admin-only management, all audited."""

from __future__ import annotations

import os
import pwd

import pytest
from sys_helpers import dump

from cs2sim.system import oslogin
from cs2sim.system.audit import entries
from cs2sim.system.errors import AuthenticationFailed, PermissionDenied, UsageError
from cs2sim.system.users import (
    Identity,
    Role,
    add_user,
    authenticate,
    list_users,
    local_identity,
    login_name,
    remove_user,
    set_password,
)

SECRET = "correct horse battery staple"


@pytest.fixture
def with_alice(store, admin):
    add_user(store, admin, "alice", Role.USER, SECRET)
    return store


def test_creator_is_admin_others_are_users(store, admin, monkeypatch):
    assert (admin.role, admin.via) == (Role.ADMIN, "local")
    other = next(p for p in pwd.getpwall() if p.pw_uid != os.getuid())
    monkeypatch.setattr(oslogin, "real_uid", lambda: other.pw_uid)  # another OS user's process
    assert local_identity(store) == Identity(other.pw_name, Role.USER, "local")


def test_the_environment_cannot_claim_an_identity(store, admin, monkeypatch):
    """LOGNAME / USER are the caller's to set; the login comes from the real uid."""
    other = next(p for p in pwd.getpwall() if p.pw_uid != os.getuid())
    monkeypatch.setattr(oslogin, "real_uid", lambda: other.pw_uid)
    for var in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(var, admin.name)  # claim to be the store's administrator
    who = local_identity(store)
    assert who == Identity(other.pw_name, Role.USER, "local")
    assert login_name() == pwd.getpwuid(other.pw_uid).pw_name


def test_a_uid_without_a_passwd_entry_is_named_by_number(monkeypatch):
    monkeypatch.setattr(oslogin, "real_uid", lambda: 4_000_000_000)
    monkeypatch.setenv("LOGNAME", "root")
    assert login_name() == "uid4000000000"


def test_authenticate(with_alice, admin):
    assert authenticate(with_alice, "alice", SECRET) == Identity("alice", Role.USER, "password")
    for name, password in [("alice", "wrong"), ("alice", ""), ("bob", SECRET)]:
        with pytest.raises(AuthenticationFailed, match="wrong user name or password"):
            authenticate(with_alice, name, password)
    with pytest.raises(AuthenticationFailed, match="has no password"):
        authenticate(with_alice, admin.name, "")
    failures = [e for e in entries(with_alice) if e.command == "login"]
    assert all(e.detail.endswith(f"(by OS user {login_name()})") for e in failures)
    assert [(e.user, e.outcome) for e in failures] == [
        ("alice", "denied"),
        ("alice", "denied"),
        ("bob", "denied"),
        (admin.name, "denied"),
    ]


def test_the_password_is_never_stored(with_alice):
    with with_alice.read() as db:
        salt, digest = db.execute("SELECT salt, hash FROM users WHERE name = 'alice'").fetchone()
    assert len(salt) == 16 and digest.startswith("scrypt$16384$8$1$") and SECRET not in digest
    raw = b"".join(p.read_bytes() for p in with_alice.home.iterdir() if p.is_file())
    assert SECRET.encode() not in raw  # database, WAL and shm files
    assert b"user add alice" in raw  # (the files were really read)


def test_same_password_different_hash(store, admin):
    add_user(store, admin, "bob", Role.USER, SECRET)
    add_user(store, admin, "carol", Role.ADMIN, SECRET)
    with store.read() as db:
        hashes = {h for (h,) in db.execute("SELECT hash FROM users WHERE hash IS NOT NULL")}
    assert len(hashes) == 2  # random salts


def test_non_admin_cannot_manage_accounts(with_alice, admin):
    alice = authenticate(with_alice, "alice", SECRET)
    before = dump(with_alice)
    with pytest.raises(
        PermissionDenied,
        match=r"`user add eve` needs the admin role; you are "
        r"logged in as alice \(user\)\.",
    ):
        add_user(with_alice, alice, "eve", Role.ADMIN, "pw")
    with pytest.raises(PermissionDenied):
        remove_user(with_alice, alice, admin.name)
    with pytest.raises(PermissionDenied):
        set_password(with_alice, alice, admin.name, "pw")
    assert dump(with_alice) == before
    assert [(e.user, e.outcome) for e in entries(with_alice)[-3:]] == [("alice", "denied")] * 3


def test_users_change_their_own_password(with_alice):
    alice = authenticate(with_alice, "alice", SECRET)
    set_password(with_alice, alice, "alice", "new secret")
    assert authenticate(with_alice, "alice", "new secret").name == "alice"
    with pytest.raises(AuthenticationFailed):
        authenticate(with_alice, "alice", SECRET)


def test_management_rules(with_alice, admin):
    assert [(n, r) for n, r, _ in list_users(with_alice)] == sorted(
        [(admin.name, Role.ADMIN), ("alice", Role.USER)]
    )
    with pytest.raises(UsageError, match="already exists"):
        add_user(with_alice, admin, "alice", Role.USER, "x")
    for bad in ("Alice", "1x", "", "system", "a b", "x" * 40):
        with pytest.raises(UsageError, match="Invalid user name"):
            add_user(with_alice, admin, bad, Role.USER, "x")
    with pytest.raises(UsageError, match="password is empty"):
        add_user(with_alice, admin, "dan", Role.USER, "")
    with pytest.raises(UsageError, match="last admin"):
        remove_user(with_alice, admin, admin.name)
    with pytest.raises(UsageError, match="No user zed"):
        remove_user(with_alice, admin, "zed")
    remove_user(with_alice, admin, "alice")
    with pytest.raises(AuthenticationFailed):
        authenticate(with_alice, "alice", SECRET)
    log = [(e.command, e.outcome) for e in entries(with_alice)]
    assert ("user remove alice", "ok") in log and (f"user remove {admin.name}", "refused") in log
