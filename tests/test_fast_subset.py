"""The fast subset (`-m "not slow"`, docs/testing.md) keeps a test of every package.

A package of the four code folders is covered when a test file the fast subset keeps names it or
one of its modules (an import, or `python -m cs2sim...`), or, for a model of the Model Zoo (which
tests reach through the model table by name), when a kept test's id names the model. Marking the
last fast test of a package `slow` fails this check, as does a new package with no fast test.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
MODELS = "cs2sim.runtime.modelzoo."

# slow: run alone, it collects the whole suite in a fresh pytest (seconds); and this file, which
# names packages of its own, is then never one of the fast files it reads
pytestmark = pytest.mark.slow


def fast_test_ids(request: pytest.FixtureRequest) -> list[str]:
    """The ids of the tests `-m "not slow"` keeps: from this session's own collection when it
    collected the whole suite (every pytest-xdist worker does), else from a fresh pytest."""
    opt = request.config.option
    if not (opt.file_or_dir or opt.keyword or opt.markexpr or opt.deselect or opt.ignore):
        return [
            item.nodeid for item in request.session.items if item.get_closest_marker("slow") is None
        ]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "not slow",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    assert proc.returncode == 0 and ids, proc.stdout[-2000:] + proc.stderr[-2000:]
    return ids


def uncovered(packages: list[str], ids: list[str]) -> list[str]:
    """The packages no kept test reaches, by the rules of this module's docstring."""
    files = {i.split("::")[0] for i in ids}
    named: set[str] = set()
    for f in files:
        named |= set(re.findall(r"cs2sim(?:\.\w+)+", (ROOT / f).read_text()))
    missing = []
    for package in packages:
        if package == "cs2sim" or any(n == package or n.startswith(package + ".") for n in named):
            continue
        model = package[len(MODELS) :] if package.startswith(MODELS) else None
        if model and any(re.search(rf"\b{model}\b", i) for i in ids):
            continue
        missing.append(package)
    return missing


def test_every_package_keeps_a_fast_test(request: pytest.FixtureRequest) -> None:
    ids = fast_test_ids(request)
    assert len(ids) > 500, len(ids)  # the whole suite's fast tests, not a part of it
    assert uncovered(PACKAGES, ids) == []


def test_a_package_without_a_fast_test_is_found() -> None:
    ids = ["tests/test_docs.py::test_a_doc"]  # a file that names neither package
    assert uncovered(["cs2sim.runtime.nowhere", "cs2sim.runtime.modelzoo.nomodel"], ids) == [
        "cs2sim.runtime.nowhere",
        "cs2sim.runtime.modelzoo.nomodel",
    ]
    ids.append("tests/test_docs.py::test_a_model[nomodel-pipelined]")
    assert uncovered(["cs2sim.runtime.modelzoo.nomodel"], ids) == []
