"""The static-check command (.ci/check): it passes on this tree, and it fails, naming the step
and the file, on a copy of the tree with a type error, an import of a bare folder name and an
unformatted file added.

mypy resolves `cs2sim.*` through src/cs2sim (symlinks to the top-level folders), so the copy is
checked as itself, not as the checkout the venv has installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / ".ci" / "check"
STEPS = ("ruff check", "ruff format --check", "mypy", "lint-imports")
pytestmark = pytest.mark.slow  # mypy from a cold cache: about 20 s


def run_check(
    tree: Path, cache: Path | None
) -> tuple[subprocess.CompletedProcess[str], dict[str, str], dict[str, str]]:
    """Run .ci/check on `tree` (mypy's cache: `cache`, else the tree's own); (the process,
    step -> "OK" | "FAILED", step -> its output)."""
    env = {**os.environ, "CHECK_PYTHON": sys.executable}
    env.pop("CHECK_MYPY_CACHE", None)
    if cache is not None:
        env["CHECK_MYPY_CACHE"] = str(cache)
    proc = subprocess.run(
        ["bash", str(CHECK), str(tree)], capture_output=True, text=True, timeout=600, env=env
    )
    verdicts, outputs, lines = {}, {}, []
    for line in proc.stdout.splitlines():
        if line.startswith("==> ") and line.endswith((": OK", ": FAILED")):
            name, _, verdict = line[4:].rpartition(": ")
            verdicts[name], outputs[name] = verdict, "\n".join(lines)
        elif line.startswith("==> "):
            lines = []
        else:
            lines.append(line)
    return proc, verdicts, outputs


def test_the_tree_passes_every_static_check(tmp_path: Path) -> None:
    # the checkout's own mypy cache, as `.ci/check` alone uses it (CI has just filled it)
    proc, verdicts, _ = run_check(ROOT, None)
    assert set(verdicts) == set(STEPS), proc.stdout[-3000:]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def test_a_type_error_a_bare_folder_import_and_an_unformatted_file_each_fail(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("system", "csshell", "runtime", "scripts"):
        shutil.copytree(ROOT / folder, tree / folder, ignore=ignore)
    shutil.copytree(ROOT / "src", tree / "src", symlinks=True)  # relative links: into the copy
    shutil.copy(ROOT / "pyproject.toml", tree)
    (tree / "system" / "fault_type.py").write_text('def answer() -> int:\n    return "forty-two"\n')
    (tree / "csshell" / "fault_import.py").write_text(
        'import system.errors\n\n__all__ = ["system"]\n'
    )
    (tree / "runtime" / "data" / "fault_format.py").write_text("ANSWER = {  'a':42 }\n")

    proc, verdicts, outputs = run_check(tree, tmp_path / "mypy")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "static checks FAILED" in proc.stderr
    assert verdicts["mypy"] == "FAILED"
    assert "fault_type.py:2: error: Incompatible return value type" in outputs["mypy"]
    assert verdicts["ruff check"] == "FAILED"
    assert "TID251 `system` is banned" in outputs["ruff check"]
    assert "fault_import.py" in outputs["ruff check"]
    assert verdicts["ruff format --check"] == "FAILED"
    assert "runtime/data/fault_format.py" in outputs["ruff format --check"]
