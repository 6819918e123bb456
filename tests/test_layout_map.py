"""The map is complete: every module of the four code folders is named where a reader looks.

A module `pkg/name.py` is named when `name.py` appears in its package's `__init__` docstring or
in the row of docs/layout.md's tables whose first cell is `` `pkg/` ``. A Model Zoo model's
directory must be in the `runtime/modelzoo/` row, and so must its `model.py` and `run.py`. The
checks run over the files on disk, so a module added without a line in the map fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("system", "csshell", "runtime", "scripts")
LAYOUT = ROOT / "docs" / "layout.md"
# the modules a security review starts from: named explicitly so that a map that drops one
# fails here even if the generic rule were weakened
BOUNDARIES = (
    "system/wire.py",
    "system/machine.py",
    "system/errors.py",
    "system/store_service.py",
    "system/store_remote.py",
    "runtime/job/channel.py",
    "runtime/job/rendezvous.py",
    "system/sched/guard.py",
    "system/sched/wake.py",
    "system/sched/slurm.py",
    "system/sched/hostlist.py",
)


def layout_rows(text: str) -> dict[str, str]:
    """docs/layout.md's table rows by their first cell (`` `runtime/job/` `` -> the row)."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


def package_doc(pkg: Path) -> str:
    init = pkg / "__init__.py"
    if not init.exists():
        return ""
    return ast.get_docstring(ast.parse(init.read_text())) or ""


def modules() -> list[Path]:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name in ("__init__.py", "__main__.py") or "__pycache__" in path.parts:
                continue
            found.append(path.relative_to(ROOT))
    return found


def unnamed(rows: dict[str, str], docs: dict[str, str], paths: list[Path]) -> list[str]:
    """The modules neither their package docstring nor their layout.md row names."""
    missing = []
    zoo = rows.get("runtime/modelzoo/", "")
    for rel in paths:
        pkg = rel.parent.as_posix()
        name = rel.name
        if rel.parts[:2] == ("runtime", "modelzoo") and len(rel.parts) == 4:
            model_dir = rel.parts[2] + "/"
            if f"`{model_dir}`" not in zoo and model_dir not in zoo or name not in zoo:
                missing.append(rel.as_posix())
            continue
        doc = docs.get(pkg, "")
        if re.search(rf"(?<![\w/]){re.escape(name)}", doc) or f"{pkg}/{name}" in doc:
            continue
        if re.search(rf"(?<![\w]){re.escape(name)}", rows.get(pkg + "/", "")):
            continue
        if rel.as_posix() in rows or f"`{rel.as_posix()}`" in LAYOUT.read_text():
            continue
        missing.append(rel.as_posix())
    return missing


def collect() -> tuple[dict[str, str], dict[str, str], list[Path]]:
    paths = modules()
    docs = {p.as_posix(): package_doc(ROOT / p) for p in {m.parent for m in paths}}
    return layout_rows(LAYOUT.read_text()), docs, paths


def test_every_module_is_named_in_the_layout_or_its_package_docstring() -> None:
    rows, docs, paths = collect()
    missing = unnamed(rows, docs, paths)
    assert not missing, (
        f"not named in docs/layout.md nor in their package's __init__ "
        f"docstring: {', '.join(missing)}"
    )


@pytest.mark.parametrize("module", BOUNDARIES)
def test_the_security_boundaries_are_on_the_map(module: str) -> None:
    rows, docs, paths = collect()
    assert Path(module) in paths, f"{module} is listed as a boundary but does not exist"
    assert module not in unnamed(rows, docs, [Path(module)])


def test_the_check_fails_on_a_module_the_map_does_not_name() -> None:
    """A module added without a line anywhere is reported (the check can fail)."""
    rows, docs, paths = collect()
    ghost = [Path("system/sched/ghost_module.py"), Path("runtime/modelzoo/ghost/model.py")]
    assert unnamed(rows, docs, paths + ghost) == [p.as_posix() for p in ghost]
    # and a name that only appears inside a longer name does not count
    assert unnamed({"system/": "machine_split.py"}, {}, [Path("system/split.py")]) == [
        "system/split.py"
    ]
