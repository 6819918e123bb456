"""Fixtures of the reliability suite: a fresh $CS2_HOME with instant reboots."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def home(fresh_home: Path) -> Path:
    return fresh_home
