"""The prompt a script can rely on: `cs> ` literally on the wire at every prompt (the first one
included) under TERM xterm-256color, xterm and dumb, the toolbar after it, and Ctrl-D honoured at
once at the first prompt; docs/console.md's pexpect example run as written, under four TERMs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from shell_helpers import plain, shell_env

ROOT = Path(__file__).resolve().parents[2]
TERMS = ["xterm-256color", "xterm", "dumb"]


def spawn_cs(home: Path, term: str) -> pexpect.spawn:
    env = dict(shell_env(home), TERM=term)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cs2sim.csshell"],
        env=env,
        encoding="utf-8",
        timeout=15,
        dimensions=(40, 160),
    )
    child.delaybeforesend = None
    return child


@pytest.mark.parametrize("term", TERMS)
def test_every_prompt_is_literally_cs_space(home: Path, term: str) -> None:
    child = spawn_cs(home, term)
    try:
        child.expect_exact("cs> ")  # the first prompt: the bytes `cs> `, not `cs>` + a cursor move
        child.sendline("config execmode show")
        child.expect_exact("Configured Execution Mode : PIPELINED")
        child.expect_exact("cs> ")
        if term != "dumb":  # the toolbar is drawn after the prompt's four characters
            child.expect_exact("root (admin)")
        child.sendline("software show")
        child.expect_exact("cs> ")  # nothing before the next prompt reads `cs> `
        assert "sqlite" in str(child.before)
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def ctrl_d_at_the_first_prompt(home: Path, term: str, attempts: int) -> None:
    """`attempts` shells in a row; each gets Ctrl-D the moment `cs> ` arrives (no delay)."""
    for attempt in range(attempts):
        child = spawn_cs(home, term)
        try:
            child.expect_exact("cs> ")
            child.sendeof()
            try:
                child.expect(pexpect.EOF, timeout=10)
            except pexpect.TIMEOUT:
                raise AssertionError(
                    f"TERM={term}: Ctrl-D lost at attempt {attempt + 1}: "
                    f"{plain(str(child.before))!r}"
                ) from None
        finally:
            child.close(force=True)
        assert child.exitstatus == 0


@pytest.mark.parametrize("term", TERMS)
def test_ctrl_d_at_the_first_prompt_leaves_at_once(home: Path, term: str) -> None:
    ctrl_d_at_the_first_prompt(home, term, attempts=1)


# The race ten tries in a row guard against is a dumb terminal's: prompt_toolkit's _dumb_prompt
# writes the prompt and only then starts the application that enters raw mode, so without the
# console's own raw mode around the prompt a Ctrl-D sent the moment `cs> ` arrived reached the
# line discipline in cooked mode and was lost. On every other TERM prompt_toolkit enters raw
# mode before its first redraw (Application.run_async): there the prompt cannot arrive before
# raw mode, and the single try above (and the pexpect pattern's Ctrl-D after later prompts)
# holds it. Taking the console's raw mode away fails the dumb tries, and only those.
@pytest.mark.slow  # 10 shells: the race a single try can miss
def test_ctrl_d_at_the_first_prompt_leaves_at_once_every_time(home: Path) -> None:
    ctrl_d_at_the_first_prompt(home, "dumb", attempts=10)


def doc_example() -> str:
    text = (ROOT / "docs" / "console.md").read_text()
    section = text[text.index("## Driving the console from a script") :]
    return re.findall(r"```python\n(.*?)```", section, re.S)[0]


def test_the_documented_pexpect_example_passes(home: Path, tmp_path: Path) -> None:
    code = doc_example()
    assert "def test_change_mode_by_script" in code
    conftest = (  # a store per test: each TERM's run changes the mode
        "import os, pytest\n"
        "@pytest.fixture\n"
        "def cs_home(tmp_path):\n"
        "    home = str(tmp_path / 'cs2home')\n"
        "    return dict(os.environ, CS2_HOME=home, CS2_BOOT_SECONDS='0')\n"
    )
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_example.py").write_text(code)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    # the example needs pytest and pexpect only: the plugins installed for this suite
    # (hypothesis, xdist, ...) are not loaded, which halves the inner pytest's start-up
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout  # xterm-256color, xterm, dumb and no TERM
