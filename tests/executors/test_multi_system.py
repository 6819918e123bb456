"""A weight-streaming run over num_csx systems holds all of them; a forced standby of
any one stops it at its next step (exit 75, checkpoints kept) and frees every system."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from exec_helpers import CONFIGS
from test_job_lifecycle import HOME, LONG, _params, _wait

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.system import jobs
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.machine import Machine
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

assert CONFIGS  # the small fc_mnist config of the executor tests (via _params)


@pytest.mark.slow
def test_a_forced_standby_of_one_reserved_system_stops_the_job_and_frees_all(tmp_path, monkeypatch):
    monkeypatch.setenv("CS2_CLUSTER", str(EXAMPLE_PATH))  # four CS-2s in weight streaming
    run = subprocess.Popen(
        [
            sys.executable,
            "run.py",
            "-m",
            "train",
            "-p",
            _params(tmp_path, every=10),
            "-o",
            str(tmp_path / "run"),
            "--cs_ip",
            "cs2-1",
            "--num_csx",
            "2",
            *LONG,
        ],
        cwd=HOME,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1", CS2SIM_FLOW="ws"),
    )
    store = Store.open()
    first, second = Machine(store, "cs2-1"), Machine(store, "cs2-2")
    admin = local_identity(store)
    try:
        held = _wait(lambda: second.status().running_jobs, "the job to hold cs2-2", run)
        job = held[0]
        assert job.systems == ("cs2-1", "cs2-2") and first.status().running_jobs == held
        assert Machine(store, "cs2-3").status().held_by is None
        _wait(lambda: ckpt.list_checkpoints(tmp_path / "run"), "a checkpoint", run)
        try:  # a plain standby of the second system is refused, naming the job
            second.standby(admin)
            raise AssertionError("standby with a running job was not refused")
        except Exception as e:  # noqa: BLE001
            assert f"job {job.id} (" in str(e) and "system standby --force" in str(e)
        second.standby(admin, force=True)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 75, err
    assert err.count("\n") == 1 and "System cs2-2 went to STANDBY" in err
    assert "its 2 systems, cs2-1, cs2-2, are released" in err
    assert ckpt.list_checkpoints(tmp_path / "run")  # kept
    with store.read() as db:
        assert jobs.holders(db) == {}  # both systems are free
    assert first.status().running_jobs == () and second.status().running_jobs == ()
    for m in (first, second):  # each system's log shows the job's start and end
        rows = [e for e in m.audit() if e.command in ("job start", "job end")]
        assert rows[0].detail.startswith(f"job {job.id} (WEIGHT_STREAMING) on cs2-1, cs2-2:")
        assert rows[-1].detail == f"job {job.id} CANCELLED"
