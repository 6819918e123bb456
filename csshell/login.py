"""Who is acting: the local OS user (local trust) or `--user NAME` with a password.

Passwords never come from the command line or the environment: they are asked with getpass on a
terminal, or read from the first line of a `--password-file` that only its owner can read
(mode 0600 or stricter), so a script can log in without leaking the password to `ps`.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from cs2sim.system.errors import AuthenticationFailed, UsageError

if TYPE_CHECKING:
    from cs2sim.system.store import Store
    from cs2sim.system.users import Identity

__all__ = ["read_password_file", "login"]


MAX_PASSWORD_FILE = 4096  # bytes: a password file holds one line


def read_password_file(path: str | os.PathLike[str]) -> str:
    """The first line of FILE; refused unless it is a regular file of at most MAX_PASSWORD_FILE
    bytes that only its owner may read or write. It is opened without blocking and checked
    (fstat) before a byte is read, so /dev/zero or a FIFO is refused at once, not read forever
    or waited on."""
    p = Path(path).expanduser()
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise UsageError(f"cannot read password file {p}: {e.strerror}; check the path.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(
                f"password file {p} is not a regular file (a device, FIFO or "
                "directory); write the password into a file of its own."
            )
        if st.st_size > MAX_PASSWORD_FILE:
            raise UsageError(
                f"password file {p} is {st.st_size:,} bytes (at most "
                f"{MAX_PASSWORD_FILE:,}); put only the password in it."
            )
        mode = stat.S_IMODE(st.st_mode)
        data = os.read(fd, MAX_PASSWORD_FILE + 1)[:MAX_PASSWORD_FILE]
    except OSError as e:
        raise UsageError(f"cannot read password file {p}: {e.strerror}; check the path.") from None
    finally:
        os.close(fd)
    try:
        line = data.decode("utf-8").split("\n", 1)[0]
    except UnicodeDecodeError:
        raise UsageError(
            f"password file {p} is not UTF-8 text; write the password as text."
        ) from None
    if mode & 0o077:
        raise UsageError(
            f"password file {p} is readable by others (mode {mode:04o}); run `chmod 600 {p}`."
        )
    password = line.rstrip("\r\n")
    if not password:
        raise UsageError(f"password file {p} has an empty first line; put the password on it.")
    return password


def login(store: Store, user: str | None, password_file: str | None) -> Identity:
    """The identity this cs acts as: local OS user, or `user` after a password check."""
    from cs2sim.system import users

    if user is None:
        if password_file is not None:
            raise UsageError("--password-file needs --user NAME; add the account name.")
        return users.local_identity(store)
    if password_file is not None:
        password = read_password_file(password_file)
    elif sys.stdin.isatty():
        import getpass

        try:
            password = getpass.getpass(f"Password for {user}: ")
        except EOFError:  # Ctrl-D at the password prompt
            raise AuthenticationFailed(
                f"Login cancelled: no password was given for {user}; run `cs --user {user}` "
                "again and type it, or use --password-file FILE."
            ) from None
    else:
        raise UsageError(
            f"cannot ask for {user}'s password without a terminal; add --password-file FILE."
        )
    return users.authenticate(store, user, password)
