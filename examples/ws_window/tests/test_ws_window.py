"""The example script's own test suite, written with cs2sim's testing kit (no CS-2 needed).

The fixtures (cs2_system, ...) come from the kit's pytest plugin, installed with cs2sim.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "ws_window.py"
CS = f"{shlex.quote(sys.executable)} -m cs2sim.csshell"  # `cs`, without relying on PATH

pytestmark = pytest.mark.slow  # the example's whole jobs


def window(system, *job: str, extra: tuple[str, ...] = ()):
    return system.run([sys.executable, str(SCRIPT), "--cs", CS, *extra, "--", *job])


def test_runs_the_job_in_weight_streaming_and_switches_back(cs2_system, tmp_path):
    seen = tmp_path / "seen.txt"
    job = (
        sys.executable,
        "-c",
        "import subprocess, sys; out = subprocess.run([sys.executable, '-m', 'csshell', '-c', "
        "'config execmode show'], capture_output=True, text=True).stdout; "
        f"open({str(seen)!r}, 'w').write(out)",
    )
    result = window(cs2_system, *job)
    assert result.exit_code == 0, result.errors
    assert seen.read_text() == "Configured Execution Mode : WEIGHT_STREAMING\n"
    assert cs2_system.state == "ACTIVE" and cs2_system.active_mode == "PIPELINED"
    commands = [e.command for e in cs2_system.audit() if e.command != "booted"]
    assert commands == ["system standby", "config execmode setup", "system activate"] * 2


def test_already_in_weight_streaming_changes_nothing(cs2_system):
    cs2_system.put_in("ACTIVE", "WEIGHT_STREAMING")
    result = window(cs2_system, sys.executable, "-c", "pass")
    assert result.exit_code == 0
    assert [e.command for e in cs2_system.audit()] == ["testkit put_in"]


def test_the_jobs_exit_code_is_the_scripts_and_the_mode_is_restored(cs2_system):
    result = window(cs2_system, sys.executable, "-c", "raise SystemExit(7)")
    assert result.exit_code == 7
    assert "the job exited 7" in result.output
    assert cs2_system.active_mode == "PIPELINED"


def test_a_faulted_system_is_left_alone(cs2_system):
    cs2_system.put_in("FAULT", reason="fabric link down")
    result = window(cs2_system, sys.executable, "-c", "pass")
    assert result.exit_code == 3
    assert "FAULT (fabric link down)" in result.errors
    assert cs2_system.state == "FAULT"


def test_a_busy_system_is_left_alone(cs2_system):
    job = cs2_system.hold_job(user="alice")
    result = window(cs2_system, sys.executable, "-c", "pass")
    assert result.exit_code == 4
    assert f"jobs are running on the system ({job.id})" in result.errors
    assert [e.command for e in cs2_system.audit()] == ["job start"]
    cs2_system.release_job(job)
    assert window(cs2_system, sys.executable, "-c", "pass").exit_code == 0


def test_a_fault_during_the_job_is_reported_and_the_mode_restored(cs2_system):
    """The kit's fault injection: the CS-2 faults while the window's training job runs."""
    work = cs2_system.model_copy("gptj")
    saved = work / "model_dir"
    fault = cs2_system.fault_when_running(
        delay=0.2, when=lambda: any(saved.glob("model-ckpt-*.npz"))
    )
    job = (
        cs2_system.tool_path("csrun_wse"),
        "--total-nodes",
        "3",
        "--tasks-per-node",
        "2",
        "--cpus-per-task",
        "16",
        "--single-task-nodes",
        "2",
        "python-ws",
        "run.py",
        "--model_dir",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--params",
        "configs/params_continuous_pretraining.yaml",
        "--mode",
        "train",
        "--max_steps",
        "100000",
        "--save_checkpoints_steps",
        "5",
    )
    result = cs2_system.run([sys.executable, str(SCRIPT), "--cs", CS, "--", *job], cwd=work)
    assert fault.wait(), result.output[-3000:] + result.errors[-3000:]
    assert result.exit_code == 75, result.output[-2000:] + result.errors[-2000:]
    assert "the job exited 75" in result.output
    # the script put the system back into the mode it found, clearing the fault on the way
    assert (cs2_system.state, cs2_system.active_mode) == ("ACTIVE", "PIPELINED")
