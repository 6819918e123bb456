"""The embedded scheduler across processes: FIFO, never-fit, kill -9 reaping, cancel."""

from __future__ import annotations

import json
import os
import signal

import pytest
from launch_helpers import HANG_S, RECORD, queue_state, records, run, script, start, wait_for

from cs2sim.system.errors import PermissionDenied
from cs2sim.system.sched import queue
from cs2sim.system.sched.fit import NodeInfo, fifo_pass, place
from cs2sim.system.sched.fit import Pending as P
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.store import Store

HOLD = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"


def _running(home, job_id=None):  # type: ignore[no-untyped-def]
    jobs, _ = queue_state(home)
    return [j for j in jobs if j["state"] == "RUNNING" and (job_id is None or j["id"] == job_id)]


def test_place_prefers_plain_nodes_and_reserves_the_gres_node():
    nodes = [NodeInfo("c", 128, "g"), NodeInfo("w0", 128), NodeInfo("w1", 128)]
    assert place((Component(1, 1, gres="g"), Component(2, 1)), nodes) == [["c"], ["w0", "w1"]]
    assert place((Component(1, 1),), nodes) == [["w0"]]  # not the CS-2's node
    assert place((Component(3, 1),), nodes) == [["w0", "w1", "c"]]  # only when needed
    assert place((Component(1, 200),), nodes) is None  # 200 cpus fit no node


def test_fifo_pass_is_strict_and_linear():
    nodes = [NodeInfo(f"n{i}", 8) for i in range(4)]
    jobs = [P(1, (Component(3, 1),)), P(2, (Component(2, 1),)), P(3, (Component(1, 1),))]
    out = list(fifo_pass(jobs, list(nodes)))
    assert [(j.job_id, n) for j, n in out] == [(1, [["n0", "n1", "n2"]]), (2, None)]  # 3 waits


def test_never_fitting_request_is_refused_at_once(cs2_home):
    res = run([script("csrun_wse"), "--total-nodes", "17", "python", "-c", "pass"])
    assert res.returncode == 1
    lines = res.stderr.splitlines()
    assert lines[0] == "srun: error: Unable to allocate resources: Node count specification invalid"
    assert "16 usable node(s)" in lines[1] and "--total-nodes" in lines[1]
    jobs, nodes = queue_state(cs2_home)
    assert jobs == [] and nodes == []


@pytest.mark.slow
def test_fifo_order_with_concurrent_launchers(tmp_path, cs2_home):
    gate = tmp_path / "gate"
    out = {k: tmp_path / k for k in ("a", "b")}
    for d in out.values():
        d.mkdir()
    wse = script("csrun_wse")
    blocker = start(
        [
            wse,
            "--total-nodes=14",
            "--tasks-per-node=1",
            "--cpus-per-task=1",
            "python",
            "-c",
            HOLD,
            str(gate),
        ]
    )
    try:
        wait_for(lambda: _running(cs2_home))
        # A needs 4 nodes (2 are free): it queues. B needs 1: it would fit, but FIFO puts it
        # behind A (Slurm's main scheduler without backfill).
        a = start(
            [
                wse,
                "--total-nodes=4",
                "--tasks-per-node=1",
                "--cpus-per-task=1",
                "python",
                "-c",
                RECORD,
                str(out["a"]),
            ]
        )
        wait_for(lambda: len(queue_state(cs2_home)[0]) == 2)
        # csrun_cpu's one node keeps off the CS-2's node: it fits in the 2 free workers
        b = start([script("csrun_cpu"), "python", "-c", RECORD, str(out["b"])])
        jobs = wait_for(lambda: (js := queue_state(cs2_home)[0]) and len(js) == 3 and js)
        assert [j["state"] for j in jobs] == ["RUNNING", "PENDING", "PENDING"]
        assert [j["reason"] for j in jobs[1:]] == ["Resources", "Priority"]
        with Store.open(cs2_home) as s:  # one more pass: a FIFO that let B jump would start it
            queue.kick(s)
        assert [j["state"] for j in queue_state(cs2_home)[0]] == ["RUNNING", "PENDING", "PENDING"]
        assert not list(out["b"].iterdir())  # B did not jump the queue
        gate.touch()
        a_out, a_err = a.communicate(timeout=HANG_S)
        b_out, b_err = b.communicate(timeout=HANG_S)
        assert a.returncode == 0 and b.returncode == 0, (a_err, b_err)
    finally:
        gate.touch()
        blocker.wait(timeout=HANG_S)
    a_id = jobs[1]["id"]
    assert f"srun: job {a_id} queued and waiting for resources" in a_err
    assert f"srun: job {a_id} has been allocated resources" in a_err
    # A was allocated first (in the same pass as B at the latest), both ran
    ended = {j["id"]: j for j in queue_state(cs2_home)[0]}
    assert ended[jobs[1]["id"]]["started_at"] <= ended[jobs[2]["id"]]["started_at"]
    assert len(records(out["a"])) == 4 and len(records(out["b"])) == 1
    assert queue_state(cs2_home)[1] == []  # every node free again


