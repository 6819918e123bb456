"""Tests that start Slurm daemons of their own run only when asked: a developer's
`python -m pytest`, even as root on a machine with Slurm installed, starts none."""

from __future__ import annotations

import pytest
from slurm_helpers import DAEMONS_ENV, daemons_refusal


@pytest.mark.parametrize("value", [None, "", "0", "yes"])
def test_without_the_switch_daemon_tests_skip_saying_how_to_ask(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(DAEMONS_ENV, raising=False)
    else:
        monkeypatch.setenv(DAEMONS_ENV, value)
    assert daemons_refusal() == (
        f"starts Slurm daemons of its own: set {DAEMONS_ENV}=1 to allow it (.ci/run does)."
    )


def test_with_the_switch_only_root_and_an_installed_slurm_remain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DAEMONS_ENV, "1")
    refusal = daemons_refusal()
    assert refusal is None or "root" in refusal or "not installed" in refusal
