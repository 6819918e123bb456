"""Fixtures for the executor tests: a CS2_HOME of their own, instant reboots, one BLAS thread."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def cs2_home(fresh_home, monkeypatch):
    """$CS2_HOME in tmp_path (a fresh store: cs2-1 ACTIVE in PIPELINED), instant reboots."""
    home = fresh_home
    monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    return home


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """One BLAS thread: on a shared, loaded machine OpenBLAS's spinning threads cost ~10x."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield
