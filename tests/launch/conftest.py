"""Fixtures for launcher tests: a fresh $CS2_HOME per test; launchers started in the background
are stopped and their pipes closed at teardown. Helpers are in launch_helpers.py."""

from __future__ import annotations

import pytest
from launch_helpers import started


@pytest.fixture(autouse=True)
def cs2_home(fresh_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return fresh_home


@pytest.fixture(autouse=True)
def _reap_started():
    yield
    while started:
        proc = started.pop()
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
