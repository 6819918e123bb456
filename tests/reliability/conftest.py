"""Fixtures of the reliability suite: a fresh $CS2_HOME with instant reboots."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cs2home"
    monkeypatch.setenv("CS2_HOME", str(path))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    return path
