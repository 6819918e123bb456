"""Helpers of the reliability suite: audit replay, store dumps, running code as another OS user."""

from __future__ import annotations

import os
import pickle
import pwd
from collections.abc import Callable, Sequence
from typing import Any

from cs2sim.system.audit import AuditEntry
from cs2sim.system.machine import COMMAND_WORDS
from cs2sim.system.state import Action, ExecMode, State, next_state
from cs2sim.system.store import Store

ACTIONS_BY_WORDS = {words: action for action, words in COMMAND_WORDS.items()}


def replay(log: Sequence[AuditEntry]) -> tuple[State, ExecMode, ExecMode]:
    """Re-run the audit log through the transition table; every row must follow from the last
    (a break in the chain fails with the row that breaks it)."""
    state, configured, active = State.ACTIVE, ExecMode.PIPELINED, ExecMode.PIPELINED
    for e in log:
        action = ACTIONS_BY_WORDS.get(e.command)
        if action is None:
            continue
        assert e.from_state == state, f"row {e.id} starts from {e.from_state}, store was {state}"
        if e.outcome != "ok":
            assert e.to_state == state, f"refused row {e.id} moved the state"
            continue
        state = next_state(state, action)
        assert e.to_state == state, f"row {e.id} ends in {e.to_state}, the table says {state}"
        if action is Action.SETUP:
            words = e.detail.split()
            configured = ExecMode(words[0] if "already" in e.detail else words[1])
        if action is Action.BOOTED:
            active = configured
    return state, configured, active


def dump(store: Store, skip: tuple[str, ...] = ("audit",)) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but `skip` (compare before/after: nothing else changed)."""
    with store.read() as db:
        names = [
            t
            for (t,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
            if t not in skip
        ]
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in names}


def other_user() -> pwd.struct_passwd | None:
    """An unprivileged OS user this (root) process can become, or None (then tests skip)."""
    if os.geteuid() != 0:
        return None
    for name in ("nobody", "daemon"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


def preload() -> None:
    """Import what the console may import lazily, BEFORE dropping privileges: after setuid the
    interpreter's own directory may not be readable (here it lives under /root, mode 0700)."""
    import argparse  # noqa: F401
    import dataclasses  # noqa: F401
    import difflib  # noqa: F401
    import getpass  # noqa: F401
    import hashlib  # noqa: F401
    import json  # noqa: F401
    import platform  # noqa: F401
    import shlex  # noqa: F401
    import textwrap  # noqa: F401
    import traceback  # noqa: F401
    from importlib import metadata  # noqa: F401

    import rich.box
    import rich.cells
    import rich.console
    import rich.table
    import rich.text  # noqa: F401
    import yaml  # noqa: F401

    import cs2sim.csshell.commands
    import cs2sim.csshell.login
    import cs2sim.csshell.main
    import cs2sim.csshell.prompts
    import cs2sim.system.cluster
    import cs2sim.system.machine
    import cs2sim.system.sched.backend
    import cs2sim.system.store_remote
    import cs2sim.system.store_service  # noqa: F401


def run_as(user: pwd.struct_passwd, fn: Callable[[], Any], env: dict[str, str]) -> Any:
    """Run `fn()` in a forked child whose real and effective uid/gid are `user`'s (the kernel's
    identity, as `runuser` would give), with `env` as its whole environment; its result."""
    preload()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)  # real, effective and saved uid: no way back to root
            os.environ.clear()
            os.environ.update(env)
            try:
                result: Any = ("ok", fn())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                result = ("raised", f"{type(e).__name__}: {e}")
            with os.fdopen(write_fd, "wb") as f:
                pickle.dump(result, f)
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise AssertionError(f"the child running as {user.pw_name} failed: {value}")
    return value
