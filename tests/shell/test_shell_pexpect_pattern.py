"""The natural pexpect pattern, "send a line, then wait for `cs> `", sees each command's whole
output under TERM xterm-256color, xterm, dumb and an unset TERM: between an accepted line and
the next prompt the terminal receives the output and nothing else that reads `cs> ` (the
accepted line's last redraw used to write `cs> ` again, and the script stopped there). Ctrl-D
after any prompt ends the shell at once."""

from __future__ import annotations

import sys
from pathlib import Path

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


@pytest.mark.slow  # 4 shells x 20 commands
@pytest.mark.parametrize("term", TERMS, ids=lambda t: t or "unset")
def test_send_a_line_then_expect_the_prompt_captures_every_output(
    home: Path, term: str | None
) -> None:
    child = spawn_cs(home, term)
    captured = []
    try:
        child.expect_exact("cs> ")
        for line, text in COMMANDS:
            child.sendline(line)
            child.expect_exact("cs> ")
            shown = plain(str(child.before))
            captured.append((line, text in shown, shown))
        child.sendeof()  # Ctrl-D right after the 20th prompt
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    missing = [(line, shown[-300:]) for line, ok, shown in captured if not ok]
    assert missing == [], f"TERM={term}: outputs lost: {missing}"
    assert child.exitstatus == 0


@pytest.mark.parametrize("term", TERMS, ids=lambda t: t or "unset")
def test_the_accepted_line_is_shown_without_the_prompt_bytes(home: Path, term: str | None) -> None:
    """The line stays readable (`cs>` and what was typed), but `cs> ` is the next prompt."""
    child = spawn_cs(home, term)
    try:
        child.expect_exact("cs> ")
        child.sendline("config execmode show")
        child.expect_exact("cs> ")
        before = str(child.before)
        assert "config execmode show" in before
        assert before.index("config execmode show") < before.index("Configured Execution Mode")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


@pytest.mark.slow  # 10 shells per TERM
@pytest.mark.parametrize("term", TERMS, ids=lambda t: t or "unset")
def test_ctrl_d_after_any_prompt_is_never_lost(home: Path, term: str | None) -> None:
    for commands in range(10):
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
