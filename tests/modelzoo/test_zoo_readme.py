"""The manual's host training commands work exactly as written, with a plain `python`.

The commands are `cd runtime/modelzoo/<model> && python run.py ...`. They are read from the
"Training on the host" section of docs/training.md and run as written by bash, in a copy of the
checkout (so a relative `--model_dir model_dir` lands in the copy, not in the source tree) whose
`.venv` is the venv these tests run in, with a PATH that has no venv on it and no VIRTUAL_ENV /
PYTHONPATH: the `python` found is the system one, which cannot import the project, and run.py must
find its way (runtime/job/bootstrap.py). The re-exec and the no-venv error are also checked with
`python3 -S`, an interpreter that certainly lacks numpy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_VENV = sys.prefix != sys.base_prefix
DOC = ROOT / "docs" / "training.md"  # the page whose "Training on the host" section is read


def doc_training_commands() -> list[str]:
    """The `cd runtime/modelzoo/... && python run.py ...` lines of docs/training.md's host part."""
    text = DOC.read_text()
    section = text[text.index("\n## Training on the host") :]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    return [
        line.strip()
        for line in section.splitlines()
        if line.strip().startswith("cd runtime/modelzoo/")
    ]


def clean_env() -> dict[str, str]:
    """The environment of a fresh shell where nothing was activated."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "CS2SIM_VENV", "CS2SIM_REEXEC")
    }
    venv_bin = str(Path(sys.prefix) / "bin")
    path = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != Path(venv_bin).resolve()
    ]
    env["PATH"] = os.pathsep.join(path)
    env["OPENBLAS_NUM_THREADS"] = env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the project's sources with the test venv as its `.venv`."""
    copy = tmp_path / "cs2sim"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "model_dir", "*.pyc")
    for name in ("runtime", "system", "scripts"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, copy / name)
    if IN_VENV:
        (copy / ".venv").symlink_to(sys.prefix)
    return copy


def test_the_doc_lists_a_command_for_every_model():
    cmds = doc_training_commands()
    assert len(cmds) == 5 and all(" python run.py " in c for c in cmds)
    for model in ("fc_mnist", "gpt2", "gptj", "bert", "llama"):
        assert any(c.startswith(f"cd runtime/modelzoo/{model} ") for c in cmds), model


@pytest.mark.slow
@pytest.mark.skipif(not IN_VENV, reason="the project is not installed in a venv here")
def test_doc_training_commands_work_as_written_without_the_venv(checkout, tmp_path):
    env = clean_env()
    if shutil.which("python", path=env["PATH"]) is None:
        pytest.skip("no `python` on this machine's PATH outside the venv")
    for cmd in doc_training_commands():
        out_dir = cmd.split(" -o ")[1].split()[0] if " -o " in cmd else None
        if out_dir:  # -o /tmp/fc: keep the test's files in its own directory
            cmd = cmd.replace(f" -o {out_dir}", f" -o {tmp_path / Path(out_dir).name}")
        done = subprocess.run(
            ["bash", "-c", cmd], cwd=checkout, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (cmd, done.stdout[-2000:], done.stderr[-2000:])
        assert "Training finished with" in done.stdout, cmd
        assert "Params file: " in done.stdout and "Model directory: " in done.stdout
        assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr
    # the gptj line writes `--model_dir model_dir`, relative to its model directory
    assert (checkout / "runtime" / "modelzoo" / "gptj" / "model_dir" / "checkpoint").is_file()


@pytest.mark.skipif(not IN_VENV, reason="the project is not installed in a venv here")
def test_an_interpreter_without_numpy_re_executes_in_the_projects_venv(checkout):
    run_py = checkout / "runtime" / "modelzoo" / "fc_mnist" / "run.py"
    done = subprocess.run(
        [sys.base_prefix + "/bin/python3", "-S", str(run_py), "--help"],
        cwd=run_py.parent,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: run.py")


def test_without_a_venv_the_error_says_how_to_install(checkout):
    link = checkout / ".venv"
    if link.is_symlink():
        link.unlink()
    run_py = checkout / "runtime" / "modelzoo" / "gpt2" / "run.py"
    done = subprocess.run(
        [sys.base_prefix + "/bin/python3", "-S", str(run_py), "--help"],
        cwd=run_py.parent,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: run.py needs the Python package 'numpy', which "
    )
    assert done.stderr.endswith(
        f"cd {checkout} && python3 -m venv .venv && .venv/bin/pip install -e .\n"
    )


def test_project_root_is_the_checkout_only_for_a_run_py_inside_one(tmp_path):
    """A copy of a model directory anywhere (even one level below /) is not taken for a
    checkout: no IndexError, no venv of an unrelated tree."""
    from cs2sim.runtime.job.bootstrap import project_root

    assert project_root(ROOT / "runtime" / "modelzoo" / "fc_mnist" / "run.py") == ROOT
    assert project_root("/run.py") is None
    assert project_root("/fcx/run.py") is None
    assert project_root(tmp_path / "a" / "b" / "c" / "run.py") is None