def test_kill_9_of_a_launcher_leaks_no_node(tmp_path, cs2_home):
    out = tmp_path / "env"
    out.mkdir()
    launcher = start(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--tasks-per-node=2",
            "--cpus-per-task=1",
            "python",
            "-c",
            RECORD,
            str(out),
            "600",
        ]
    )
    try:
        wait_for(lambda: len(list(out.glob("*.json"))) == 6)
        assert len(queue_state(cs2_home)[1]) == 3
        pids = [int(r["pid"]) for r in records(out).values()]
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=HANG_S)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    # a second process sees the launcher gone: the job FAILED, its nodes free
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and [(j["state"], j["reason"]) for j in jobs] == [("FAILED", "LauncherDied")]
    # and its tasks went with it (PR_SET_PDEATHSIG)

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[1].startswith("Z")
        except FileNotFoundError:
            return True

    wait_for(lambda: all(gone(p) for p in pids), timeout=HANG_S)


@pytest.mark.slow
def test_kill_9_of_a_queued_launcher_unblocks_the_queue(tmp_path, cs2_home):
    gate = tmp_path / "gate"
    wse = script("csrun_wse")
    blocker = start(
        [
            wse,
            "--total-nodes=15",
            "--tasks-per-node=1",
            "--cpus-per-task=1",
            "python",
            "-c",
            HOLD,
            str(gate),
        ]
    )
    try:
        wait_for(lambda: _running(cs2_home))
        big = start(
            [
                wse,
                "--total-nodes=16",
                "--tasks-per-node=1",
                "--cpus-per-task=1",
                "python",
                "-c",
                "pass",
            ]
        )
        wait_for(lambda: len(queue_state(cs2_home)[0]) == 2)
        big.send_signal(signal.SIGKILL)
        big.wait(timeout=HANG_S)
        # the dead head no longer blocks: a one-node csrun_cpu job gets the free worker
        small = run([script("csrun_cpu"), "python", "-c", "print('ran')"], timeout=HANG_S)
        assert small.returncode == 0 and "ran" in small.stdout
    finally:
        gate.touch()
        blocker.wait(timeout=HANG_S)


def test_cancel_is_owner_or_admin_only(cs2_home):
    store = Store.open()
    req = JobRequest(components=(Component(1, 1),), command=("python",))
    job_id = queue.submit(store, req, user="alice")
    with pytest.raises(PermissionDenied):
        queue.cancel(store, job_id, user="bob", admin=False)
    queue.cancel(store, job_id, user="carol", admin=True)
    jobs = queue.jobs(store, all_states=True)
    assert [(j.id, j.state) for j in jobs] == [(job_id, "CANCELLED")]


def test_jobs_cancel_stops_a_running_launch(tmp_path, cs2_home):
    out = tmp_path / "env"
    out.mkdir()
    launcher = start(
        [
            script("csrun_wse"),
            "--total-nodes=2",
            "--tasks-per-node=1",
            "--cpus-per-task=1",
            "python",
            "-c",
            RECORD,
            str(out),
            "600",
        ]
    )
    wait_for(lambda: len(list(out.glob("*.json"))) == 2)
    job_id = _running(cs2_home)[0]["id"]
    res = run([script("cs"), "-c", f"jobs cancel {job_id}+0"])
    assert res.returncode == 0 and f"Cancelled job {job_id}" in res.stdout
    _, err = launcher.communicate(timeout=HANG_S)
    assert launcher.returncode == 128 + signal.SIGTERM
    assert "srun: Job step aborted" in err
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and jobs[0]["state"] == "CANCELLED"


def test_jobs_show_lists_het_components(tmp_path, cs2_home):
    gate = tmp_path / "gate"
    launcher = start(
        [
            script("csrun_wse"),
            "--total-nodes=4",
            "--single-task-nodes=2",
            "--tasks-per-node=1",
            "--cpus-per-task=1",
            "python",
            "-c",
            HOLD,
            str(gate),
        ]
    )
    try:
        wait_for(lambda: _running(cs2_home))
        res = run([script("cs"), "-c", "jobs show"])
        assert res.returncode == 0, res.stderr
        lines = res.stdout.splitlines()
        assert lines[0].split() == [
            "JOBID",
            "NAME",
            "USER",
            "ST",
            "TIME",
            "NODES",
            "NODELIST(REASON)",
        ]
        rows = [ln.split() for ln in lines[2:]]
        assert [r[0].split("+")[1] for r in rows] == ["0", "1", "2"]
        assert [r[3] for r in rows] == ["R", "R", "R"]
        assert [r[-1] for r in rows] == ["chief-0", "worker-0", "worker-[1-2]"]
        shown = run([script("cs"), "-c", "jobs show --output-format json"])
        (job,) = json.loads(shown.stdout)
        assert job["state"] == "RUNNING" and job["reason"] is None  # null, not "None"
    finally:
        gate.touch()
        launcher.wait(timeout=HANG_S)
    assert os.environ["CS2_HOME"] == str(cs2_home)
