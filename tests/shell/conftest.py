"""Fixtures for the cs> shell tests: a throwaway $CS2_HOME, a store, spawned shells."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import Shell, make_context, shell_env

from cs2sim.csshell.context import Context
from cs2sim.system.store import Store


@pytest.fixture
def home(fresh_home: Path) -> Path:
    """A fresh $CS2_HOME; reboots take no time unless a test says otherwise."""
    return fresh_home


@pytest.fixture
def store(home: Path) -> Iterator[Store]:
    s = Store.open(home)
    yield s
    s.close()


@pytest.fixture
def ctx(store: Store) -> Context:
    return make_context(store)


@pytest.fixture
def spawn(home: Path) -> Iterator[Any]:
    """spawn(*args, boot_seconds=0) -> Shell at its first prompt; all killed at teardown."""
    shells: list[Shell] = []

    def start(*args: str, boot_seconds: float = 0.0, wait_prompt: bool = True) -> Shell:
        sh = Shell(shell_env(home, boot_seconds), *args)
        shells.append(sh)
        if wait_prompt:
            sh.prompt()
        return sh

    yield start
    for sh in shells:
        sh.close()
