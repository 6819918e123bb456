"""Accounts and roles: who is acting, and may they change the machine.

How accounts work (our design; on a real CS-2 an administrator logs in as root over ssh):

* Local trust. Without ``--user``, ``cs`` acts as the local OS login name (`login_name()`),
  which comes from the kernel: the process's real uid looked up in the password database.
  Never from ``LOGNAME`` / ``USER`` (which anyone can set, as ``getpass.getuser()`` trusts), so
  ``LOGNAME=root cs ...`` run by another OS user is still that user. The OS user who creates
  a store is registered as ``admin`` with no password, like root on the system. A local OS user
  with an account acts with that account's role; one without an
  account acts with role ``user`` (may look, may not change).
* Password login. ``cs --user NAME`` logs in as account NAME with a password, asked with getpass
  on a terminal or read from the first line of ``--password-file FILE`` (refused unless the file
  is mode 0600 or stricter). Passwords are never on the command line or in the environment.
* Storage. Only a salted hashlib.scrypt hash (n=2**14, r=8, p=1, 16-byte random salt) is stored;
  checks use hmac.compare_digest. The password itself is never stored, logged or audited.
* Management. Admins add, list, re-password and remove accounts (``user add NAME --role ...``).
  Anyone may change their own password. The last admin cannot be removed.
* Every management action and every failed login is written to the audit log.
"""

from __future__ import annotations

import enum
import hmac
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cs2sim.system import audit
from cs2sim.system.errors import AuthenticationFailed, PermissionDenied, UsageError
from cs2sim.system.oslogin import login_name, real_uid
from cs2sim.system.store_ops import operation, wire

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = [
    "Role",
    "Identity",
    "SYSTEM",
    "login_name",
    "real_uid",
    "local_identity",
    "authenticate",
    "require_admin",
    "check_name",
    "add_user",
    "remove_user",
    "set_password",
    "list_users",
]

# scrypt cost: 16 MiB of memory and ~50 ms per check on a laptop-class core.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SALT_BYTES = 16
NAME_RE = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")  # POSIX-style login names
RESERVED = frozenset({"system"})  # the clock's identity in the audit log


@wire
class Role(enum.StrEnum):
    """What an account may do: admins change the machine, users look."""

    ADMIN = "admin"
    USER = "user"


@wire
@dataclass(frozen=True)
class Identity:
    """Who is acting: name, role, and how they got it ("local" | "password" | "internal")."""

    name: str
    role: Role
    via: str


SYSTEM = Identity("system", Role.ADMIN, "internal")  # time-based events (a reboot finishing)


@operation("account.whoami", args={})
def local_identity(store: Store) -> Identity:
    """The OS user running this process: their account's role, else role user."""
    name = login_name()
    with store.read() as db:
        row = db.execute("SELECT role FROM users WHERE name = ?", (name,)).fetchone()
    return Identity(name, Role(row[0]) if row else Role.USER, "local")


def role_of(store: Store, name: str) -> Role | None:
    """The role of account NAME, None if there is no such account."""
    with store.read() as db:
        row = db.execute("SELECT role FROM users WHERE name = ?", (name,)).fetchone()
    return Role(row[0]) if row and row[0] in ("admin", "user") else None


@operation("account.login", args={"name": str, "password": str}, becomes=True)
def authenticate(store: Store, name: str, password: str) -> Identity:
    """Check NAME's password; AuthenticationFailed (audited) if unknown, wrong or passwordless.
    (On a shared store the service checks it: the hashes never leave it.)"""
    if len(name) > 64 or len(password) > 4096:
        raise AuthenticationFailed(
            "Login failed: a user name or password that long is not one; check what was typed."
        )
    with store.read() as db:
        row = db.execute("SELECT role, salt, hash FROM users WHERE name = ?", (name,)).fetchone()
    if row and row[1] is not None and _verify(password, row[1], row[2]):
        return Identity(name, Role(row[0]), "password")
    if row and row[1] is None:
        reason = "account has no password"
        message = (
            f"Login failed: account {name} has no password (it is a local administrator); "
            f"run `cs` as that OS user, or have an admin run `user passwd {name}`."
        )
    else:
        reason = "wrong user name or password"
        message = (
            f"Login failed for {name}: wrong user name or password; try again, "
            f"or ask an admin to run `user passwd {name}`."
        )
    with store.transaction() as db:  # who really tried: the kernel's user, not the name typed
        detail = f"{reason} (by OS user {login_name()})"
        audit.record(db, user=name, command="login", outcome="denied", detail=detail)
    raise AuthenticationFailed(message)


@operation(
    "account.require_admin", args={"command": str, "system": str}, fill={"actor": "identity"}
)
def require_admin(store: Store, actor: Identity, command: str, system: str = "") -> None:
    """PermissionDenied (audited as "denied") unless `actor` is an admin."""
    if actor.role is Role.ADMIN:
        return
    message = permission_message(actor, command)
    with store.transaction() as db:
        audit.record(
            db, user=actor.name, system=system, command=command, outcome="denied", detail=message
        )
    raise PermissionDenied(message)


