"""The kit's launcher helpers and fault injection, against real launcher runs."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow

WS_JOB = (
    "--total-nodes",
    "4",
    "--tasks-per-node",
    "2",
    "--cpus-per-task",
    "16",
    "--single-task-nodes",
    "2",
    "--cyclic",
    "python-ws",
    "run.py",
    "--model_dir",
    "model_dir",
    "--params",
    "configs/params_continuous_pretraining.yaml",
    "--mode",
    "train",
)


def fc_job(system, steps: int, *extra: str) -> tuple[str, ...]:
    return (
        "--total-nodes",
        "3",
        "--tasks-per-node",
        "2",
        "--cpus-per-task",
        "16",
        "python",
        "run.py",
        "--mode",
        "train",
        "-p",
        "configs/params_small.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        system.ip,
        "--max_steps",
        str(steps),
        *extra,
    )


def test_csrun_wse_returns_the_job_its_tasks_and_model_dir(cs2_system):
    cs2_system.put_in("ACTIVE", "WEIGHT_STREAMING")
    work = cs2_system.model_copy("gptj")
    result = cs2_system.csrun_wse(*WS_JOB, "--cs_ip", cs2_system.ip, "--max_steps", "2", cwd=work)
    assert result.exit_code == 0, result.output[-3000:] + result.errors[-2000:]
    assert result.job.state == "COMPLETED" and result.job_id == result.job.id
    assert [len(n) for n in result.job.nodes] == [1, 1, 2]
    assert sorted(result.tasks) == [0, 1, 2, 3, 4, 5]
    assert "Streamers are ready" in result.tasks[0]
    assert "coordinator" in result.tasks[1]
    assert result.model_dir == work / "model_dir"
    assert (result.model_dir / "model-ckpt-2.npz").is_file()


def test_csrun_cpu_compiles_on_one_node(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    result = cs2_system.csrun_cpu(
        "python",
        "run.py",
        "--mode=compile_only",
        "-p",
        "configs/params_small.yaml",
        "-o",
        "model_dir",
        cwd=work,
    )
    assert result.exit_code == 0, result.errors
    assert result.job is not None and [len(n) for n in result.job.nodes] == [1]
    assert list(result.model_dir.glob("cs_*/compile_report.txt"))


def test_a_refused_job_queues_nothing(cs2_system):
    work = cs2_system.model_copy("gptj")  # PIPELINED system, weight-streaming job
    result = cs2_system.csrun_wse(*WS_JOB, "--cs_ip", cs2_system.ip, "--max_steps", "2", cwd=work)
    assert result.exit_code == 69
    assert result.job is None and result.tasks == {}
    # the refusal is on stderr; `combined` is what the user saw on the terminal
    assert result.output == "" and result.combined == result.errors
    assert result.combined.startswith("error: System cs2-1 is ACTIVE in PIPELINED mode")


def test_fault_at_step_stops_the_run_there_with_its_checkpoints(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    fault = cs2_system.fault_at_step(12, reason="fabric link down")
    argv = fc_job(cs2_system, 200000, "--save_checkpoints_steps", "5")
    proc = cs2_system.start_launch("csrun_wse", *argv, cwd=work)
    job = cs2_system.wait_for_running_job(timeout=120)
    assert cs2_system.running_job().id == job.id  # answered at once while it runs
    result = cs2_system.finish_launch(proc, argv, cwd=work)
    assert fault.wait() and cs2_system.state == "FAULT"
    assert result.exit_code == 75, result.combined[-3000:]
    assert "training stopped before global step 12" in result.combined
    assert "`system standby` and `system activate`" in result.combined
    assert sorted(p.name for p in result.model_dir.glob("model-ckpt-*.npz")) == [
        "model-ckpt-10.npz",
        "model-ckpt-5.npz",
    ]
    faults = [e for e in cs2_system.audit() if e.command == "system fault"]
    assert [(e.user, e.detail) for e in faults] == [("testkit", "fabric link down")], faults
    assert cs2_system.running_job() is None


def test_fault_after_checkpoint_leaves_one_to_resume_from(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    fault = cs2_system.fault_after_checkpoint(work / "model_dir")
    result = cs2_system.csrun_wse(
        *fc_job(cs2_system, 200000, "--save_checkpoints_steps", "50"), cwd=work
    )
    assert fault.wait() and cs2_system.state == "FAULT"
    assert result.exit_code == 75, result.combined[-3000:]
    assert "went to FAULT" in result.combined
    assert list(result.model_dir.glob("model-ckpt-*.npz"))


def test_a_lost_node_fails_the_job_naming_it(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    lost = cs2_system.lose_node("worker-1", delay=1.0)
    result = cs2_system.csrun_wse(*fc_job(cs2_system, 200000), cwd=work)
    assert lost.wait()
    assert result.exit_code == 137, result.errors[-2000:]
    assert "srun: error: worker-1: task" in result.errors
    assert result.job.state == "FAILED"


def test_a_hung_streamer_is_named_by_the_chief(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    stall = cs2_system.stall_streamer(delay=1.0, timeout_s=3)
    result = cs2_system.csrun_wse(*fc_job(cs2_system, 200000), cwd=work, timeout=180)
    assert stall.wait()
    assert result.exit_code != 0
    text = result.output + result.errors
    assert "streamer" in text.lower() and "task" in text


def test_slow_input_is_reported_as_a_bottleneck(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    cs2_system.slow_input(rounds=1000)  # ~3 ms of SHA-256 per sample: the input is the bound
    result = cs2_system.csrun_wse(*fc_job(cs2_system, 20), cwd=work)
    assert result.exit_code == 0, result.errors[-2000:]
    perf = json.loads((result.model_dir / "performance" / "performance.json").read_text())
    assert perf["suspected_input_bottleneck"] is True
