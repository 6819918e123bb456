"""The layout of docs/layout.md: one import name, every package installed, the layering contracts
hold.

The contracts live in pyproject.toml ([tool.importlinter]); `lint-imports` checks them, and so do
these tests, once as a user runs it and once on a graph with an upward import and a circle added
by hand, so a contract that could never fail would be noticed.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
LINTER = PYPROJECT["tool"]["importlinter"]
FOLDERS = ("system", "csshell", "runtime", "scripts")
CONTRACT_TYPES = {
    "layers": LayersContract,
    "forbidden": ForbiddenContract,
    "acyclic_siblings": AcyclicSiblingsContract,
}


def test_lint_imports_passes_as_a_user_runs_it(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(exe), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"Contracts: {len(LINTER['contracts'])} kept, 0 broken." in proc.stdout


def build() -> grimp.ImportGraph:
    """The project's import graph, built as lint-imports builds it (a fresh one each call)."""
    return grimp.build_graph(
        *LINTER["root_packages"],
        cache_dir=None,
        exclude_type_checking_imports=LINTER["exclude_type_checking_imports"],
    )


def kept(graph: grimp.ImportGraph) -> dict[str, bool]:
    """Each contract of pyproject.toml, read as lint-imports reads it, checked on `graph`."""
    configure()  # import-linter's adapters, as its command line sets them up
    options = read_user_options(str(ROOT / "pyproject.toml"))
    out = {}
    for spec in options.contracts_options:
        spec = dict(spec)
        name, kind = spec.pop("name"), spec.pop("type")
        contract = CONTRACT_TYPES[kind](name, options.session_options, spec)
        out[name] = contract.check(graph, verbose=False).kept
    return out


def test_contracts_fail_on_an_upward_import_and_on_a_circle() -> None:
    assert all(kept(build()).values())
    upward = build()  # a layer imports the models above it
    upward.add_import(
        importer="cs2sim.runtime.nn.dense",
        imported="cs2sim.runtime.modelzoo",
        line_number=1,
        line_contents="import cs2sim.runtime.modelzoo",
    )
    broken = [name for name, ok in kept(upward).items() if not ok]
    assert broken == [
        "runtime: the models on top, the front end, the job, the loop, ... the bottom utilities",
        "no import circles inside any package",
    ]
    console = build()  # the system model reaches into the console
    console.add_import(
        importer="cs2sim.system.machine",
        imported="cs2sim.csshell.render",
        line_number=1,
        line_contents="import cs2sim.csshell.render",
    )
    assert not kept(console)["nothing imports the console"]
    circle = build()  # two siblings of system/ import each other
    circle.add_import(
        importer="cs2sim.system.errors",
        imported="cs2sim.system.state",
        line_number=1,
        line_contents="import cs2sim.system.state",
    )
    assert not kept(circle)["no import circles inside any package"]


def test_every_package_of_the_folders_is_installed_under_the_one_import_name() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "src"}  # src/cs2sim/<folder> -> ../../<folder>
    assert {p.name: p.readlink() for p in (ROOT / "src" / "cs2sim").iterdir()} == {
        f: Path("..", "..", f) for f in FOLDERS
    }
    on_disk = {
        "cs2sim." + ".".join(p.parent.relative_to(ROOT).parts)
        for f in FOLDERS
        for p in (ROOT / f).rglob("__init__.py")
    }
    assert set(setuptools["packages"]) == on_disk | {"cs2sim"}
    assert all(
        ep.split(":")[0].startswith("cs2sim.")
        for section in PYPROJECT["project"]["scripts"].values()
        for ep in [section]
    )


def test_runtime_root_keeps_a_handful_of_modules() -> None:
    modules = sorted(p.name for p in (ROOT / "runtime").glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 6, modules
    for package in (ROOT / "runtime").iterdir():  # each sub-package says what it owns
        if (package / "__init__.py").is_file():
            doc = (package / "__init__.py").read_text().lstrip()
            assert doc.startswith('"""'), package


def test_the_editable_install_is_a_static_path_static_tools_follow() -> None:
    """`pip install -e .` of this checkout adds `src` to sys.path through a plain `.pth` line
    (no import hook, which mypy, pyright and IDEs cannot run)."""
    import sysconfig

    pth = list(Path(sysconfig.get_paths()["purelib"]).glob("__editable__.cs2sim-*.pth"))
    if not pth:
        pytest.skip("cs2sim is not installed in editable mode in this environment")
    lines = [ln for ln in pth[0].read_text().splitlines() if ln.strip()]
    if Path(lines[0]).resolve() != (ROOT / "src").resolve() and "import" not in lines[0]:
        pytest.skip(f"the editable install here is of another checkout ({lines[0]})")
    assert lines == [str(ROOT / "src")], lines


MAX_MODULE_LINES = 600  # past this a module usually holds two roles: split it by role


def test_no_module_of_the_code_folders_is_over_600_lines() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for f in FOLDERS
        for p in (ROOT / f).rglob("*.py")
    }
    assert len(sizes) > 100, "the code folders were not found"  # the check reads real files
    over = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    assert not over, f"split by role: {over}"


MAX_FUNCTION_LINES = 80  # past this a function usually holds steps that deserve names
# Functions allowed past MAX_FUNCTION_LINES ("folder/file.py:name"), each with the reason a split
# would hurt. Empty: every long function so far split into named steps.
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}


def long_functions(source: str, where: str) -> dict[str, int]:
    """`where:name` -> lines, for each function (or method) of `source` past the limit; a
    function's lines run from its `def` to its last line (a decorator's arguments declare, as
    a signature does: they are not steps)."""
    import ast

    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found[f"{where}:{node.name}"] = lines
    return found


def test_no_function_of_the_code_folders_is_over_80_lines() -> None:
    over: dict[str, int] = {}
    files = [p for f in FOLDERS for p in (ROOT / f).rglob("*.py")]
    assert len(files) > 100, "the code folders were not found"
    for p in files:
        over |= long_functions(p.read_text(), str(p.relative_to(ROOT)))
    over = {k: n for k, n in over.items() if k not in LONG_FUNCTIONS_ALLOWED}
    assert not over, f"split into named steps: {over}"


def test_the_function_length_check_sees_a_long_function_and_a_long_method() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = f"def long():\n{body}\n\nclass C:\n    @staticmethod\n    def short():\n        pass\n"
    source += "\n    def method(self):\n" + body.replace("    ", "        ")
    assert long_functions(source, "m.py") == {
        "m.py:long": MAX_FUNCTION_LINES + 1,
        "m.py:method": MAX_FUNCTION_LINES + 1,
    }
