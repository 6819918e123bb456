"""--cs_ip runs are gated by the system model: every non-runnable state refuses with exit 69
before any work, naming the system, its state and mode and the fix; a runnable one registers a
job and finishes it; pipelined and weight streaming each need their own mode."""

from __future__ import annotations

import json

import pytest
from exec_helpers import CONFIGS

from cs2sim.runtime.cli.main import main, model_home
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

FC = str(model_home("fc_mnist") / "configs" / CONFIGS["fc_mnist"])


def _machine() -> tuple[Machine, object]:
    store = Store.open()
    return Machine(store), local_identity(store)


def _to_mode(mode: ExecMode) -> None:
    m, admin = _machine()
    m.standby(admin, force=True)
    m.setup_execmode(admin, mode)
    m.activate(admin)
    assert m.status().state is State.ACTIVE


def _params(tmp_path, num_csx: int) -> str:
    """The small config with runconfig.num_csx set (the --num_csx flag sets the same key)."""
    import yaml

    with open(FC) as f:
        doc = yaml.safe_load(f)
    doc["runconfig"]["num_csx"] = num_csx
    path = tmp_path / f"params_{num_csx}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _run(capsys, tmp_path, *extra: str, num_csx: int = 1) -> tuple[int, str, str]:
    params = FC if num_csx == 1 else _params(tmp_path, num_csx)
    code = main(
        "fc_mnist",
        ["-m", "train", "-p", params, "-o", str(tmp_path / "run"), "--max_steps", "3", *extra],
    )
    out, err = capsys.readouterr()
    return code, out, err


def _run_flag(capsys, tmp_path, *extra: str) -> tuple[int, str, str]:
    """With the --num_csx flag instead of the YAML key."""
    code = main(
        "fc_mnist",
        ["-m", "train", "-p", FC, "-o", str(tmp_path / "run"), "--max_steps", "3", *extra],
    )
    out, err = capsys.readouterr()
    return code, out, err


def _activating(m, admin, monkeypatch):
    m.standby(admin)
    monkeypatch.setenv("CS2_BOOT_SECONDS", "600")
    m.activate(admin)


@pytest.mark.parametrize("state", ["STANDBY", "ACTIVATING", "FAULT", "wrong mode"])
def test_every_non_runnable_state_refuses_with_exit_69_before_any_work(
    capsys, tmp_path, monkeypatch, state
):
    m, admin = _machine()
    if state == "STANDBY":
        m.standby(admin)
        fix = "`system activate`"
    elif state == "ACTIVATING":
        _activating(m, admin, monkeypatch)
        fix = "wait for it to become ACTIVE"
    elif state == "FAULT":
        m.inject_fault(admin, "fabric link down")
        fix = "`system standby` and `system activate`"
    else:
        monkeypatch.setenv("CS2SIM_FLOW", "ws")  # python-ws on a PIPELINED system
        fix = "`config execmode setup`"
    code, out, err = _run(capsys, tmp_path, "--cs_ip", "127.0.1.1:9000")
    assert code == 69, err
    assert err.count("\n") == 1 and err.startswith("error: System cs2-1 ")
    assert fix in err
    if state != "wrong mode":
        assert state in err
    else:
        assert "ACTIVE in PIPELINED mode" in err and "WEIGHT_STREAMING" in err
    assert not (tmp_path / "run").exists()  # refused before anything was written or compiled
    assert m.status().running_jobs == ()


def test_pipelined_run_on_a_weight_streaming_system_names_python_ws(capsys, tmp_path):
    _to_mode(ExecMode.WEIGHT_STREAMING)
    code, _, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1")
    assert code == 69 and "launch it with `python-ws`" in err


def test_unknown_system_is_a_usage_error_naming_the_known_ones(capsys, tmp_path):
    code, _, err = _run(capsys, tmp_path, "--cs_ip", "10.9.9.9")
    assert code == 2 and "cs2-1 (127.0.1.1)" in err


def test_num_csx_beyond_swarmx_or_on_pipelined_is_refused(capsys, tmp_path, monkeypatch):
    code, _, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1", num_csx=2)
    assert code == 1 and "pipelined run uses one CS-2" in err and err.count("\n") == 1
    _to_mode(ExecMode.WEIGHT_STREAMING)
    monkeypatch.setenv("CS2SIM_FLOW", "ws")
    code, _, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1", num_csx=500)
    assert code == 1 and "SwarmX serves at most 192" in err
    code, _, err = _run_flag(capsys, tmp_path, "--cs_ip", "cs2-1", "--num_csx", "193")
    assert code == 1 and "SwarmX serves at most 192" in err


