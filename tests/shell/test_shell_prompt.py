"""The interactive pieces in-process: prompt_toolkit pipe input + DummyOutput (no terminal bytes
asserted), the yes/no question, the setup menu, the `?` key, the toolbar, type-ahead merging."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.key_binding import KeyPress
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import DummyOutput
from shell_helpers import make_context, out

from cs2sim.csshell.context import Cancelled
from cs2sim.csshell.prompts import TerminalPrompter
from cs2sim.csshell.repl import (
    coalesce_typeahead,
    history_problem,
    make_session,
    prompt_loop,
    typeahead_input,
)
from cs2sim.csshell.toolbar import Toolbar
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store

DOWN = "\x1b[B"
MODES = [(ExecMode.PIPELINED, "Pipelined"), (ExecMode.WEIGHT_STREAMING, "Weight Streaming")]


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as inp, create_app_session(input=inp, output=DummyOutput()):
        yield inp


def run_shell(store: Store, pipe: PipeInput, text: str):
    """Feed `text` to a prompt loop, then end of input; return (exit code, context)."""
    ctx = make_context(store, prompter=TerminalPrompter(), interactive=True)
    pipe.send_text(text)
    pipe.close()
    return prompt_loop(ctx, make_session(ctx, None)), ctx


def test_prompt_loop_runs_commands_and_ends_on_eof(store: Store, pipe: PipeInput) -> None:
    code, ctx = run_shell(store, pipe, "config execmode show\r")
    assert code == 0
    assert out(ctx) == "Configured Execution Mode : PIPELINED\n"


def test_ctrl_c_at_the_prompt_cancels_only_the_line(store: Store, pipe: PipeInput) -> None:
    code, ctx = run_shell(store, pipe, "system standby --yes\x03config execmode show\r")
    assert code == 0
    assert out(ctx) == "Configured Execution Mode : PIPELINED\n"  # the cancelled line never ran
    assert Machine(store).status().state is State.ACTIVE


def test_exit_command_leaves(store: Store, pipe: PipeInput) -> None:
    code, ctx = run_shell(store, pipe, "exit\rconfig execmode show\r")
    assert code == 0 and out(ctx) == ""


def test_question_mark_shows_help_and_keeps_the_line(
    store: Store, pipe: PipeInput, capsys: pytest.CaptureFixture[str]
) -> None:
    code, ctx = run_shell(store, pipe, "conf exec ?sh\r")
    printed = out(ctx)  # through ctx.echo, like every console line (terminal.py)
    assert "cs> conf exec ?" in printed
    assert "Show the configured execution mode." in printed
    # the line went on: `conf exec sh`
    assert printed.endswith("\nConfigured Execution Mode : PIPELINED\n")


def test_confirm_re_asks_until_yes_or_no(
    pipe: PipeInput, capsys: pytest.CaptureFixture[str]
) -> None:
    pipe.send_text("maybe\ryes\r")
    assert TerminalPrompter().confirm("Proceed?", "system standby") is True
    assert capsys.readouterr().out.count("Please answer yes or no.") == 1


@pytest.mark.parametrize("answer", ["\r", "n\r", "NO\r", "\x04"])  # \x04: Ctrl-D
def test_confirm_defaults_to_no(pipe: PipeInput, answer: str) -> None:
    pipe.send_text(answer)
    assert TerminalPrompter().confirm("Proceed?", "system standby") is False


@pytest.mark.parametrize(
    ("keys", "chosen"),
    [
        (DOWN + "\r", ExecMode.WEIGHT_STREAMING),  # arrow keys + Enter
        ("2\r", ExecMode.WEIGHT_STREAMING),  # typed number
        ("w\r", ExecMode.WEIGHT_STREAMING),  # typed name (first letters)
        ("weight-streaming\r", ExecMode.WEIGHT_STREAMING),  # typed whole name
        ("Pipelined\r", ExecMode.PIPELINED),
        ("x\x7f2\r", ExecMode.WEIGHT_STREAMING),  # a bad letter, backspace, then a number
        ("9\x7f\x7f\r", ExecMode.PIPELINED),  # 9 names nothing: Enter waits; erase it
        ("\r", ExecMode.PIPELINED),  # the preselected current mode
        (DOWN + DOWN + "\x1b[A\r", ExecMode.PIPELINED),  # down, down (stays), up
    ],
)
def test_setup_menu(pipe: PipeInput, keys: str, chosen: ExecMode) -> None:
    pipe.send_text(keys)
    assert TerminalPrompter().choose("Mode?", MODES, ExecMode.PIPELINED, "") is chosen


def test_ctrl_d_in_the_menu_cancels(pipe: PipeInput) -> None:
    pipe.send_text("\x04" + "2\r")  # without the Ctrl-D binding, `2` would be chosen
    with pytest.raises(Cancelled, match="nothing was changed"):
        TerminalPrompter().choose("Mode?", MODES, ExecMode.PIPELINED, "")


def test_ctrl_d_at_a_password_prompt_cancels(pipe: PipeInput) -> None:
    pipe.send_text("\x04")
    with pytest.raises(Cancelled, match="nothing was changed"):
        TerminalPrompter().secret("New password: ", "")


def test_ctrl_d_in_the_setup_menu_changes_nothing(store: Store, pipe: PipeInput) -> None:
    code, ctx = run_shell(store, pipe, "system standby --yes\rconfig execmode setup\r\x042\r")
    assert code == 0
    assert "Cancelled; nothing was changed." in out(ctx).splitlines()
    assert Machine(store).status().configured_mode is ExecMode.PIPELINED


def test_setup_menu_enter_waits_while_typed_text_names_nothing() -> None:
    from cs2sim.csshell.menu import Menu

    menu = Menu("Mode?", MODES, ExecMode.PIPELINED)
    menu.type("x")
    assert menu.accept() is None
    assert "no option matches 'x'" in "".join(t for _, t in menu.fragments())
    menu.backspace()
    assert menu.accept() is ExecMode.PIPELINED


def test_setup_menu_preselects_the_current_mode(pipe: PipeInput) -> None:
    pipe.send_text("\r")
    got = TerminalPrompter().choose("Mode?", MODES, ExecMode.WEIGHT_STREAMING, "")
    assert got is ExecMode.WEIGHT_STREAMING


def test_setup_through_the_menu(store: Store, pipe: PipeInput) -> None:
    code, ctx = run_shell(store, pipe, "system standby\ryes\rconfig execmode setup\r" + DOWN + "\r")
    assert out(ctx).splitlines()[-1] == "Selected execution mode configuration: ✔ Weight Streaming"
    assert Machine(store).status().configured_mode is ExecMode.WEIGHT_STREAMING


def test_an_unusable_history_file_warns_once_and_never_breaks_the_prompt(
    store: Store, pipe: PipeInput, tmp_path: Path
) -> None:
    history = tmp_path / "history"
    history.mkdir()  # a directory: unreadable and unwritable as a file, even for root
    assert history_problem(history) == (
        f"warning: command history is off: cannot write {history} (Is a directory); "
        "fix its permissions, or remove it, to keep history."
    )
    ctx = make_context(store, prompter=TerminalPrompter(), interactive=True)
    pipe.send_text("config execmode show\r")
    pipe.close()
    assert prompt_loop(ctx, make_session(ctx, history)) == 0
    assert out(ctx) == "Configured Execution Mode : PIPELINED\n"
    assert history_problem(tmp_path / "fresh") is None


def test_toolbar_reads_the_store_at_each_render(store: Store) -> None:
    ctx = make_context(store)
    toolbar = Toolbar(ctx, columns=lambda: 160)  # a wide terminal: every word of it

    def text() -> str:
        return "".join(t for _, t in toolbar())

    assert "cs2-1" in text() and "ACTIVE" in text() and "jobs: 0" in text()
    admin = ctx.identity
    other = Machine(store)  # as if another shell
    other.standby(admin)
    other.setup_execmode(admin, ExecMode.WEIGHT_STREAMING)
    assert "STANDBY" in text()
    assert "mode: PIPELINED → WEIGHT_STREAMING at activate" in text()


def test_typeahead_merges_plain_characters_only() -> None:
    keys = [KeyPress(c, c) for c in "conf ?"] + [KeyPress(Keys.ControlM, "\r")]
    merged = coalesce_typeahead(keys, frozenset("?"))
    assert [k.key for k in merged] == [Keys.BracketedPaste, "?", Keys.ControlM]
    assert merged[0].data == "conf "
    # a single key (a person typing) and Meta-x (Escape + x) are left alone
    assert coalesce_typeahead([KeyPress("a", "a")], frozenset()) == [KeyPress("a", "a")]
    meta = [KeyPress(Keys.Escape, "\x1b"), KeyPress("b", "b"), KeyPress("c", "c")]
    assert [k.key for k in coalesce_typeahead(meta, frozenset())] == [Keys.Escape, "b", "c"]


def test_typeahead_input_still_runs_commands(store: Store) -> None:
    with (
        create_pipe_input() as raw,
        create_app_session(input=typeahead_input(raw, frozenset("?")), output=DummyOutput()),
    ):
        code, ctx = run_shell(store, raw, "config execmode show\rconf exec ?\x03")
    assert code == 0 and out(ctx).startswith(
        "Configured Execution Mode : PIPELINED\ncs> conf exec ?"
    )
