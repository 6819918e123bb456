"""Jobs: registration rules, lazy FAILED for dead processes, node allocations."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from sys_helpers import dump

from cs2sim.system import jobs
from cs2sim.system.errors import InvalidTransition, ResourceError, UsageError
from cs2sim.system.state import ExecMode, State


@pytest.fixture
def sleeper():
    """A real process whose pid a job can carry."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_register_in_the_active_mode(machine, admin, sleeper):
    job = machine.register_job(
        admin,
        ExecMode.PIPELINED,
        "python run.py --mode train",
        sleeper.pid,
        nodes=("chief-0", "worker-0"),
    )
    assert (job.state, job.mode, job.pid, job.host, job.nodes) == (
        "RUNNING",
        ExecMode.PIPELINED,
        sleeper.pid,
        jobs.this_host(),
        ("chief-0", "worker-0"),
    )
    assert machine.running_jobs() == [job]
    assert machine.status().running_jobs == (job,)
    last = machine.audit()[-1]
    assert (last.command, last.outcome) == ("job start", "ok") and "run.py" in last.detail


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (State.STANDBY, "is in STANDBY; an admin must run `system activate`"),
        (State.ACTIVATING, r"is ACTIVATING \(ready in 100 s\); wait"),
        # the gate names the fault's reason, as `system show` does
        (
            State.FAULT,
            r"is in FAULT \(fan 3 stopped\); an admin must run `system standby` and "
            "`system activate`",
        ),
    ],
)
def test_register_refused_unless_active(store, machine, admin, state, message, monkeypatch):
    if state is State.FAULT:
        machine.inject_fault(admin, "fan 3 stopped")
    else:
        machine.standby(admin)
    if state is State.ACTIVATING:
        monkeypatch.setenv("CS2_BOOT_SECONDS", "100")
        machine.activate(admin)
    before = dump(store)
    with pytest.raises(InvalidTransition, match=message):
        machine.register_job(admin, ExecMode.PIPELINED, "python run.py", os.getpid())
    assert dump(store) == before
    assert machine.audit()[-1].outcome == "refused"


def test_register_refused_in_the_other_mode(store, machine, admin):
    before = dump(store)
    with pytest.raises(InvalidTransition) as err:
        machine.register_job(admin, ExecMode.WEIGHT_STREAMING, "python-ws run.py", os.getpid())
    assert str(err.value) == (
        "System cs2-1 is ACTIVE in PIPELINED mode but this job needs WEIGHT_STREAMING; "
        "launch it with `python`, or ask an admin to switch modes "
        "(`system standby`, `config execmode setup`, `system activate`)."
    )
    assert dump(store) == before


def test_a_running_job_whose_process_died_reads_as_failed(store, machine, admin, sleeper):
    job = machine.register_job(
        admin, ExecMode.PIPELINED, "python run.py", sleeper.pid, nodes=("worker-1",)
    )
    sleeper.kill()
    sleeper.wait()  # reaped: the pid no longer exists
    assert machine.running_jobs() == []
    with store.read() as db:
        assert jobs.get(db, job.id).state == "FAILED"
        assert db.execute("SELECT count(*) FROM allocations").fetchone()[0] == 0  # node freed
    last = machine.audit()[-1]
    assert (last.user, last.command) == ("system", "job end")
    assert f"job {job.id} FAILED: process {sleeper.pid}" in last.detail


def test_zombies_and_reused_pids_are_not_alive():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while jobs.process_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # exited but not reaped: a zombie
    assert not jobs.process_alive(child.pid)
    child.wait()
    assert jobs.process_alive(os.getpid(), jobs.process_start(os.getpid()))
    assert not jobs.process_alive(os.getpid(), "12345678901")  # same pid, another start time


def test_nodes_are_exclusive_until_the_job_ends(store, machine, admin, sleeper):
    first = machine.register_job(admin, ExecMode.PIPELINED, "a", sleeper.pid, nodes=("w-1",))
    with pytest.raises(ResourceError, match=f"Node w-1 is allocated to job {first.id}"):
        machine.register_job(admin, ExecMode.PIPELINED, "b", sleeper.pid, nodes=("w-2", "w-1"))
    with store.read() as db:  # the refused job left nothing behind, not even w-2
        assert db.execute("SELECT node FROM allocations").fetchall() == [("w-1",)]
        assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1
    machine.finish_job(first.id, "COMPLETED")
    second = machine.register_job(admin, ExecMode.PIPELINED, "b", sleeper.pid, nodes=("w-1",))
    assert second.nodes == ("w-1",)


def test_finish_job(store, machine, admin, sleeper):
    job = machine.register_job(admin, ExecMode.PIPELINED, "a", sleeper.pid)
    machine.finish_job(job.id, "CANCELLED")
    machine.finish_job(job.id, "COMPLETED")  # idempotent: the first end wins
    with store.read() as db:
        ended = jobs.get(db, job.id)
    assert ended.state == "CANCELLED" and ended.ended_at is not None
    assert [e.detail for e in machine.audit() if e.command == "job end"] == [
        f"job {job.id} CANCELLED"
    ]
    with pytest.raises(UsageError, match="No job 999"):
        machine.finish_job(999, "COMPLETED")
    with pytest.raises(UsageError, match="not one of"):
        machine.finish_job(job.id, "DONE")
