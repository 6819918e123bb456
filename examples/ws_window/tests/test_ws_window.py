"""The example script's own test suite, written with cs2sim's testing kit (no CS-2 needed).

The fixtures (cs2_system, ...) come from the kit's pytest plugin, installed with cs2sim.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "ws_window.py"
CS = f"{shlex.quote(sys.executable)} -m csshell"  # `cs`, without relying on PATH


def window(system, *job: str, extra: tuple[str, ...] = ()):
    return system.run([sys.executable, str(SCRIPT), "--cs", CS, *extra, "--", *job])


def test_runs_the_job_in_weight_streaming_and_switches_back(cs2_system, tmp_path):
    seen = tmp_path / "seen.txt"
    job = (sys.executable, "-c",
           "import subprocess, sys; out = subprocess.run([sys.executable, '-m', 'csshell', '-c', "
           "'config execmode show'], capture_output=True, text=True).stdout; "
           f"open({str(seen)!r}, 'w').write(out)")
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
