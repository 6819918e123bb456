"""cs2sim installed from its wheel into a fresh venv, beside a user's project.

The venv gets the wheel and pytest, nothing else: whatever cs2sim's installed code imports must
come with it (its dependencies), and its pytest plugin (the kit's fixtures, loaded by every pytest
session of that venv) must never break a test session that does not use the kit. The
distribution adds ONE import name, `cs2sim`: a user's own `scripts`, `system` and `runtime`
packages stay theirs, and the kit's fixtures work next to them, with the venv not activated.
The wheel is complete: every Model Zoo directory with its configs/ params files (the kit's
`model_copy()` and `python -m cs2sim.runtime.modelzoo.<model>.run` use them), the digits table
and its license, `py.typed`; and lean: no scikit-learn (nor scipy) in the venv.
Slow (a venv and the dependencies from the package index, about a minute), so one venv serves
every check here; without a reachable package index the tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

USER_TEST = """
import runtime
import system
from scripts.tool import answer

from cs2sim.scripts.testkit import ThrowawaySystem


def test_own_packages_and_the_kit_side_by_side(cs2_cs):
    assert answer() == 42 and system.NAME == "mine" and runtime.NAME == "mine too"
    assert cs2_cs("config execmode show").output.strip() == "Configured Execution Mode : PIPELINED"
    assert ThrowawaySystem.__module__ == "cs2sim.scripts.testkit.system"


def test_a_script_that_calls_cs_finds_it_without_an_activated_venv(cs2_system):
    result = cs2_system.run(["sh", "-c", "cs -c 'system standby --yes' && command -v csrun_wse"])
    assert result.ok, result.combined
    assert cs2_system.state == "STANDBY"
"""

# A test suite that has nothing to do with cs2sim: it must run in any venv cs2sim is installed in.
UNRELATED_TEST = """
def test_arithmetic():
    assert 6 * 7 == 42
"""
PATH = "/usr/bin:/bin"  # the venv is NOT on PATH: nothing is activated


MODELZOO = ROOT / "runtime" / "modelzoo"


def run(
    argv: list[str],
    cwd: Path,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})}
    )
    assert not check or proc.returncode == 0, (
        f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def pip_failed(proc: subprocess.CompletedProcess[str], what: str, tmp: Path) -> None:
    """Skip when pip failed because the package index is unreachable (pip cannot fetch pytest,
    which every index has either), else fail with pip's output."""
    probe = run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--no-cache-dir",
            "-d",
            str(tmp / "probe"),
            "pytest",
        ],
        cwd=tmp,
        timeout=300,
        check=False,
    )
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(
            f"the package index is unreachable, so {what} cannot fetch what it needs "
            f"(pip download pytest: {last})"
        )
    pytest.fail(f"{what} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """cs2sim's wheel, built from this checkout (setuptools from the index: build isolation)."""
    tmp = tmp_path_factory.mktemp("wheel")
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(tmp / "dist"),
            str(ROOT),
        ],
        cwd=tmp,
        check=False,
    )
    if proc.returncode != 0:
        pip_failed(proc, "building the wheel", tmp)
    (built,) = (tmp / "dist").glob("cs2sim-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with cs2sim's wheel and pytest, nothing else (dependencies from the index)."""
    tmp = tmp_path_factory.mktemp("install")
    # --without-pip, installed into by this pip (`pip --python`, pip >= 22.3, which Python
    # 3.11 ships): nothing here runs the venv's own pip, and ensurepip's copy of pip costs
    # a quarter of the fixture's CPU
    run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], cwd=tmp)
    # --no-compile: pip would byte-compile every installed module up front (numpy, matplotlib,
    # ...: most of the install's CPU); Python compiles what these tests import as it imports it
    proc = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(tmp / "venv/bin/python"),
            "install",
            "-q",
            "--no-compile",
            str(wheel),
            "pytest",
        ],
        cwd=tmp,
        check=False,
    )
    if proc.returncode != 0:
        pip_failed(proc, "pip install of the wheel", tmp)
    return tmp / "venv"


