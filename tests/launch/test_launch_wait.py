"""A queued launcher sleeps until its job is decided (woken through its FIFO), costs
no CPU while it waits, and leaves the queue as srun does when cancelled or interrupted."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from launch_helpers import HANG_S, queue_state, run, script, start, wait_for

from cs2sim.system.sched import queue
from cs2sim.system.sched.backend import RECHECK_ENV
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.sched.wake import WAKE_DIR, Waiter, wake
from cs2sim.system.store import Store

WHOLE = ["--total-nodes=16", "--tasks-per-node=1", "--cpus-per-task=1"]
N_WAITERS = 12
WINDOW_S = 4.0
CPU_BOUND_S = 0.15  # CPU s ALL waiters may use in the window (the old 50 ms poll used ~0.4 s)

pytestmark = pytest.mark.slow  # launchers queued behind whole jobs


def _blocker(store: Store) -> int:
    """A job of this (live) test process holding every node."""
    nodes = queue.cluster_nodes(store)
    return queue.submit(
        store, JobRequest((Component(len(nodes), 1, 1),), ("hold",)), user="tester", nodes=nodes
    )


def _pending(home: Path) -> list[dict]:
    return [j for j in queue_state(home)[0] if j["state"] == "PENDING"]


def _cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def test_a_fifo_wakes_only_its_reader(tmp_path):
    with Waiter(tmp_path, 7) as w7, Waiter(tmp_path, 8) as w8:
        assert not w7.wait(0.0) and not w8.wait(0.0)
        assert wake(tmp_path, [8, 99]) == 1  # 99: no one waits, nothing happens
        assert not w7.wait(0.0) and w8.wait(0.0)
        assert not w8.wait(0.0)  # drained: one wake-up, one return
    assert list((tmp_path / WAKE_DIR).iterdir()) == []  # closed waiters leave no FIFO


def test_a_dead_readers_fifo_is_removed_by_the_next_wake(tmp_path):
    w = Waiter(tmp_path, 3)
    os.close(w.fd)  # the launcher died without cleaning up: its FIFO stays
    assert (tmp_path / WAKE_DIR / "3").exists()
    assert wake(tmp_path, [3]) == 0
    assert not (tmp_path / WAKE_DIR / "3").exists()


def test_waiting_launchers_use_no_cpu_and_start_when_woken(tmp_path, cs2_home, monkeypatch):
    # the safety re-check is pushed out of the test's reach: only a wake-up can start the jobs
    monkeypatch.setenv(RECHECK_ENV, "600")
    store = Store.open()
    blocker = _blocker(store)
    procs = [
        start([script("csrun_wse"), *WHOLE, "python", "-c", "print('ran')"])
        for _ in range(N_WAITERS)
    ]
    wait_for(lambda: len(_pending(cs2_home)) == N_WAITERS, timeout=HANG_S, step=0.5)
    time.sleep(1.0)  # past their start-up
    pids = [p.pid for p in procs]
    before = _cpu_seconds(pids)
    time.sleep(WINDOW_S)
    used = _cpu_seconds(pids) - before
    # generous: the figure on an idle machine is ~0 (bench/queue_bench.py has the tight one)
    assert used < CPU_BOUND_S, f"{N_WAITERS} waiting launchers used {used:.2f} CPU s"
    queue.finish(store, blocker, "COMPLETED", 0)  # frees the nodes: the head is woken, and so on
    for p in procs:
        out, err = p.communicate(timeout=HANG_S)
        assert p.returncode == 0, err
        assert "queued and waiting for resources" in err and "has been allocated" in err
        assert out.splitlines().count("ran") == 16
    # FIFO: each job started after the one submitted before it
    jobs = [j for j in queue_state(cs2_home)[0] if j["id"] != blocker]
    starts = [j["started_at"] for j in sorted(jobs, key=lambda j: j["id"])]
    assert starts == sorted(starts)


def test_cancelling_a_queued_launcher_ends_it_as_srun_does(tmp_path, cs2_home, monkeypatch):
    monkeypatch.setenv(RECHECK_ENV, "600")
    store = Store.open()
    _blocker(store)
    waiting = start([script("csrun_wse"), *WHOLE, "python", "-c", "pass"])
    job = wait_for(lambda: _pending(cs2_home))[0]["id"]
    res = run([script("cs"), "-c", f"jobs cancel {job}"])
    assert res.returncode == 0 and f"Cancelled job {job} (queued" in res.stdout
    _, err = waiting.communicate(timeout=HANG_S)  # woken: HANG_S is short of the re-check
    assert waiting.returncode == 1  # srun: 1, not 128 + SIGTERM
    assert err.splitlines()[-2:] == [
        "srun: Job has been cancelled",
        "srun: error: Unable to allocate resources: Job/step already completing or completed",
    ]
    log = [e for e in _audit(store) if e.command == "jobs cancel"]
    assert log[-1].outcome == "ok" and f"job {job} (" in log[-1].detail


def test_ctrl_c_of_a_queued_launcher_revokes_it_as_srun_does(cs2_home, monkeypatch):
    monkeypatch.setenv(RECHECK_ENV, "600")
    store = Store.open()
    _blocker(store)
    waiting = start([script("csrun_wse"), *WHOLE, "python", "-c", "pass"])
    job = wait_for(lambda: _pending(cs2_home))[0]["id"]
    waiting.send_signal(signal.SIGINT)
    _, err = waiting.communicate(timeout=HANG_S)
    assert waiting.returncode == 1
    assert err.splitlines()[-1] == f"srun: Job allocation {job} has been revoked"
    assert [j["state"] for j in queue_state(cs2_home)[0] if j["id"] == job] == ["CANCELLED"]


def test_a_crashed_holder_is_found_by_the_safety_recheck(tmp_path, cs2_home, monkeypatch):
    gate = tmp_path / "gate"
    holder = start(
        [
            script("csrun_wse"),
            *WHOLE,
            "python",
            "-c",
            "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)",
            str(gate),
        ]
    )
    wait_for(lambda: [j for j in queue_state(cs2_home)[0] if j["state"] == "RUNNING"])
    monkeypatch.setenv(RECHECK_ENV, "0.5")
    waiting = start([script("csrun_wse"), *WHOLE, "python", "-c", "print('ran')"])
    wait_for(lambda: _pending(cs2_home))
    holder.send_signal(signal.SIGKILL)  # no release, no wake-up: only the re-check can see it
    holder.wait(timeout=HANG_S)
    out, err = waiting.communicate(timeout=HANG_S)
    gate.touch()
    assert waiting.returncode == 0, err
    assert out.splitlines().count("ran") == 16


def _audit(store: Store) -> list:
    from cs2sim.system import audit

    return audit.entries(store)
