"""The own-model example end to end, as its user runs it (docs/own-model.md): `python run.py`
with --mode=validate_only, --mode=compile_only and a host run, then `csrun_wse python run.py
... --cs_ip` on a throwaway CS-2 (the testing kit's cs2_system), and the variant whose op no
CS-2 kernel runs: it trains on the host, and validate_only / the CS-2 run stop at kernel
matching with the report in model_dir."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]


@pytest.fixture
def work(tmp_path):
    """A copy of the example, as a user's own directory."""
    dst = tmp_path / "own_model"
    shutil.copytree(HERE, dst, ignore=shutil.ignore_patterns("tests", "__pycache__"))
    return dst


def run_py(work: Path, *argv: str, env_home: Path) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "CS2_HOME": str(env_home)}
    return subprocess.run(
        [sys.executable, "run.py", *argv],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_validate_compile_and_train_on_the_host(work, tmp_path):
    home = tmp_path / "home"
    v = run_py(work, "--mode=validate_only", "-p", "configs/params.yaml", "-o", "md", env_home=home)
    assert v.returncode == 0, v.stderr
    assert "Validation for PIPELINED finished" in v.stdout
    c = run_py(work, "--mode=compile_only", "-p", "configs/params.yaml", "-o", "md", env_home=home)
    assert c.returncode == 0, c.stderr
    report = next((work / "md").glob("cs_*/compile_report.txt")).read_text()
    assert "block0.fc" in report and "block1.add" in report  # the user's layer's own ops
    t = run_py(
        work,
        "--mode=train_and_eval",
        "-p",
        "configs/params.yaml",
        "-o",
        "md",
        "--max_steps",
        "40",
        "--save_summary_steps",
        "10",
        "--eval_steps",
        "2",
        env_home=home,
    )
    assert t.returncode == 0, t.stderr
    train_line = r"Train Device=cpu, Step=\d+, Loss=([\d.]+)"
    losses = [float(x) for x in re.findall(train_line, t.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert "Metric: accuracy" in t.stdout
    assert (work / "md" / "model-ckpt-40.npz").is_file()


def test_an_op_without_a_kernel_trains_on_the_host_but_fails_validation(work, tmp_path):
    home = tmp_path / "home"
    t = run_py(
        work,
        "--mode=train",
        "-p",
        "configs/params_snake.yaml",
        "-o",
        "host",
        "--max_steps",
        "5",
        env_home=home,
    )
    assert t.returncode == 0, t.stderr  # the host runs any layer
    v = run_py(
        work, "--mode=validate_only", "-p", "configs/params_snake.yaml", "-o", "md", env_home=home
    )
    assert v.returncode != 0
    err = v.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in v.stderr, v.stderr
    assert "op 'snake' in layer 'block0.act'" in err[0]
    report_path = work / "md" / "kernel_matching_report.txt"
    assert str(report_path) in err[0]
    report = report_path.read_text()
    assert "layer 'block0.act' (block 'block0'): op 'snake'" in report
    assert "layer 'block1.act'" in report  # every unsupported op, not only the first
    assert re.search(r"^  eltwise: relu, tanh, elu, selu, linear, gelu", report, re.M)
    assert "What to do:" in report and "docs/own-model.md" in report
    assert not list((work / "md").glob("cs_*"))  # nothing half-compiled is left to reuse


@pytest.mark.slow
def test_csrun_wse_runs_it_on_the_cs2(cs2_system, work):
    result = cs2_system.csrun_wse(
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
        "configs/params.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--max_steps",
        "20",
        cwd=work,
    )
    assert result.exit_code == 0, result.output[-3000:] + result.errors[-2000:]
    assert result.job.state == "COMPLETED"
    assert "Train Device=CSX" in result.output
    assert (work / "model_dir" / "model-ckpt-20.npz").is_file()
    assert list((work / "model_dir").glob("cs_*/compile_report.txt"))


@pytest.mark.slow
def test_csrun_wse_stops_at_kernel_matching_with_the_report(cs2_system, work):
    result = cs2_system.csrun_wse(
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
        "configs/params_snake.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--max_steps",
        "20",
        cwd=work,
    )
    assert result.exit_code != 0
    assert "op 'snake' in layer 'block0.act'" in result.output + result.errors
    assert (work / "model_dir" / "kernel_matching_report.txt").is_file()
    assert not (work / "model_dir" / "model-ckpt-20.npz").exists()
