"""Kill-on-bad-exit, exit codes, Ctrl-C, gating before allocation, and csrun_cpu."""

from __future__ import annotations

import json
import signal

import pytest
from launch_helpers import HANG_S, RECORD, queue_state, records, run, script, start, wait_for

from cs2sim.system.machine import Machine
from cs2sim.system.state import Action, ExecMode
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

SMALL = ["--total-nodes=3", "--tasks-per-node=2", "--cpus-per-task=1"]


def test_one_failing_task_stops_the_rest_and_sets_the_exit_code(tmp_path):
    body = (
        "import os, sys, time\np = int(os.environ['SLURM_PROCID'])\n"
        "if p == 3: time.sleep(0.3); sys.exit(7)\ntime.sleep(60)"
    )
    res = run([script("csrun_wse"), *SMALL, "python", "-c", body])
    assert res.returncode == 7
    err = res.stderr.splitlines()
    assert err[0] == "srun: error: worker-0: task 3: Exited with exit code 7"
    assert err[1].startswith("srun: Terminating StepId=")
    # the others were stopped (not left running for 60 s), reported per node as srun does
    assert "srun: error: chief-0: tasks 0-1: Terminated" in err
    assert "srun: error: worker-0: task 2: Terminated" in err
    assert "srun: error: worker-1: tasks 4-5: Terminated" in err


def test_a_task_killed_by_a_signal_gives_128_plus_signal():
    body = (
        "import os, signal, time\nif os.environ['SLURM_PROCID'] == '1': "
        "os.kill(os.getpid(), signal.SIGKILL)\ntime.sleep(60)"
    )
    res = run([script("csrun_wse"), *SMALL, "python", "-c", body])
    assert res.returncode == 128 + signal.SIGKILL
    assert res.stderr.splitlines()[0] == "srun: error: chief-0: task 1: Killed"


def test_python_tasks_ignore_sigpipe_as_a_fresh_interpreter_does():
    """A write to a closed pipe raises BrokenPipeError in `python` (which ignores SIGPIPE); a
    task is not killed by the signal (a streamer writing to a chief that just ended was), while
    an exec'd program keeps the default disposition."""
    body = (
        "import os\nr, w = os.pipe(); os.close(r)\ntry: os.write(w, b'x')\n"
        "except BrokenPipeError: print('EPIPE', os.environ['SLURM_PROCID'])"
    )
    res = run([script("csrun_wse"), *SMALL, "python", "-c", body])
    assert res.returncode == 0, res.stderr
    assert sorted(line for line in res.stdout.splitlines() if line.startswith("EPIPE ")) == [
        f"EPIPE {i}" for i in range(6)
    ]
    sh = run([script("csrun_wse"), *SMALL, "sh", "-c", "trap - PIPE; kill -PIPE $$"])
    assert sh.returncode == 128 + signal.SIGPIPE


def test_worst_exit_code_wins_and_success_is_zero():
    body = "import os, sys\nsys.exit({'1': 3, '4': 9}.get(os.environ['SLURM_PROCID'], 0))"
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--tasks-per-node=2",
            "--cpus-per-task=1",
            "python",
            "-c",
            body,
        ]
    )
    assert res.returncode in (3, 9)  # the first failure stops the rest; its code is the worst
    ok = run([script("csrun_wse"), *SMALL, "python", "-c", "pass"])
    assert ok.returncode == 0 and ok.stderr == ""


