"""Fixtures for launcher tests: a fresh $CS2_HOME per test; launchers started in the background
are stopped and their pipes closed at teardown. Helpers are in launch_helpers.py."""

from __future__ import annotations

import pytest
from launch_helpers import started


@pytest.fixture(autouse=True)
def cs2_home(tmp_path, monkeypatch):
    home = tmp_path / "cs2home"
    monkeypatch.setenv("CS2_HOME", str(home))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture(autouse=True)
def _reap_started():
    yield
    while started:
        proc = started.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