@pytest.mark.parametrize(
    "flow,mode,num_csx", [("tf", ExecMode.PIPELINED, 1), ("ws", ExecMode.WEIGHT_STREAMING, 2)]
)
@pytest.mark.slow
def test_a_run_registers_its_job_and_finishes_it(
    capsys, tmp_path, monkeypatch, flow, mode, num_csx, cs2_home
):
    if mode is ExecMode.WEIGHT_STREAMING:  # num_csx 2 holds two systems: a cluster of two
        two = "".join(
            f"  - {{name: cs2-{i}, ip: 127.0.1.{i}, execmode: WEIGHT_STREAMING}}\n" for i in (1, 2)
        )
        Store.open()  # CS2_HOME exists
        (cs2_home / "cluster.yaml").write_text(f"systems:\n{two}")
        monkeypatch.setenv("CS2SIM_FLOW", flow)
    seen = []
    import cs2sim.runtime.job.cs_run as cs_run

    real = cs_run.CsRun.prepare

    def spy(self):  # the job is RUNNING while the run compiles and trains
        seen.extend(Machine(Store.open()).status().running_jobs)
        return real(self)

    monkeypatch.setattr(cs_run.CsRun, "prepare", spy)
    code, out, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1", num_csx=num_csx)
    assert code == 0, err
    assert len(seen) == 1 and seen[0].mode is mode and seen[0].state == "RUNNING"
    m, _ = _machine()
    assert m.status().running_jobs == ()
    ends = [e for e in m.audit() if e.command == "job end"]
    assert ends[-1].detail == f"job {seen[0].id} COMPLETED"
    perf = json.loads((tmp_path / "run" / "performance" / "performance.json").read_text())
    assert (perf["system"], perf["execution_mode"], perf["num_csx"]) == (
        "cs2-1",
        str(mode),
        num_csx,
    )
    assert perf["est_samples_per_sec"] > 0 and perf["programming_time"] > 0
    assert perf["compile_time"] > 0 and perf["samples_per_sec"] > 0
    # the milestones of the PSC Neocortex transcript or the Quickstart, in order (docs/sources.md)
    if mode is ExecMode.PIPELINED:
        marks = [
            "Starting Cerebras Compilation",
            "Programming CS-2 fabric",
            "Fabric programmed",
            "Coordinator fully up. Waiting for Streaming (using ",
            "Waiting for 1 streamer(s) to prime the data pipeline",
            "Streamers are ready",
            "Training finished with 192 samples in ",
        ]
    else:  # the Weight Streaming Quickstart's
        marks = [
            "Completed weight initialization on CPU in: ",
            "Loading CPU pre-initialized weights took ",
            "global_step = 3, loss = ",
            "Training finished with 192 samples in ",
            "Loss for final step: ",
        ]
    at = [out.find(mark) for mark in marks]
    assert -1 not in at and at == sorted(at), out
    import re

    line = r"Cerebras compilation completed: (\d+)/(\d+) \[\d\d:\d\ds, +[\d.]+s/stages\]"
    stages = re.search(line, out)
    assert stages and stages[1] == stages[2] and int(stages[1]) > 2


def test_failed_run_is_recorded_failed(capsys, tmp_path, monkeypatch):
    import cs2sim.runtime.job.cs_run as cs_run

    def broken(self):
        raise cs_run.RuntimeFailure("the fabric is on fire; call support.")

    monkeypatch.setattr(cs_run.CsRun, "prepare", broken)
    code, _, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1")
    assert code == 1 and "fabric is on fire" in err
    m, _ = _machine()
    assert m.status().running_jobs == ()
    assert [e for e in m.audit() if e.command == "job end"][-1].detail.endswith("FAILED")
    assert m.status().state is State.ACTIVE  # the system is untouched by a failed job


def test_under_a_launcher_the_run_uses_the_launchers_job(capsys, tmp_path, monkeypatch):
    import os

    m, admin = _machine()
    job = m.register_job(admin, ExecMode.PIPELINED, "csrun_wse python run.py", os.getpid())
    monkeypatch.setenv("CS2SIM_JOB_ID", str(job.id))
    code, out, err = _run(capsys, tmp_path, "--cs_ip", "cs2-1")
    assert code == 0, err
    assert f"Job {job.id} is running on cs2-1" in out
    assert [j.id for j in m.status().running_jobs] == [job.id]  # the launcher ends it
