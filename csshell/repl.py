"""The interactive `cs>` prompt: prompt_toolkit session, `?` key, toolbar, history, Ctrl-C/Ctrl-D.

The terminal output never asks for the cursor position (CPR). prompt_toolkit normally sends
ESC[6n and, when the application exits, waits up to a second for the reply; a terminal that
never answers (pexpect, some serial consoles, CI) pays that second on every command. We switch
CPR off in our own Output (not through the caller's environment) and report a small positive
"rows below the cursor" instead, so the renderer still treats the height as known and draws the
bottom toolbar; the layout then takes its preferred height, as it would on any terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from prompt_toolkit import PromptSession
from prompt_toolkit.application import create_app_session, get_app, run_in_terminal
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory
from prompt_toolkit.input import Input, create_input
from prompt_toolkit.key_binding import KeyBindings, KeyPress, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.output import ColorDepth, Output
from prompt_toolkit.output.vt100 import Vt100_Output
from prompt_toolkit.styles import Style
from prompt_toolkit.utils import (
    get_bell_environment_variable,
    get_term_environment_variable,
    is_dumb_terminal,
)

from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.completion import TableCompleter
from cs2sim.csshell.context import ExitShell
from cs2sim.csshell.dispatch import one_line, run_line
from cs2sim.csshell.history import HISTORY_DIR, history_path
from cs2sim.csshell.lexer import open_quote
from cs2sim.csshell.live import LiveNames
from cs2sim.csshell.terminal import visible
from cs2sim.csshell.toolbar import STYLE, Toolbar
from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context

__all__ = [
    "PROMPT",
    "NoCprOutput",
    "ForgivingFileHistory",
    "history_problem",
    "history_path",
    "private_file",
    "banner",
    "terminal_output",
    "coalesce_typeahead",
    "typeahead_input",
    "bound_characters",
    "make_session",
    "prompt_loop",
    "run_interactive",
]

PROMPT = "cs> "
# The prompt as styled text. Its style has an explicit (default) colour only so that the
# renderer writes the trailing space: prompt_toolkit skips unstyled spaces at the end of a line
# and moves the cursor instead, so the bytes on the wire would be `cs>` + a cursor move and a
# script's `expect("cs> ")` would never match. With it the terminal receives `cs> ` literally,
# then the toolbar, then the cursor move back to the end of the prompt.
PROMPT_TEXT = FormattedText([("class:prompt", PROMPT)])
# When a line is accepted prompt_toolkit redraws the whole prompt once more ("done" render:
# cursor to the prompt's start, erase down, draw again without the toolbar), so the bytes
# `cs> ` would reach the terminal a second time, after the typed line and before the command's
# output, and a script's "send a line, expect `cs> `" would stop at that copy and lose the
# output. The accepted line keeps its look, `cs> line`, but its space carries another style,
# so the renderer writes an attribute change between `>` and the space: nothing between two
# prompts matches `cs> ` except the next prompt.
DONE_PROMPT_TEXT = FormattedText([("class:prompt", PROMPT[:-1]), ("class:prompt.done", " ")])
PROMPT_STYLE = {"prompt": "fg:ansidefault", "prompt.done": "fg:ansidefault bg:ansidefault"}
REFRESH_S = 1.0  # toolbar re-read interval while idle (another shell may change the system)


class NoCprOutput(Vt100_Output):
    """A VT100 output that never sends a cursor position request."""

    def get_rows_below_cursor_position(self) -> int:
        # "at least one row": makes the height known without asking; the renderer then uses
        # the layout's preferred height (prompt line + toolbar, + menu space while completing).
        return 1


def terminal_output() -> Output:
    """The terminal output for the interactive shell, with CPR off."""
    output = NoCprOutput.from_pty(
        sys.stdout,
        term=get_term_environment_variable(),
        default_color_depth=ColorDepth.from_env(),
        enable_bell=get_bell_environment_variable(),
    )
    output.enable_cpr = False
    return output


def coalesce_typeahead(keys: list[KeyPress], bound: frozenset[str]) -> list[KeyPress]:
    """Merge runs of plain printable characters that arrived in one read into one paste.

    prompt_toolkit resolves key bindings once per key by walking the whole layout (~0.15 ms a
    key here), so a 20-character line that a script (or a fast paste) sends in one write cost
    ~3 ms before Enter. A person types one key per read and is unaffected. Characters with
    their own binding (`?`) and a character after Escape (Meta-x) stay separate keys.
    """
    merged: list[KeyPress] = []
    run: list[KeyPress] = []

    def flush() -> None:
        if len(run) > 1:
            merged.append(KeyPress(Keys.BracketedPaste, "".join(k.data for k in run)))
        else:
            merged.extend(run)
        run.clear()

    for key in keys:
        plain = (
            isinstance(key.key, str)
            and len(key.key) == 1
            and key.data == key.key
            and key.key.isprintable()
            and key.key not in bound
        )
        after_escape = not run and merged and merged[-1].key == Keys.Escape
        if plain and not after_escape:
            run.append(key)
        else:
            flush()
            merged.append(key)
    flush()
    return merged


def typeahead_input(inp: Input, bound: frozenset[str]) -> Input:
    """Make `inp` deliver typed-ahead text as one paste (see coalesce_typeahead)."""
    read_keys, flush_keys = inp.read_keys, inp.flush_keys
    # prompt_toolkit has no hook between reading keys and parsing them: the methods are wrapped
    inp.read_keys = lambda: coalesce_typeahead(read_keys(), bound)  # type: ignore[method-assign]
    inp.flush_keys = lambda: coalesce_typeahead(flush_keys(), bound)  # type: ignore[method-assign]
    return inp


def bound_characters(kb: KeyBindings) -> frozenset[str]:
    """The single printable characters that have a binding of their own (`?`)."""
    return frozenset(
        k
        for b in kb.bindings
        for k in b.keys
        if isinstance(k, str) and len(k) == 1 and k.isprintable()
    )


def question_echo(ctx: Context, text: str) -> str:
    """The line a `?` leaves above its help. prompt_toolkit erased the prompt to print, so it
    is written again, as the accepted line is (`cs>` and an attribute change before the space:
    a script waiting for `cs> ` gets the help first). On a dumb terminal nothing was erased and
    the typed text is still there: only the `?` is added."""
    if ctx.is_terminal and is_dumb_terminal():
        return "?\n"
    shown = visible(text)  # the typed text may hold control characters
    if ctx.is_terminal:
        return f"{PROMPT[:-1]}\x1b[0m {shown}?\n"
    return f"{PROMPT}{shown}?\n"


def _key_bindings(ctx: Context) -> KeyBindings:
    kb = KeyBindings()

    @kb.add("?")
    def _help(event: KeyPressEvent) -> None:
        """`?`: show what may follow the text before the cursor; keep the line. Inside quotes
        or after a backslash it is the character `?` (`match "stand(by)?"`)."""
        text = event.app.current_buffer.document.text_before_cursor
        if open_quote(text):
            event.app.current_buffer.insert_text("?")
            return

        def show() -> None:
            ctx.out.write(question_echo(ctx, text))
            try:
                lines = question_help(ctx.table, text, LiveNames(ctx.store))
            except CsError as e:
                lines = [f"error: {one_line(str(e))}"]
            for line in lines:
                ctx.echo(line)
            if ctx.is_terminal and is_dumb_terminal():  # nothing redraws the prompt there
                ctx.out.write(PROMPT + visible(text))
                ctx.flush()

        run_in_terminal(show)

    return kb


HISTORY_MODE = 0o600  # typed commands can hold secrets, account names: as private as the store


def private_file(path: Path) -> None:
    """Create `path` 0600 if missing, and take group/other access away if we own it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, HISTORY_MODE)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.fchmod(fd, HISTORY_MODE)
    finally:
        os.close(fd)


