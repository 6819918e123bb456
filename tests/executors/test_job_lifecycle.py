"""A CS-2 run as the admin sees it from another process: listed while it runs, stopped by a
forced standby at its next step (checkpoint kept, resumable), freed when killed with -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from exec_helpers import CONFIGS

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.cli.main import model_home
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

HOME = model_home("fc_mnist")
LONG = ["--max_steps", "1000000"]

pytestmark = pytest.mark.slow  # whole runs stopped and resumed in other processes


def _params(tmp_path: Path, every: int = 25) -> str:
    """The small config checkpointing every `every` steps."""
    import yaml

    with open(HOME / "configs" / CONFIGS["fc_mnist"]) as f:
        doc = yaml.safe_load(f)
    doc["runconfig"]["checkpoint_steps"] = every
    doc["runconfig"]["keep_checkpoint_max"] = 100
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _spawn(model_dir: Path, *extra: str, every: int = 25, cs: bool = True) -> subprocess.Popen:
    target = ["--cs_ip", "cs2-1"] if cs else []
    return subprocess.Popen(
        [
            sys.executable,
            "run.py",
            "-m",
            "train",
            "-p",
            _params(model_dir.parent, every),
            "-o",
            str(model_dir),
            *target,
            *extra,
        ],
        cwd=HOME,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _wait(cond, what: str, run: subprocess.Popen | None = None, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        if run is not None and run.poll() is not None:
            raise AssertionError(
                f"the run exited ({run.returncode}) before {what}: "
                f"{run.stderr.read() if run.stderr else ''}"
            )
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _machine() -> tuple[Machine, object]:
    store = Store.open()
    return Machine(store), local_identity(store)


def test_job_is_listed_from_another_process_and_a_forced_standby_stops_it(tmp_path):
    run = _spawn(tmp_path / "run", *LONG)
    try:
        m, admin = _machine()
        jobs = _wait(lambda: m.status().running_jobs, "the job to be registered", run)
        assert jobs[0].pid == run.pid and "--cs_ip cs2-1" in jobs[0].command
        _wait(lambda: len(ckpt.list_checkpoints(tmp_path / "run")) >= 2, "two checkpoints", run)
        # an admin's plain standby is refused while the job runs
        try:
            m.standby(admin)
            raise AssertionError("standby with a running job was not refused")
        except Exception as e:  # noqa: BLE001
            assert "system standby --force" in str(e)
        assert run.poll() is None
        m.standby(admin, force=True)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 75, err
    last = ckpt.load_checkpoint(ckpt.list_checkpoints(tmp_path / "run")[-1])
    # the sentence is computed from the checkpoints that exist
    assert err.count("\n") == 1 and "went to STANDBY" in err
    assert (
        f'its last checkpoint is "{last.path}" (global step {last.step}), and running the '
        "same command again resumes from it, once an admin has run `system activate`"
    ) in err
    assert last.step >= 50 and last.step % 25 == 0
    m, admin = _machine()
    assert m.status().running_jobs == ()
    assert [e for e in m.audit() if e.command == "job end"][-1].detail.endswith("CANCELLED")
    # once active again, the same command resumes from the kept checkpoint
    m.activate(admin)
    again = subprocess.run(
        [
            sys.executable,
            "run.py",
            "-m",
            "train",
            "-p",
            _params(tmp_path),
            "-o",
            str(tmp_path / "run"),
            "--cs_ip",
            "cs2-1",
            "--max_steps",
            str(last.step + 5),
        ],
        cwd=HOME,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert f'Found latest checkpoint at "{last.path}"' in again.stdout
    assert f"Step={last.step + 5}," in again.stdout


def test_kill_9_leaves_no_running_job(tmp_path):
    run = _spawn(tmp_path / "run", *LONG)
    try:
        m, _ = _machine()
        jobs = _wait(lambda: m.status().running_jobs, "the job to be registered", run)
        _wait(lambda: ckpt.list_checkpoints(tmp_path / "run"), "training to start", run)
        os.kill(run.pid, signal.SIGKILL)
        run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    status = m.status()  # the next reader settles the dead job
    assert status.running_jobs == () and status.state is State.ACTIVE
    end = [e for e in m.audit() if e.command == "job end"][-1]
    assert end.detail.startswith(f"job {jobs[0].id} FAILED: process {run.pid}")


def test_a_run_stopped_before_its_first_checkpoint_says_it_starts_again_from_step_0(tmp_path):
    # "its checkpoints are kept ... resumes from the last one" must not be said here
    run = _spawn(tmp_path / "run", *LONG, every=10**6)
    try:
        m, admin = _machine()
        _wait(lambda: m.status().running_jobs, "the job to be registered", run)
        _wait(lambda: (tmp_path / "run" / "train").is_dir(), "training to start", run)
        m.standby(admin, force=True)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 75, err
    assert ckpt.list_checkpoints(tmp_path / "run") == []
    assert (
        "no checkpoint had been written yet, so running the same command again starts from "
        "global step 0, once an admin has run `system activate`."
    ) in err


def test_ctrl_c_says_what_the_checkpoints_on_disk_allow(tmp_path):
    run = _spawn(tmp_path / "run", *LONG, every=10**6, cs=False)
    try:
        _wait(lambda: (tmp_path / "run" / "train").is_dir(), "training to start", run)
        time.sleep(0.5)
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 130, err
    assert err.strip().endswith(
        "error: interrupted; no checkpoint had been written yet, so "
        "running the same command again starts from global step 0."
    )
