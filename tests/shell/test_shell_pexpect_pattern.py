"""The natural pexpect pattern, "send a line, then wait for `cs> `", sees each command's whole
output under TERM xterm-256color, xterm, dumb and an unset TERM: between an accepted line and
the next prompt the terminal receives the output and nothing else that reads `cs> ` (the
accepted line's last redraw used to write `cs> ` again, and the script stopped there). Ctrl-D
after any prompt ends the shell at once."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import pytest
from shell_helpers import plain, shell_env

TERMS = ["xterm-256color", "xterm", "dumb", None]

# 20 commands and a text each one's output holds (errors included: the terminal shows both)
COMMANDS = [
    ("config execmode show", "Configured Execution Mode : PIPELINED"),
    ("system show", "Software Version"),
    ("software show", "sqlite"),
    ("user list", "root"),
    ("jobs show", "No jobs in the queue."),
    ("audit show", "The audit log is empty."),
    ("system list", "cs2-1"),
    ("conf exec sh", "Configured Execution Mode : PIPELINED"),
    ("system show | match State", "State"),
    ("system show | count", "Count: "),
    ("software show | display json", '"sqlite"'),
    ("jobs show 1", "No job 1"),
    ("sytem show", "did you mean `system`?"),
    ('system show | match "Soft(ware)?"', "Software Version"),
    ("audit show --since 5m --until 10m", "is later than"),
    ("q", "type `quit` in full"),
    ("jobs show --all", "No jobs yet."),
    ("config execmode show --output-format=json", "PIPELINED"),
    ("help config", "config execmode setup"),
    ("system status | last 1", "Running Jobs"),
]


def spawn_cs(home: Path, term: str | None) -> pexpect.spawn:
    env = shell_env(home)
    env.pop("TERM", None)
    if term is not None:
        env["TERM"] = term
    child = pexpect.spawn(
        sys.executable,
        ["-m", "cs2sim.csshell"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(50, 160),
    )
    child.delaybeforesend = None  # a script does not wait between keys
    return child


@dataclass
class Transcript:
    """One console driven by the pattern: what came before each prompt, and how it ended."""

    before: list[tuple[str, str]]  # (line sent, what the terminal got before the next prompt)
    exitstatus: int | None
    problem: str | None  # the prompt or the end that never came


def drive(home: Path, term: str | None) -> Transcript:
    """One console under `term`: the 20 commands, each followed by `expect("cs> ")`, then Ctrl-D
    right after the 20th prompt."""
    child = spawn_cs(home, term)
    before: list[tuple[str, str]] = []
    problem = None
    try:
        child.expect_exact("cs> ")
        for line, _ in COMMANDS:
            child.sendline(line)
            child.expect_exact("cs> ")
            before.append((line, str(child.before)))
        child.sendeof()
        child.expect(pexpect.EOF)
    except (pexpect.TIMEOUT, pexpect.EOF) as e:
        problem = (
            f"TERM={term}: {type(e).__name__} after {len(before)} commands: "
            f"{plain(str(child.before))[-300:]!r}"
        )
    finally:
        child.close(force=True)
    return Transcript(before, child.exitstatus, problem)


@pytest.fixture(scope="module", params=TERMS, ids=lambda t: t or "unset")
def transcript(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One console session per TERM, shared by the two tests that read what it showed (a
    console start costs ~0.2 CPU-s, a command ~0.01): the accepted line's look and every
    command's output are checked in the same transcript."""
    home = tmp_path_factory.mktemp("pattern") / "cs2home"
    return request.param, drive(home, request.param)


def test_send_a_line_then_expect_the_prompt_captures_every_output(
    transcript: tuple[str | None, Transcript],
) -> None:
    term, seen = transcript
    expected = dict(COMMANDS)
    missing = [(line, plain(b)[-300:]) for line, b in seen.before if expected[line] not in plain(b)]
    assert missing == [], f"TERM={term}: outputs lost: {missing}"
    assert seen.problem is None, seen.problem
    assert seen.exitstatus == 0  # Ctrl-D right after the 20th prompt ended the shell


def test_the_accepted_line_is_shown_without_the_prompt_bytes(
    transcript: tuple[str | None, Transcript],
) -> None:
    """The line stays readable (`cs>` and what was typed), but `cs> ` is the next prompt."""
    term, seen = transcript
    assert seen.before, seen.problem
    line, before = seen.before[0]
    assert line == "config execmode show"
    assert "config execmode show" in before, f"TERM={term}: {before!r}"
    assert before.index("config execmode show") < before.index("Configured Execution Mode")
    assert seen.problem is None, seen.problem
    assert seen.exitstatus == 0


# Where TERM matters for Ctrl-D: prompt_toolkit reads keys one way on a dumb terminal (its
# _dumb_prompt: the prompt is printed, then the application starts) and one way on every other
# (raw mode, then the first redraw); xterm, xterm-256color and an unset TERM differ only in
# colour depth, which is output. The four TERMs' Ctrl-D after a prompt is in the transcript
# above (after the 20th); the first prompt, ten times in a row, is
# tests/shell/test_shell_literal_prompt.py's. Here: the prompt after the first command, a few
# and many, one console each (a Ctrl-D ends the console), on one terminal of each kind.
CTRL_D_TERMS = ["dumb", "xterm-256color"]
CTRL_D_AFTER = [1, 3, 9]


@pytest.mark.slow  # 6 shells
@pytest.mark.parametrize("term", CTRL_D_TERMS)
def test_ctrl_d_after_any_prompt_is_never_lost(home: Path, term: str) -> None:
    for commands in CTRL_D_AFTER:
        child = spawn_cs(home, term)
        try:
            child.expect_exact("cs> ")
            for line, _ in COMMANDS[:commands]:
                child.sendline(line)
                child.expect_exact("cs> ")
            child.sendeof()  # the moment the prompt arrived
            try:
                child.expect(pexpect.EOF, timeout=20)
            except pexpect.TIMEOUT:
                raise AssertionError(
                    f"TERM={term}: Ctrl-D lost after {commands} commands: "
                    f"{plain(str(child.before))!r}"
                ) from None
        finally:
            child.close(force=True)
        assert child.exitstatus == 0
