"""Every environment knob is in one documented table, and the code reads knobs only through it.

The code of the four folders is parsed (not imported as text): every read of the environment
(`os.environ.get(X)`, `os.environ[X]`, `X in os.environ`, `os.getenv(X)`) whose name X is, or is
a module constant holding, a `CS2_` / `CS2SIM_` name is found. Each such name must be in
system/knobs.py's table, and such reads may happen only in system/knobs.py itself or at the
places listed in DIRECT below.
"""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

import pytest

from cs2sim.system import knobs

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("system", "csshell", "runtime", "scripts")
# Reads allowed outside system/knobs.py: (file, name) -> why.
DIRECT = {
    # runs before cs2sim can be imported (a run.py finding its venv): the standard library only
    ("runtime/job/bootstrap.py", "CS2SIM_VENV"): "stdlib only",
    ("runtime/job/bootstrap.py", "CS2SIM_REEXEC"): "stdlib only",
}


def _is_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _names(node: ast.AST, module: object, calls: dict[str, list[str]]) -> list[str]:
    """The variable names `node` can stand for: a string, a module constant, a tuple of them,
    or the parameter of a small helper that is only ever called with strings."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        value = getattr(module, node.id, None)
        if isinstance(value, str):
            return [value]
        if isinstance(value, tuple | list | dict):
            return [v for v in value if isinstance(v, str)]
        return calls.get(node.id, [])
    return []


def env_reads(path: Path) -> list[tuple[int, str]]:
    """(line, variable name) of every read of an environment variable in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(ROOT).with_suffix("")
    module = importlib.import_module("cs2sim." + ".".join(rel.parts))
    # helpers like `_timeout(name, default)`: their parameter takes the strings they are called
    # with anywhere in the module
    calls: dict[str, list[str]] = {}
    helpers = {
        f.name: [a.arg for a in f.args.args]
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
    }
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in helpers
        ):
            for param, arg in zip(helpers[node.func.id], node.args, strict=False):
                calls.setdefault(param, []).extend(_names(arg, module, {}))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        target: ast.AST | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if (f.attr == "get" and _is_environ(f.value)) or (
                f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os"
            ):
                target = node.args[0] if node.args else None
        elif (
            isinstance(node, ast.Subscript)
            and _is_environ(node.value)
            and isinstance(node.ctx, ast.Load)
        ):
            target = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            target = node.left
        if target is not None:
            found += [(node.lineno, n) for n in _names(target, module, calls)]
    return found


def all_reads() -> list[tuple[str, int, str]]:
    out = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "__pycache__" in path.parts or path.name == "__main__.py":
                continue
            rel = path.relative_to(ROOT).as_posix()
            out += [
                (rel, line, name)
                for line, name in env_reads(path)
                if name.startswith(knobs.PREFIXES)
            ]
    return out


READS = all_reads()


def test_every_knob_read_anywhere_is_in_the_table() -> None:
    missing = sorted({f"{name} ({f}:{line})" for f, line, name in READS if name not in knobs.KNOBS})
    assert not missing, f"undocumented environment knobs: {', '.join(missing)}"


def test_knobs_are_read_only_through_system_knobs() -> None:
    direct = [
        f"{f}:{line} reads {name}"
        for f, line, name in READS
        if f != "system/knobs.py" and (f, name) not in DIRECT
    ]
    assert not direct, "read through system/knobs.py instead: " + "; ".join(direct)


def test_the_scan_finds_reads_in_every_form(tmp_path, monkeypatch) -> None:
    """The scanner is not blind: it sees the four forms, through constants and helpers."""
    found = {n for _, _, n in READS}
    assert {"CS2SIM_VENV", "CS2SIM_REEXEC"} <= found  # a literal and a name through a constant
    assert all(f == "system/knobs.py" or (f, n) in DIRECT for f, _, n in READS)


def test_the_readers_refuse_a_name_the_table_does_not_list(monkeypatch) -> None:
    monkeypatch.setenv("CS2SIM_NOT_A_KNOB", "1")
    with pytest.raises(KeyError, match="CS2SIM_NOT_A_KNOB is not in system/knobs.py"):
        knobs.raw("CS2SIM_NOT_A_KNOB")
    assert knobs.raw("HOME") == os.environ.get("HOME")  # other names pass through
    monkeypatch.setenv("CS2_BOOT_SECONDS", " 2.5 ")
    assert knobs.number("CS2_BOOT_SECONDS", 5.0) == 2.5 and knobs.text("CS2_BOOT_SECONDS") == "2.5"
    monkeypatch.setenv("CS2_BOOT_SECONDS", "soon")
    assert knobs.number("CS2_BOOT_SECONDS", 5.0) == 5.0


def test_the_docs_table_is_the_knobs_table() -> None:
    page = (ROOT / "docs" / "environment.md").read_text()
    assert knobs.markdown_table() in page, (
        "docs/environment.md's table differs from system/knobs.py: paste "
        "knobs.markdown_table() into it"
    )