class ForgivingFileHistory(FileHistory):
    """FileHistory that never breaks the prompt: a file that cannot be read or written (a
    directory, another user's file in a shared $CS2_HOME) just means no saved history.
    The file is kept mode 0600, like the store (prompt_toolkit would create it 0644)."""

    def load_history_strings(self) -> Iterable[str]:
        try:
            return list(super().load_history_strings())
        except OSError:
            return []

    def store_string(self, string: str) -> None:
        with contextlib.suppress(OSError):
            private_file(Path(os.fsdecode(self.filename)))
            super().store_string(string)


def _make_history_dirs(path: Path) -> None:
    from cs2sim.system.paths import private_dir, shared_dir

    if path.parent.parent.name == HISTORY_DIR:  # history_path's layout; else a given file
        private_dir(shared_dir(path.parent.parent.parent, HISTORY_DIR), path.parent.name)


def history_problem(path: Path) -> str | None:
    """Why commands cannot be saved to `path` (one sentence), or None if they can."""
    try:
        _make_history_dirs(path)
        private_file(path)
        return None
    except OSError as e:
        return (
            f"warning: command history is off: cannot write {path} ({e.strerror}); "
            "fix its permissions, or remove it, to keep history."
        )


def prompt_message() -> FormattedText:
    """The prompt while a line is edited, and as the accepted line is drawn for the last time."""
    return DONE_PROMPT_TEXT if get_app().is_done else PROMPT_TEXT


