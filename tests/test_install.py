"""cs2sim installed from its wheel into a fresh venv, beside a user's project.

The venv gets the wheel and pytest, nothing else: whatever cs2sim's installed code imports must
come with it (its dependencies), and its pytest plugin (the kit's fixtures, loaded by every pytest
session of that venv) must never break a test session that does not use the kit. The
distribution adds ONE import name, `cs2sim`: a user's own `scripts`, `system` and `runtime`
packages stay theirs, and the kit's fixtures work next to them, with the venv not activated.
Slow (a venv and the dependencies from the package index, about a minute), so one venv serves
every check here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

USER_TEST = '''
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
'''

# A test suite that has nothing to do with cs2sim: it must run in any venv cs2sim is installed in.
UNRELATED_TEST = '''
def test_arithmetic():
    assert 6 * 7 == 42
'''
PATH = "/usr/bin:/bin"  # the venv is NOT on PATH: nothing is activated


def run(argv: list[str], cwd: Path, timeout: float = 600,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**base, **(env or {})})
    assert proc.returncode == 0, f"{argv}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with cs2sim's wheel (built from this checkout) and pytest, nothing else."""
    tmp = tmp_path_factory.mktemp("install")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"),
         str(ROOT)], cwd=tmp)
    (wheel,) = (tmp / "dist").glob("cs2sim-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"cs2sim"}
    run([sys.executable, "-m", "venv", str(tmp / "venv")], cwd=tmp)
    run([str(tmp / "venv/bin/pip"), "install", "-q", str(wheel), "pytest"], cwd=tmp)
    return tmp / "venv"


def test_an_unrelated_test_suite_runs_in_a_venv_with_cs2sim(venv: Path, tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text(UNRELATED_TEST)
    proc = run([str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
               cwd=tmp_path, env={"PATH": PATH})
    assert "1 passed" in proc.stdout and "cs2_system" not in proc.stdout
    # ... even when a package the kit uses is missing: the plugin imports nothing of the kit
    # until a test asks for a fixture (here pexpect is shadowed by a module that fails to import)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "pexpect.py").write_text("raise ImportError('No module named pexpect')\n")
    proc = run([str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                "test_other.py"], cwd=tmp_path, env={"PATH": PATH, "PYTHONPATH": str(broken)})
    assert "1 passed" in proc.stdout


def test_a_user_project_keeps_its_own_scripts_system_and_runtime(venv: Path,
                                                                tmp_path: Path) -> None:
    project = tmp_path / "project"
    for package, body in {"scripts": "", "system": 'NAME = "mine"\n',
                          "runtime": 'NAME = "mine too"\n'}.items():
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text(body)
    (project / "scripts" / "tool.py").write_text("def answer():\n    return 42\n")
    (project / "tests").mkdir()
    (project / "tests" / "test_user.py").write_text(textwrap.dedent(USER_TEST))
    (project / "pyproject.toml").write_text("[tool.pytest.ini_options]\npythonpath = ['.']\n")
    proc = run([str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
               cwd=project, env={"PATH": PATH})
    assert "2 passed" in proc.stdout
    # the console scripts are installed and run from the venv alone
    proc = run([str(venv / "bin/cs"), "-c", "config execmode show"], cwd=project,
               env={"CS2_HOME": str(tmp_path / "home"), "PATH": PATH})
    assert "PIPELINED" in proc.stdout
