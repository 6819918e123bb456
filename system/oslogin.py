"""Who the kernel says this process is: its real uid and that uid's login name.

Below everything that names a person (users.py's accounts, the store's first administrator, the
job records of the schedulers), so none of them needs another's module for it.
"""

from __future__ import annotations

import os
import pwd
from contextvars import ContextVar

__all__ = ["real_uid", "login_name", "ACTING_FOR"]

# Set by the shared store's service while it runs an operation for a member: the member's OS
# login, as the kernel named its uid (SO_PEERCRED), so the operation sees who really acts.
ACTING_FOR: ContextVar[str | None] = ContextVar("cs2sim_acting_for", default=None)


def real_uid() -> int:
    """The kernel's real uid of this process (who started it; not a setuid program's owner)."""
    return os.getuid()


def login_name() -> str:
    """THE identity function: the OS login of the real uid (password database), or uid<N> when
    the uid has no entry (some containers). The environment is never read: LOGNAME and USER are
    set by whoever starts the process, so trusting them would let anyone claim any account."""
    acting = ACTING_FOR.get()
    if acting is not None:
        return acting
    uid = real_uid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"