def permission_message(actor: Identity, command: str) -> str:
    """The one sentence a non-admin sees."""
    return (
        f"Permission denied: `{command}` needs the admin role; "
        f"you are logged in as {actor.name} ({actor.role})."
    )


@operation(
    "account.add",
    args={"name": str, "role": Role, "password": str},
    fill={"actor": "identity"},
    may="admin",
)
def add_user(store: Store, actor: Identity, name: str, role: Role, password: str) -> None:
    """Create account NAME with ROLE (admin only)."""
    command = f"user add {name}"
    require_admin(store, actor, command)
    check_name(name)
    role = Role(role)
    salt, digest = _hash_new(password)
    with store.transaction() as db:
        refusal = None
        if db.execute("SELECT 1 FROM users WHERE name = ?", (name,)).fetchone():
            refusal = f"User {name} already exists; pick another name or run `user passwd {name}`."
        else:
            db.execute(
                "INSERT INTO users (name, role, salt, hash, created_at) VALUES (?, ?, ?, ?, ?)",
                (name, str(role), salt, digest, time.time()),
            )
        _record(db, actor, command, refusal, f"role {role}")
    _raise(refusal)


@operation("account.remove", args={"name": str}, fill={"actor": "identity"}, may="admin")
def remove_user(store: Store, actor: Identity, name: str) -> None:
    """Delete account NAME (admin only; never the last admin)."""
    command = f"user remove {name}"
    require_admin(store, actor, command)
    with store.transaction() as db:
        refusal = None
        row = db.execute("SELECT role FROM users WHERE name = ?", (name,)).fetchone()
        if row is None:
            refusal = f"No user {name}; run `user list` to see the accounts."
        elif row[0] == Role.ADMIN and _admin_count(db) == 1:
            refusal = f"User {name} is the last admin; add another admin before removing it."
        else:
            db.execute("DELETE FROM users WHERE name = ?", (name,))
        _record(db, actor, command, refusal, f"role was {row[0] if row else '-'}")
    _raise(refusal)


@operation(
    "account.passwd",
    args={"name": str, "password": str},
    fill={"actor": "identity"},
    may="self-or-admin",
)
def set_password(store: Store, actor: Identity, name: str, password: str) -> None:
    """Set NAME's password (admins for anyone; users for themselves)."""
    command = f"user passwd {name}"
    if actor.name != name:
        require_admin(store, actor, command)
    salt, digest = _hash_new(password)
    with store.transaction() as db:
        refusal = None
        cur = db.execute("UPDATE users SET salt = ?, hash = ? WHERE name = ?", (salt, digest, name))
        if cur.rowcount == 0:
            refusal = f"No user {name}; run `user list` to see the accounts."
        _record(db, actor, command, refusal, "password changed")
    _raise(refusal)


@operation("account.list", args={})
def list_users(store: Store) -> list[tuple[str, Role, float]]:
    """(name, role, created_at) of every account, by name."""
    with store.read() as db:
        rows = db.execute("SELECT name, role, created_at FROM users ORDER BY name").fetchall()
    return [(name, Role(role), created) for name, role, created in rows]


# -- helpers ---------------------------------------------------------------------------------
def _record(
    db: sqlite3.Connection, actor: Identity, command: str, refusal: str | None, detail: str
) -> None:
    """Audit a management action: "ok" with `detail`, or "refused" with the refusal."""
    outcome = "refused" if refusal else "ok"
    audit.record(db, user=actor.name, command=command, outcome=outcome, detail=refusal or detail)


def _raise(refusal: str | None) -> None:
    """Raise a refusal once its transaction (holding only the audit row) has committed."""
    if refusal:
        raise UsageError(refusal)


def _admin_count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT count(*) FROM users WHERE role = 'admin'").fetchone()[0])


def check_name(name: str) -> None:
    """UsageError unless `name` is a valid new account name (POSIX-style, not reserved)."""
    if not NAME_RE.fullmatch(name) or name in RESERVED:
        raise UsageError(
            f"Invalid user name {name!r}; use 1-32 of a-z, 0-9, '_', '.', '-', "
            "starting with a letter or '_' (and not 'system')."
        )


def _hash_new(password: str) -> tuple[bytes, str]:
    """A fresh random salt and the scrypt hash of `password`, as 'scrypt$n$r$p$hex'."""
    if not password:
        raise UsageError("The password is empty; choose a non-empty password.")
    salt = os.urandom(SALT_BYTES)
    digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
    return salt, f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${digest.hex()}"


def _verify(password: str, salt: bytes, stored: str) -> bool:
    """Constant-time check of `password` against a stored 'scrypt$n$r$p$hex'."""
    try:
        algo, n, r, p, hexdigest = stored.split("$")
        expected = bytes.fromhex(hexdigest)
    except ValueError:
        return False
    if algo != "scrypt":
        return False
    return hmac.compare_digest(_scrypt(password, salt, int(n), int(r), int(p)), expected)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    import hashlib  # only logins need it; keeps the shell's start-up lean

    return hashlib.scrypt(password.encode(), salt=salt, n=n, r=r, p=p, maxmem=64 * 2**20, dklen=32)
