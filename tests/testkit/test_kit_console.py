"""The testing kit's console session: the Weight Streaming Quickstart's mode change, driven as a
user's test would."""

from __future__ import annotations

import pytest

from cs2sim.scripts.testkit.console import ConsoleError


def test_console_walks_the_seeds_mode_change(cs2_console, cs2_system):
    assert cs2_console.send("config execmode show") == "Configured Execution Mode : PIPELINED\n"
    assert cs2_console.send("system standby") == ""
    assert cs2_console.question.startswith(
        "This puts the system in standby. Do you want to proceed?"
    )
    assert cs2_console.answer("yes") == "System cs2-1 is in STANDBY.\n"
    assert cs2_console.question is None
    cs2_console.send("config execmode setup")
    assert "2. Weight Streaming" in cs2_console.question
    out = cs2_console.answer("2")
    assert out == "Selected execution mode configuration: ✔ Weight Streaming\n"
    assert "System activated in Weight Streaming mode." in cs2_console.run("system activate")
    assert cs2_system.active_mode == "WEIGHT_STREAMING"
    assert cs2_console.exit() == 0


def test_output_has_no_toolbar_or_escape_codes(cs2_console):
    out = cs2_console.send("system show")
    assert "\x1b" not in out and "\r" not in out
    assert "jobs:" not in out and "(admin)" not in out  # the toolbar's text
    assert out.startswith("System ")


def test_run_answers_questions_in_turn(cs2_console):
    out = cs2_console.run("system standby", "maybe", "yes")
    assert "System cs2-1 is in STANDBY." in out
    assert cs2_console.question is None


def test_errors_and_ctrl_d(cs2_console):
    out = cs2_console.send("config execmode setup pipelined")
    assert out.startswith("error: ")  # only in STANDBY
    assert cs2_console.eof() == 0


def test_misuse_is_reported_with_the_transcript(cs2_console):
    with pytest.raises(ConsoleError, match="not asking anything"):
        cs2_console.answer("yes")
    cs2_console.send("system standby")
    with pytest.raises(ConsoleError, match="use answer"):
        cs2_console.send("system show")
    cs2_console.answer("no")
    with pytest.raises(ConsoleError, match="still asks"):
        cs2_console.run("system standby")  # no answer given


def test_ctrl_c_cancels_a_question(cs2_console, cs2_system):
    cs2_console.send("system standby")
    cs2_console.interrupt()
    assert cs2_console.question is None
    assert cs2_system.state == "ACTIVE"
    assert "ACTIVE" in cs2_console.send("system status")


def _account(system, name: str, password: str, role: str = "admin") -> None:
    pw = system.root / f"new-{name}"
    pw.write_text(password + "\n")
    pw.chmod(0o600)
    system.cs(f"user add {name} --role {role} --password-file {pw}").check()


def test_the_password_prompt_is_answered(cs2_system):
    _account(cs2_system, "bob", "s3cret")
    console = cs2_system.console(user="bob", password="s3cret")
    assert console.question is None
    assert console.send("system standby --yes") == "System cs2-1 is in STANDBY.\n"
    assert [e.user for e in cs2_system.audit() if e.command == "system standby"] == ["bob"]
    assert console.exit() == 0


def test_the_password_prompt_is_a_question_a_test_can_answer(cs2_system):
    _account(cs2_system, "bob", "s3cret")
    console = cs2_system.console(user="bob")
    assert console.question == "Password for bob:"
    console.answer("wrong")
    assert console.closed and console.question is None
    assert "error:" in console.transcript
    assert console.wait() != 0
    with pytest.raises(ConsoleError, match="refused the login"):
        cs2_system.console(user="bob", password="wrong")
