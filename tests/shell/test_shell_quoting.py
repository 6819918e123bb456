"""Quoting decides what `?` means, in every channel: inside quotes or after a backslash it is
text (a fault reason, a regular expression); unquoted at the end of a word it asks what may
follow. -c, -f and stdin run `cs`'s entry point, the console its prompt session (prompt_toolkit
pipe input, DummyOutput), all in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from shell_helpers import cs, make_context, out

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.lexer import Asking, open_quote, split_line
from cs2sim.csshell.prompts import TerminalPrompter
from cs2sim.csshell.repl import make_session, prompt_loop
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store

REASON_LINE = 'system fault "is it broken?"'


def fault_reason(home: Path) -> tuple[State, str]:
    with Store.open(home) as store:
        status = Machine(store).status()
    return status.state, status.fault_reason


@pytest.mark.parametrize(
    ("line", "asking"),
    [
        ("conf exec ?", True),
        ("show | m?", True),
        ('fault "broken?"', False),
        ("fault 'broken?'", False),
        ("fault broken\\?", False),
        ('fault "broken"?', True),  # the `?` after the closing quote is bare
        ("fault broken\\\\?", True),  # an escaped backslash, then a bare `?`
        ("fault why?not", False),  # `?` inside a word, not at its end
    ],
)
def test_the_lexer_marks_only_a_bare_question_mark(line: str, asking: bool) -> None:
    last = split_line(line)[-1][-1][-1]
    assert isinstance(last, Asking) is asking
    assert "?" in last  # the word keeps its text either way


def test_open_quote_says_where_a_typed_question_mark_is_text() -> None:
    assert open_quote('system fault "is it broken')
    assert open_quote("audit show | match 'stand(by)")
    assert open_quote("system fault broken\\")
    assert not open_quote('system fault "quoted" ')
    assert not open_quote("conf exec ")
    assert not open_quote("system fault broken\\\\")


def test_quoted_question_mark_in_c_is_text(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = cs(capsys, "-c", REASON_LINE)
    assert code == 0, stderr
    assert fault_reason(home) == (State.FAULT, "is it broken?")


def test_escaped_question_mark_in_c_is_text(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, stderr = cs(capsys, "-c", "system fault is it broken\\?")
    assert code == 0, stderr
    assert fault_reason(home) == (State.FAULT, "is it broken?")


def test_quoted_regex_with_question_mark_matches_in_c(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = cs(capsys, "-c", 'system show | match "Soft(ware)? Version"')
    assert code == 0, stderr
    assert stdout.startswith("Software Version")
    assert "Show only the lines" not in stdout  # not the pipes' help


def test_quoted_question_mark_in_f_is_text(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fault.cs"
    script.write_text(REASON_LINE + "  # rehearse\n")
    code, _, stderr = cs(capsys, "-f", str(script))
    assert code == 0, stderr
    assert fault_reason(home) == (State.FAULT, "is it broken?")


def test_quoted_question_mark_on_stdin_is_text(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, stderr = cs(capsys, stdin=REASON_LINE + "\n")
    assert code == 0, stderr
    assert fault_reason(home) == (State.FAULT, "is it broken?")


def test_a_bare_question_mark_still_asks_and_runs_nothing(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "system fault ?") == 0
    assert "REASON" in out(ctx)
    assert Machine(store).status().state is State.ACTIVE


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as inp, create_app_session(input=inp, output=DummyOutput()):
        yield inp


def test_question_mark_typed_inside_quotes_in_the_console_is_text(
    store: Store, pipe: PipeInput
) -> None:
    ctx = make_context(store, prompter=TerminalPrompter(), interactive=True)
    pipe.send_text(REASON_LINE + "\r")
    pipe.close()
    assert prompt_loop(ctx, make_session(ctx, None)) == 0
    assert "Show the" not in out(ctx)  # no help was shown
    status = Machine(store).status()
    assert (status.state, status.fault_reason) == (State.FAULT, "is it broken?")


def test_question_mark_typed_after_a_backslash_in_the_console_is_text(
    store: Store, pipe: PipeInput
) -> None:
    ctx = make_context(store, prompter=TerminalPrompter(), interactive=True)
    pipe.send_text("system fault broken\\?\r")
    pipe.close()
    assert prompt_loop(ctx, make_session(ctx, None)) == 0
    assert Machine(store).status().fault_reason == "broken?"
