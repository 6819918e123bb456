"""The front door and the map describe the tree as it is: every command the package installs is
named in the README, every step the main job prints is a step of the README's list (and no
more), and every file under .ci/ is named in docs/layout.md. A command, a demo step or a CI
file added without its documentation fails here, not in a newcomer's search."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
LAYOUT = (ROOT / "docs" / "layout.md").read_text()


def installed_commands() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return sorted(project["scripts"])


def demo_steps() -> list[int]:
    """The numbers of the `# N. ...` captions the main job prints, sorted."""
    source = (ROOT / "scripts" / "demo.py").read_text()
    return sorted(int(n) for n in re.findall(r'"\\?n?# (\d+)\. ', source))


def readme_steps() -> list[int]:
    """The numbered list under the README's "The main job" paragraph."""
    start = README.index("**The main job**")
    block = README[start : README.index("\n## ", start)]
    return [int(n) for n in re.findall(r"^(\d+)\. ", block, flags=re.M)]


def test_every_installed_command_is_named_in_the_readme():
    missing = [c for c in installed_commands() if f"`{c}`" not in README]
    assert not missing, f"installed but not named in README.md: {missing}"


def test_the_readme_lists_the_main_jobs_steps_one_for_one():
    steps = demo_steps()
    assert steps == list(range(1, len(steps) + 1)), steps  # each number once, none skipped
    assert readme_steps() == steps


def test_every_ci_file_is_named_in_the_layout_map():
    ci = ROOT / ".ci"
    files = sorted(p.relative_to(ci).as_posix() for p in ci.rglob("*") if p.is_file())
    row = next(line for line in LAYOUT.splitlines() if line.startswith("| `.ci/` |"))
    missing = [f for f in files if f"`{f}`" not in row and f"`{f.split('/')[-1]}`" not in row]
    assert not missing, f".ci/ files not named in docs/layout.md's .ci/ row: {missing}"


def test_the_checks_would_catch_a_gap():
    """The parsers find what they look for (an empty list would pass everything above)."""
    assert {"cs", "csrun_wse", "csctl"} <= set(installed_commands())
    assert len(demo_steps()) >= 7 and len(readme_steps()) >= 7
    assert {"check", "run", "slurm/start.sh"} <= {
        p.relative_to(ROOT / ".ci").as_posix() for p in (ROOT / ".ci").rglob("*")
    }
