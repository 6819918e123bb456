"""Every process a task starts ends with the job: a child, a grandchild, and one that left its
session, under a normal end, a task's failure, `jobs cancel`, Ctrl-C and kill -9 of the
launcher; the job's nodes are freed only once they are gone (system/sched/guard.py)."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest
from launch_helpers import HANG_S, queue_state, script, start, wait_for


def _tagged(tag: str) -> list[int]:
    """Live processes whose command line carries `tag` (zombies are gone)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if tag.encode() in cmd and state not in (b"Z", b"X"):
            out.append(int(entry))
    return out


def _task(tmp: Path, tag: str, then: str) -> list[str]:
    """A task (bash) that starts a child subshell with a grandchild sleep, plus a process that
    leaves the task's session (setsid), says it is ready, then does `then`."""
    body = (
        f"( sleep 600.{tag}1 & wait ) & setsid sleep 600.{tag}2 & "
        f"touch {tmp}/ready.$SLURM_PROCID; {then}"
    )
    return ["bash", "-c", body]


def _launch(tmp: Path, tag: str, then: str, tasks: int = 2):
    proc = start(
        [
            script("csrun_wse"),
            "--total-nodes",
            "1",
            "--tasks-per-node",
            str(tasks),
            *_task(tmp, tag, then),
        ]
    )
    wait_for(lambda: len(list(tmp.glob("ready.*"))) == tasks, timeout=HANG_S)
    wait_for(lambda: len(_tagged(tag)) >= 2 * tasks, timeout=HANG_S)  # both sleeps of every task
    return proc


@pytest.mark.parametrize("how", ["end", "failure", "cancel", "ctrl-c"])
def test_nothing_a_task_started_outlives_the_job(tmp_path, cs2_home, how):
    tag = str(uuid.uuid4().int % 10**8).zfill(8)
    then = {
        "end": "sleep 0.5; exit 0",
        "failure": "[ $SLURM_PROCID = 1 ] && { sleep 3; exit 3; }; sleep 60",
        "cancel": "sleep 60",
        "ctrl-c": "sleep 60",
    }[how]
    proc = _launch(tmp_path, tag, then)
    if how == "cancel":
        from cs2sim.system.sched import queue
        from cs2sim.system.store import Store

        with Store.open(cs2_home) as store:
            (job,) = [j for j in queue.jobs(store) if j.state == "RUNNING"]
            queue.cancel(store, job.id, user="root", admin=True)
    elif how == "ctrl-c":
        proc.send_signal(signal.SIGINT)
    code = proc.wait(HANG_S)
    assert code == {"end": 0, "failure": 3, "cancel": 143, "ctrl-c": 130}[how], proc.stderr.read()
    assert _tagged(tag) == []  # gone by the time the launcher exits
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and jobs[-1]["state"] != "RUNNING"


def test_kill_9_of_the_launcher_ends_every_process_before_the_nodes_are_freed(tmp_path, cs2_home):
    tag = str(uuid.uuid4().int % 10**8).zfill(8)
    proc = _launch(tmp_path, tag, "sleep 60")
    jobs, nodes = queue_state(cs2_home)
    assert jobs[-1]["state"] == "RUNNING" and nodes
    proc.send_signal(signal.SIGKILL)
    proc.wait(HANG_S)
    wait_for(lambda: not _tagged(tag))  # the guard ended them: the sleeps last 600 s
    # the next reader finds the job's process (its guard) gone: FAILED, nodes freed
    jobs, nodes = wait_for(
        lambda: (s := queue_state(cs2_home))[0][-1]["state"] != "RUNNING" and s, timeout=HANG_S
    )
    assert jobs[-1]["state"] == "FAILED" and jobs[-1]["reason"] == "LauncherDied"
    assert nodes == []