def make_session(ctx: Context, history: Path | None) -> PromptSession[str]:
    """The cs> PromptSession: completion, `?`, toolbar, history."""
    return PromptSession(
        prompt_message,
        completer=TableCompleter(ctx.table, LiveNames(ctx.store)),
        complete_while_typing=False,  # Tab and `?`, as on a network device's console
        # room for the first Tab's menu to show every top-level command (prompt_toolkit's
        # default of 8 lines, less the toolbar, hid the last two), plus the toolbar's line
        reserve_space_for_menu=len(ctx.table.root.children) + 2,
        auto_suggest=AutoSuggestFromHistory(),
        history=ForgivingFileHistory(str(history)) if history is not None else None,
        bottom_toolbar=Toolbar(ctx),
        key_bindings=_key_bindings(ctx),
        style=Style.from_dict({**STYLE, **PROMPT_STYLE}),
        refresh_interval=REFRESH_S,
    )


def prompt_loop(ctx: Context, session: PromptSession[str]) -> int:
    """Read and run lines until `exit`, `quit` or Ctrl-D; Ctrl-C only cancels the line."""
    while True:
        try:
            # Raw mode from before the prompt is written: on a dumb terminal prompt_toolkit
            # prints the prompt first and enters raw mode only afterwards, and a Ctrl-D sent in
            # that gap was taken by the terminal's line discipline (cooked mode) and lost.
            with session.input.raw_mode():
                line = session.prompt()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return 0
        try:
            run_line(ctx, line)
        except ExitShell:
            return 0


def banner(ctx: Context) -> str:
    """The first line of an interactive session."""
    who = ctx.identity
    return (
        f"cs2sim console on {ctx.machine.name}, logged in as {who.name} ({who.role}). "
        "Type `help`, `?` or Tab; Ctrl-D leaves."
    )


def run_interactive(ctx: Context, history: Path | None) -> int:
    """The interactive shell on the real terminal."""
    bound = bound_characters(_key_bindings(ctx))
    inp = create_input()
    # On a dumb terminal prompt_toolkit echoes only the character before the cursor after each
    # change, so a line merged into one paste would show as its last character: keys stay keys.
    if not is_dumb_terminal():
        inp = typeahead_input(inp, bound)
    # The session is made inside the app session: prompt_toolkit binds input/output at creation.
    with create_app_session(input=inp, output=terminal_output()):
        ctx.echo(banner(ctx))
        problem = history_problem(history) if history is not None else None
        if problem is not None:
            ctx.echo(problem)
        return prompt_loop(ctx, make_session(ctx, history))
