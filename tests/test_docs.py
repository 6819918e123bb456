"""The README is a front door and docs/ the manual, and neither points at anything that is gone.

The README is a short front door (at most 200 lines) that opens with the two set-up
commands; the manual is in docs/, one page per part. These tests keep that true: the
README's second command is the one CI runs (a command line of `.ci/run`, verbatim), every
relative link of the README and of docs/*.md reaches a file (and a heading, when it names
one), every repository path they name exists, and the README's code map has a line for every
package of runtime/ (so a moved or added package shows up here, not in a newcomer's failed
search).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/python -m scripts.demo"
)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a path into the repository as the pages write it: `runtime/job/roles.py`, `tests/slurm/`, ...
REPO_PATH = re.compile(
    r"(?<![\w./$<-])((?:system|csshell|runtime|scripts|tests|bench|examples|docs"
    r"|\.ci)/[\w./-]*)"
)


def command_lines(block: str) -> list[str]:
    """The lines of a shell snippet that are commands (no blank lines, no comments)."""
    return [
        line.strip()
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def opening_block() -> str:
    """The README's first fenced block, which must come right after its title."""
    text = README.read_text()
    title, rest = text.split("\n", 1)
    assert title.startswith("# "), "the README starts with its title"
    assert rest.lstrip("\n").startswith("```"), "the set-up commands come right after the title"
    start = rest.index("\n", rest.index("```")) + 1
    return rest[start : rest.index("```", start)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # no headings inside code
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_the_readme_is_a_front_door_of_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the manual belongs in docs/"


def test_the_readme_opens_with_the_two_commands_and_the_second_is_what_ci_runs():
    demo, tests = command_lines(opening_block())
    assert demo == DEMO_COMMAND
    assert tests == (
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && "
        ".venv/bin/python -m pytest -n auto --dist loadfile"
    )
    # CI runs it as written, only noting its exit status (the static checks run beside it)
    ci = command_lines((ROOT / ".ci" / "run").read_text())
    assert [line for line in ci if line.startswith(tests)] == [f"{tests} || tests=$?"]


def test_every_relative_link_reaches_a_file_and_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
    assert sum(len(LINK.findall(p.read_text())) for p in PAGES) > len(PAGES), "links were found"


def test_every_repository_path_the_pages_name_exists():
    missing = []
    for page in PAGES:
        for path in REPO_PATH.findall(page.read_text()):
            path = path.rstrip(".,")
            if not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, missing


def test_the_readme_code_map_has_a_line_per_runtime_package():
    text = README.read_text()
    section = text[text.index("\n## Where the code is") :]
    block = section[section.index("```") + 3 :]
    mapped = {line.split()[0] for line in block[: block.index("```")].splitlines() if line.strip()}
    packages = {f"{p.parent.relative_to(ROOT)}/" for p in (ROOT / "runtime").glob("*/__init__.py")}
    modules = {f"runtime/{p.name}" for p in (ROOT / "runtime").glob("*.py") if p.stem != "__init__"}
    assert packages and modules
    assert packages | modules <= mapped, sorted((packages | modules) - mapped)
    assert all((ROOT / entry).exists() for entry in mapped), sorted(
        e for e in mapped if not (ROOT / e).exists()
    )
