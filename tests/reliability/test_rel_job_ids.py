"""Job ids are the service's: a member (a real OS user) cannot register a job under the id of
another user's job, running or queued, and so cannot take over its CS-2 system or nodes; its own
running launch's id is still its job's id. Needs root; skipped otherwise."""

from __future__ import annotations

import os

import pytest
from rel_helpers import run_as
from test_rel_shared_store import CAN, _env, member, members, shared  # noqa: F401 - fixtures

from cs2sim.system import users
from cs2sim.system.audit import entries
from cs2sim.system.errors import CsError
from cs2sim.system.machine import Machine
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.state import ExecMode
from cs2sim.system.store import Store

pytestmark = pytest.mark.skipif(not CAN, reason="needs root and useradd/groupadd")


def _request(nodes: int) -> JobRequest:
    return JobRequest((Component(nodes, 1),), ("python", "run.py"))


def test_a_members_own_launch_keeps_its_id(shared, member):  # noqa: F811
    def own() -> tuple[int, int, str]:
        store = Store.open(shared)
        launch = queue.submit(store, _request(1), user="x")
        job = Machine(store).register_job(
            users.local_identity(store),
            ExecMode.PIPELINED,
            "run.py",
            os.getpid(),
            nodes=("worker-9",),
            job_id=launch,
        )
        Machine(store).finish_job(job.id, "COMPLETED")
        queue.finish(store, launch, "COMPLETED", 0)
        return launch, job.id, job.user

    launch, job_id, user = run_as(member, own, _env(shared))
    assert job_id == launch and user == member.pw_name


def test_a_member_cannot_register_under_anothers_job_id(shared, member):  # noqa: F811
    with Store.open(shared) as store:
        me = users.local_identity(store)
        by_hand = Machine(store).register_job(
            me, ExecMode.PIPELINED, "run.py --cs_ip cs2-1", os.getpid(), nodes=("worker-1",)
        )  # a run.py --cs_ip of the owner's, holding cs2-1
        running = queue.submit(store, _request(8), user=me.name)
        queued = queue.submit(store, _request(9), user=me.name)  # 8 of 16 nodes left: waits
        assert queue.state(store, running).state == "RUNNING"
        assert queue.state(store, queued).state == "PENDING"
        before = [(j.id, j.user) for j in Machine(store).running_jobs()]

    def take(job_id: int) -> str:
        store = Store.open(shared)
        try:
            job = Machine(store).register_job(
                users.local_identity(store),
                ExecMode.PIPELINED,
                "run.py",
                os.getpid(),
                nodes=("worker-14",),
                job_id=job_id,
            )
            return f"registered as job {job.id}"
        except CsError as e:
            return str(e)

    for target in (by_hand.id, running, queued):
        said = run_as(member, lambda t=target: take(t), _env(shared))
        assert said.startswith(f"Job {target} belongs to root; a job is registered only under"), (
            target,
            said,
        )
    with Store.open(shared) as store:
        assert [(j.id, j.user) for j in Machine(store).running_jobs()] == before
        assert queue.state(store, running).state == "RUNNING"
        assert queue.state(store, queued).state == "PENDING"
        denied = [
            e for e in entries(store) if e.user == member.pw_name and e.command == "job start"
        ]
        assert [e.outcome for e in denied] == ["denied"] * 3
        with store.read() as db:  # no node of theirs went to the member
            assert db.execute(
                "SELECT count(*) FROM allocations WHERE node = 'worker-14'"
            ).fetchone() == (0,)
