"""What every task of a job would print is said once, by the chief.

Under csrun_wse every task runs the same run.py command; before the tasks split into their parts
they meet the same errors, and Ctrl-C reaches them all. Without that, a 6-task job would print
its "interrupted" sentence six times and a 49-streamer job its AUTOTUNE notice 49 times.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

LAYOUT = ("--total-nodes", "3", "--tasks-per-node", "2", "--cpus-per-task", "16")
INTERRUPTED = "error: interrupted"


def test_ctrl_c_in_a_six_task_job_says_interrupted_once(cs2_system):
    pexpect = pytest.importorskip("pexpect")
    work = cs2_system.model_copy("fc_mnist")
    argv = [
        *LAYOUT,
        "python",
        "run.py",
        "--mode",
        "train",
        "-p",
        "configs/params_small.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--max_steps",
        "1000000",
    ]
    child = pexpect.spawn(
        cs2_system.tool_path("csrun_wse"),
        argv,
        cwd=str(work),
        env=cs2_system.env,
        encoding="utf-8",
        timeout=600,  # a hang guard: a loaded host takes minutes to its first checkpoint
        dimensions=(40, 200),
    )
    child.delaybeforesend = None
    try:
        child.expect_exact("Saved checkpoint")  # training, with 5 streamers feeding the chief
        child.sendcontrol("c")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    tail = child.before
    assert "srun: Job step aborted" in tail
    assert tail.count(INTERRUPTED) <= 1, tail[-3000:]  # never once per task
    # the chief says it, unless a loaded machine kept it past srun's grace (then it is Killed)
    if "chief-0: task 0: Killed" not in tail:
        assert tail.count(INTERRUPTED) == 1, tail[-3000:]
        assert child.exitstatus == 130


def test_an_error_every_task_meets_is_said_once(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    result = cs2_system.csrun_wse(
        *LAYOUT,
        "python",
        "run.py",
        "--mode",
        "train",
        "-p",
        "configs/missing.yaml",
        "--cs_ip",
        cs2_system.ip,
        cwd=work,
    )
    assert result.exit_code == 1
    sentence = (
        "error: params file configs/missing.yaml not found; pass -p/--params with an existing file."
    )
    assert result.combined.count(sentence) == 1, result.combined
    assert "srun: error: chief-0: task 0: Exited with exit code 1" in result.combined


def test_a_host_job_says_once_that_it_is_not_on_the_cs2(cs2_system):
    """No --cs_ip: trains on the host CPU; the chief says so once, and the input pipeline's
    AUTOTUNE notice (params.yaml: num_parallel_calls 0) is said once, not by every streamer."""
    work = cs2_system.model_copy("fc_mnist")
    result = cs2_system.csrun_wse(
        *LAYOUT,
        "python",
        "run.py",
        "--mode",
        "train",
        "-o",
        "model_dir",
        "--max_steps",
        "2",
        cwd=work,
    )
    assert result.exit_code == 0, result.combined[-3000:]
    text = result.combined
    assert text.count("not on a CS-2") == 1, text
    assert "This job trains on the host CPU of node chief-0, not on a CS-2" in text
    assert text.count("num_parallel_calls 0 is AUTOTUNE") == 1, text
    assert "Train Device=cpu" in text
    assert "thread settings" not in text  # a developer's diagnostic: the debug log only
    assert "Input streamer" not in text  # the chief says "Waiting for 5 streamer(s)"
    assert "Waiting for 5 streamer(s) to prime the data pipeline" in text