def test_the_wheel_holds_one_import_name_and_every_model_with_its_params(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"cs2sim"}
    models = [d for d in MODELZOO.iterdir() if (d / "run.py").is_file()]
    assert len(models) >= 6
    for model in models:
        params = {
            f"cs2sim/runtime/modelzoo/{model.name}/configs/{p.name}"
            for p in (model / "configs").glob("*.yaml")
        }
        assert params and params <= names, f"{model.name}: {sorted(params - names)} missing"
        assert f"cs2sim/runtime/modelzoo/{model.name}/run.py" in names
    assert {
        "cs2sim/runtime/data/digits.csv.gz",
        "cs2sim/runtime/data/digits.LICENSE.md",
        "cs2sim/system/py.typed",
        "cs2sim/csshell/py.typed",
    } <= names


def test_the_install_is_lean_no_scikit_learn(venv: Path, tmp_path: Path) -> None:
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps([d.metadata['Name'].lower() for d in m.distributions()]))"
    )
    proc = run([str(venv / "bin/python"), "-c", code], cwd=tmp_path, env={"PATH": PATH})
    installed = set(json.loads(proc.stdout))
    assert {"cs2sim", "numpy", "threadpoolctl"} <= installed
    assert not installed & {"scikit-learn", "scipy", "joblib"}, installed


def test_model_copy_and_the_installed_run_py_train_from_the_wheel(
    venv: Path, tmp_path: Path
) -> None:
    python = str(venv / "bin/python")
    env = {"PATH": PATH, "CS2_HOME": str(tmp_path / "home")}
    # the kit's model copy, and where the installed module's own params file is
    code = (
        "import sys; from pathlib import Path; "
        "from cs2sim.scripts.testkit.launch import model_copy; "
        "import cs2sim.runtime.modelzoo.fc_mnist as m; "
        "print(model_copy(Path(sys.argv[1]), 'fc_mnist')); "
        "print(Path(m.__file__).parent / 'configs' / 'params_small.yaml')"
    )
    out = run([python, "-c", code, str(tmp_path)], cwd=tmp_path, env=env).stdout.splitlines()
    work, params = Path(out[0]), out[1]
    assert {p.name for p in (work / "configs").iterdir()} == {
        p.name for p in (MODELZOO / "fc_mnist" / "configs").glob("*.yaml")
    }
    proc = run(
        [
            python,
            "run.py",
            "--mode=compile_only",
            "-p",
            "configs/params_small.yaml",
            "-o",
            "model_dir",
            "--cs_ip",
            "127.0.1.1",
        ],
        cwd=work,
        env=env,
    )
    assert "Compilation for PIPELINED finished" in proc.stdout + proc.stderr
    assert list((work / "model_dir").glob("cs_*/compile_report.txt"))
    # the installed module itself, with the installation's own params file
    assert params.startswith(str(venv)), params
    proc = run(
        [
            python,
            "-m",
            "cs2sim.runtime.modelzoo.fc_mnist.run",
            "--mode",
            "validate_only",
            "-p",
            params,
            "-o",
            "md",
            "--cs_ip",
            "127.0.1.1",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert "Validation for PIPELINED finished" in proc.stdout + proc.stderr


def test_an_unrelated_test_suite_runs_in_a_venv_with_cs2sim(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text(UNRELATED_TEST)
    proc = run(
        [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        env={"PATH": PATH},
    )
    assert "1 passed" in proc.stdout and "cs2_system" not in proc.stdout
    # ... even when a package the kit uses is missing: the plugin imports nothing of the kit
    # until a test asks for a fixture (here pexpect is shadowed by a module that fails to import)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pexpect.py").write_text("raise ImportError('No module named pexpect')\n")
    proc = run(
        [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_other.py"],
        cwd=tmp_path,
        env={"PATH": PATH, "PYTHONPATH": str(broken)},
    )
    assert "1 passed" in proc.stdout


def test_a_user_project_keeps_its_own_scripts_system_and_runtime(
    venv: Path, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    for package, body in {
        "scripts": "",
        "system": 'NAME = "mine"\n',
        "runtime": 'NAME = "mine too"\n',
    }.items():
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(body)
    (project / "scripts" / "tool.py").write_text("def answer():\n    return 42\n")
    (project / "tests").mkdir()
    (project / "tests" / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\npythonpath = ['.']\n")
    proc = run(
        [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={"PATH": PATH},
    )
    assert "2 passed" in proc.stdout
    # the console scripts are installed and run from the venv alone
    proc = run(
        [str(venv / "bin/cs"), "-c", "config execmode show"],
        cwd=project,
        env={"CS2_HOME": str(tmp_path / "home"), "PATH": PATH},
    )
    assert "PIPELINED" in proc.stdout
