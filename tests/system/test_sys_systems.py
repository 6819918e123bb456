"""In the store: which systems a job holds (the --cs_ip one and the next num_csx - 1,
wrapping round), exclusive while it runs, freed when it ends; a version 1 store is upgraded."""

from __future__ import annotations

import os

import pytest

from cs2sim.system import jobs
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.errors import JobRefused, ResourceError
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode
from cs2sim.system.store import SCHEMA_VERSION, Store
from cs2sim.system.users import local_identity


@pytest.fixture
def four(tmp_path, monkeypatch):
    monkeypatch.setenv("CS2_CLUSTER", str(EXAMPLE_PATH))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    store = Store.open(tmp_path / "home")
    yield store
    store.close()


def test_a_job_holds_its_systems_exclusively_until_it_ends(four):
    admin = local_identity(four)
    m4 = Machine(four, "cs2-4")
    assert m4.job_systems(2) == ("cs2-4", "cs2-1")  # wraps round the description's order
    with pytest.raises(JobRefused, match="asks for 5 CS-2 systems .* has 4"):
        m4.job_systems(5)
    job = m4.register_job(
        admin, ExecMode.WEIGHT_STREAMING, "python-ws run.py", os.getpid(), num_csx=2
    )
    assert job.systems == ("cs2-4", "cs2-1")
    with four.read() as db:
        assert jobs.holders(db) == {"cs2-4": job.id, "cs2-1": job.id}
    assert [j.id for j in Machine(four, "cs2-1").running_jobs()] == [job.id]
    assert Machine(four, "cs2-1").status().held_by == job.id
    with pytest.raises(ResourceError, match=f"System cs2-1 is in use by job {job.id} "):
        Machine(four, "cs2-1").register_job(admin, ExecMode.WEIGHT_STREAMING, "x", os.getpid())
    Machine(four, "cs2-2").register_job(admin, ExecMode.WEIGHT_STREAMING, "y", os.getpid())
    m4.finish_job(job.id, "COMPLETED")
    with four.read() as db:
        assert set(jobs.holders(db)) == {"cs2-2"}


def test_a_version_1_store_is_upgraded(tmp_path):
    home = tmp_path / "home"
    with Store.open(home) as store:  # as version 1 left it: no jobs.systems, no index
        job = Machine(store).register_job(
            local_identity(store), ExecMode.PIPELINED, "old", os.getpid()
        )
        with store.transaction() as db:
            db.execute("DROP INDEX jobs_running")
            db.execute("ALTER TABLE jobs DROP COLUMN systems")
            db.execute("UPDATE schema_version SET version = 1")
    with Store.open(home) as store:
        with store.read() as db:
            assert db.execute("SELECT version FROM schema_version").fetchone()[0] == (
                SCHEMA_VERSION
            )
            old = jobs.get(db, job.id)
        assert old is not None and old.systems == ("cs2-1",)  # a version 1 job: its one system
        assert Machine(store).status().held_by == job.id
