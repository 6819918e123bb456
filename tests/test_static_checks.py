"""The static-check command (.ci/check): it passes on this tree, and it fails, naming the step
and the file, on a copy of the tree with a type error, an import of a bare folder name and an
unformatted file added. Its mypy step covers the whole package: pyproject's [tool.mypy] names
every module and silences none.

mypy resolves `cs2sim.*` through src/cs2sim (symlinks to the top-level folders), so the copy is
checked as itself, not as the checkout the venv has installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / ".ci" / "check"
STEPS = ("ruff check", "ruff format --check", "mypy", "lint-imports")
FOLDERS = ("system", "csshell", "runtime", "scripts")  # the parts of cs2sim (src/cs2sim/*)
slow = pytest.mark.slow  # mypy of the whole package from a cold cache: about 40 s


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


@slow
def test_the_tree_passes_every_static_check(tmp_path: Path) -> None:
    # the checkout's own mypy cache, as `.ci/check` alone uses it (CI has just filled it)
    proc, verdicts, _ = run_check(ROOT, None)
    assert set(verdicts) == set(STEPS), proc.stdout[-3000:]
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


@slow
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

    cache = tmp_path / "mypy"
    if (ROOT / ".mypy_cache").is_dir():
        # the checkout's cache as a start: mypy rechecks what differs by content (it compares
        # hashes where the copy's times differ), so the faults are found in seconds
        shutil.copytree(ROOT / ".mypy_cache", cache)
    proc, verdicts, outputs = run_check(tree, cache)
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "static checks FAILED" in proc.stderr
    assert verdicts["mypy"] == "FAILED"
    assert "fault_type.py:2: error: Incompatible return value type" in outputs["mypy"]
    assert verdicts["ruff check"] == "FAILED"
    assert "TID251 `system` is banned" in outputs["ruff check"]
    assert "fault_import.py" in outputs["ruff check"]
    assert verdicts["ruff format --check"] == "FAILED"
    assert "runtime/data/fault_format.py" in outputs["ruff format --check"]


def test_mypy_checks_every_module_of_the_package_and_silences_none() -> None:
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy.get("strict") is True
    assert mypy.get("follow_imports", "normal") == "normal"
    checked = [ROOT / f for f in mypy.get("files", [])]
    modules = [
        ROOT / "src" / "cs2sim" / folder / Path(dirpath).relative_to(ROOT / folder) / name
        for folder in FOLDERS
        for dirpath, _, names in os.walk(ROOT / folder)
        for name in names
        if name.endswith(".py")
    ]
    assert len(modules) > 200  # the walk found the package
    left_out = [m for m in modules if not any(m == c or c in m.parents for c in checked)]
    assert not left_out, f"modules mypy does not check: {left_out[:5]}"
    for override in mypy.get("overrides", []):
        names = override["module"] if isinstance(override["module"], list) else [override["module"]]
        assert override.get("follow_imports", "normal") == "normal", override
        assert not override.get("ignore_errors", False), override
        # missing stubs may be ignored for third-party modules only, never for our own
        assert not any(n.split(".")[0] == "cs2sim" for n in names), override
