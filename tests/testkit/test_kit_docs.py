"""The kit's documented examples are tests: docs/testkit.md's code blocks and the package
docstring's, run with pytest as a user's test file (the fixtures from the installed plugin), from
an environment whose PATH does not have the venv (nobody activated it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cs2sim.scripts.testkit as testkit

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def page_examples() -> str:
    """Every ```python block of docs/testkit.md that defines a test."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "testkit.md").read_text(), re.S)
    return "\n\n".join(b for b in blocks if "def test_" in b)


def docstring_examples() -> str:
    """The tests in the kit's package docstring (its indented example)."""
    doc = testkit.__doc__ or ""
    part = doc[doc.index("    def test_") : doc.index("The same objects work without pytest")]
    return textwrap.dedent(part)


@pytest.mark.parametrize(
    "source",
    [page_examples, docstring_examples],
    ids=["docs/testkit.md", "scripts/testkit/__init__.py"],
)
def test_the_documented_examples_pass(source, tmp_path):
    code = source()
    names = re.findall(r"^def (test_\w+)", code, re.M)
    assert len(names) >= 2, code
    (tmp_path / "test_examples.py").write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CS2_HOME")}
    env["PATH"] = "/usr/bin:/bin"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_examples.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert f"{len(names)} passed" in proc.stdout