def test_exec_path_for_non_python_commands():
    res = run([script("csrun_wse"), *SMALL, "sh", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME"'])
    assert res.returncode == 0
    assert sorted(res.stdout.splitlines()[1:]) == [
        "0 chief-0",
        "1 chief-0",
        "2 worker-0",
        "3 worker-0",
        "4 worker-1",
        "5 worker-1",
    ]
    bad = run([script("csrun_wse"), *SMALL, "no-such-program-xyz"])
    assert bad.returncode == 2 and "execve(): no-such-program-xyz" in bad.stderr


def test_ctrl_c_stops_the_job_and_frees_its_nodes(tmp_path, cs2_home):
    out = tmp_path / "env"
    out.mkdir()
    launcher = start([script("csrun_wse"), *SMALL, "python", "-c", RECORD, str(out), "600"])
    wait_for(lambda: len(list(out.glob("*.json"))) == 6)
    launcher.send_signal(signal.SIGINT)
    _, err = launcher.communicate(timeout=HANG_S)
    assert launcher.returncode == 130
    assert "srun: Job step aborted" in err
    jobs, nodes = queue_state(cs2_home)
    assert nodes == [] and jobs[-1]["state"] == "CANCELLED"


def _standby_ws(cs2_home):
    store = Store.open()
    m = Machine(store)
    who = local_identity(store)
    m.perform(who, Action.STANDBY)
    return store, m, who


@pytest.mark.slow
def test_gating_refuses_before_allocating(cs2_home):
    # the system is ACTIVE in PIPELINED mode: a weight-streaming job is refused
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes=4",
            "--single-task-nodes=2",
            "--tasks-per-node=1",
            "python-ws",
            "run.py",
            "--cs_ip",
            "127.0.1.1",
        ]
    )
    assert res.returncode == 69, res.stderr
    assert res.stderr.startswith("error: ") and "PIPELINED" in res.stderr
    assert "Launching:" not in res.stdout
    jobs, nodes = queue_state(cs2_home)
    assert jobs == [] and nodes == []
    # in STANDBY even a pipelined job is refused
    store, m, who = _standby_ws(cs2_home)
    res = run([script("csrun_wse"), "--total-nodes=2", "python", "run.py", "--cs_ip=cs2-1"])
    assert res.returncode == 69 and "STANDBY" in res.stderr
    assert queue_state(cs2_home) == ([], [])
    # an address that names no system is a usage error
    res = run([script("csrun_wse"), "python", "run.py", "--cs_ip", "10.9.9.9"])
    assert res.returncode == 2 and "names no CS-2 system" in res.stderr
    # once WEIGHT_STREAMING is ACTIVE, the ws job is let through (to the scheduler)
    m.perform(who, Action.SETUP, mode=ExecMode.WEIGHT_STREAMING)
    m.perform(who, Action.ACTIVATE)
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--single-task-nodes=2",
            "--tasks-per-node=1",
            "--cpus-per-task=1",
            "python-ws",
            "-c",
            "import os; print(os.environ['CS2SIM_FLOW'])",
            "--cs_ip",
            "127.0.1.1:9000",
        ]
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1:] == ["ws", "ws", "ws"]
    store.close()


@pytest.mark.slow
def test_csrun_cpu_runs_on_one_node_and_never_touches_the_cs2(tmp_path, cs2_home):
    out = tmp_path / "env"
    out.mkdir()
    store, m, who = _standby_ws(cs2_home)  # the CS-2 is down: csrun_cpu does not care
    res = run([script("csrun_cpu"), "python", "-c", RECORD, str(out)])
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == (
        "Running: srun --pty --nodes=1 --exclude=chief-0 --exclusive singularity exec -B , "
        f"/opt/cerebras/cbcore_latest.sif python -c {RECORD} {out}"
    )
    env = records(out)[0]
    assert env["SLURM_NNODES"] == "1" and env["SLURM_NTASKS"] == "1"
    assert env["SLURMD_NODENAME"] == "worker-0"  # not the CS-2's node
    assert m.running_jobs() == []
    jobs, nodes = queue_state(cs2_home)
    assert [j["state"] for j in jobs] == ["COMPLETED"] and nodes == []
    # --alloc-node=False: here, no allocation, no Slurm environment
    res = run(
        [
            script("csrun_cpu"),
            "--alloc-node=False",
            "python",
            "-c",
            "import json, os; print(json.dumps('SLURM_PROCID' in os.environ))",
        ]
    )
    assert res.returncode == 0
    assert res.stdout.splitlines() == [
        "Running: singularity exec -B , /opt/cerebras/cbcore_latest.sif python -c "
        "import json, os; print(json.dumps('SLURM_PROCID' in os.environ))",
        json.dumps(False),
    ]
    assert len(queue_state(cs2_home)[0]) == 1
    # --logging=False: no echo; exit code passes through
    res = run([script("csrun_cpu"), "--logging", "False", "python", "-c", "raise SystemExit(4)"])
    assert res.returncode == 4 and res.stdout == ""
    store.close()
