"""Helpers for the cs> shell tests: in-process contexts with injected output, a scripted
prompter, `cs` and the interactive console run in this process, and a pexpect wrapper (for what
only a terminal shows) that reports failures as Expected / Actual / Full log (pgcli)."""

from __future__ import annotations

import io
import os
import re
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pexpect
import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.context import Context
from cs2sim.csshell.main import main
from cs2sim.csshell.prompts import ScriptPrompter, TerminalPrompter
from cs2sim.csshell.repl import history_path, history_problem, make_session, prompt_loop
from cs2sim.scripts.testkit.console import terminal_signals
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role, local_identity

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


class Scripted:
    """A prompter with canned answers, recording every question it was asked."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    def confirm(self, question: str, command: str) -> bool:
        self.asked.append(question)
        return bool(self.answers.pop(0))

    def choose(
        self, message: str, options: Sequence[tuple[Any, str]], default: Any, hint: str
    ) -> Any:
        self.asked.append(message)
        self.options = list(options)
        self.default = default
        return self.answers.pop(0)

    def secret(self, prompt_text: str, hint: str) -> str:
        self.asked.append(prompt_text)
        return str(self.answers.pop(0))


def make_context(
    store: Store, identity: Identity | None = None, prompter: Any = None, **kwargs: Any
) -> Context:
    """A context whose output goes to a rich Console on StringIO (and errors to StringIO)."""
    console = kwargs.pop("console", None) or Console(
        file=io.StringIO(), width=160, force_terminal=False, color_system=None
    )
    return Context(
        store,
        identity or local_identity(store),
        COMMANDS,
        prompter or ScriptPrompter(),
        console=console,
        err=io.StringIO(),
        **kwargs,
    )


def out(ctx: Context) -> str:
    return ctx.out.getvalue()  # type: ignore[attr-defined]


def err(ctx: Context) -> str:
    return ctx.err.getvalue()  # type: ignore[attr-defined]


ALICE = Identity("alice", Role.USER, "password")


def write_password(path: Path, password: str, mode: int = 0o600) -> Path:
    path.write_text(password + "\n")
    path.chmod(mode)
    return path


# -- in process: `cs ...` and the interactive console ---------------------------------------------
def cs(
    capsys: pytest.CaptureFixture[str], *argv: str, stdin: str | None = None
) -> tuple[int, str, str]:
    """`cs ARGV` run by its entry point in this process (stdin: the text piped to it); (exit
    code, stdout, stderr). $CS2_HOME is the test's (the `home` fixture)."""
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(argv))
    finally:
        sys.stdin = saved
    captured = capsys.readouterr()
    return code, captured.out, captured.err


class RecordingPrompter(TerminalPrompter):
    """The console's own prompter (yes/no, menu, password, read from the app session's input),
    recording each question and each menu it showed."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.menus: list[tuple[list[tuple[Any, str]], Any]] = []

    def confirm(self, question: str, command: str) -> bool:
        self.asked.append(question)
        return super().confirm(question, command)

    def choose(
        self, message: str, options: Sequence[tuple[Any, str]], default: Any, hint: str
    ) -> Any:
        self.asked.append(message)
        self.menus.append((list(options), default))
        return super().choose(message, options, default, hint)

    def secret(self, prompt_text: str, hint: str) -> str:
        self.asked.append(prompt_text)
        return super().secret(prompt_text, hint)


Until = str | Callable[[Buffer], bool] | None
Keys = str | Sequence[tuple[str, Until]]
STEP_BOUND_S = 120.0
HISTORY_LOADED: Until = lambda line: bool(line.history.get_strings())  # noqa: E731
MENU_OPEN: Until = lambda line: line.complete_state is not None  # noqa: E731 - a Tab's menu


def console_context(store: Store, identity: Identity | None = None, **kwargs: Any) -> Context:
    """The context of an interactive session: asking on the terminal (RecordingPrompter)."""
    return make_context(store, identity, prompter=RecordingPrompter(), interactive=True, **kwargs)


def console(
    store: Store,
    keys: Keys,
    identity: Identity | None = None,
    history: bool = True,
    ctx: Context | None = None,
    **kwargs: Any,
) -> tuple[int, Context]:
    """The interactive cs> in this process: `keys` typed, then the end of input (as Ctrl-D);
    (exit code, context). prompt_toolkit reads the keys from a pipe and draws nothing
    (create_pipe_input + DummyOutput in an app session, prompt_toolkit's documented way to test
    an application: "Unit testing" in its docs), so what is checked is what the console does,
    not the bytes a terminal gets: out(ctx), err(ctx), ctx.prompter.asked. The session is the
    shell's own (make_session: completion, `?`, toolbar, history in the account's file unless
    history=False); questions are asked by the TerminalPrompter from the same keys.

    `keys` is a string, or steps (keys, until): after a step's keys, the next step's are typed
    once the line being edited reads `until` (or `until(buffer)` holds, e.g. MENU_OPEN; None:
    at once), as a person waits to see Tab's work (Tab completes asynchronously). A step whose
    line never came fails the test, saying what the line was. `ctx`: a session's context made
    before (by console_context), to go on with what it has seen."""
    ctx = ctx or console_context(store, identity, **kwargs)
    path = history_path(store.home, ctx.identity.name) if history else None
    steps = [(keys, None)] if isinstance(keys, str) else list(keys)
    missed: list[str] = []
    with create_pipe_input() as inp, create_app_session(input=inp, output=DummyOutput()):
        problem = history_problem(path) if path is not None else None
        if problem is not None:
            ctx.echo(problem)
        session = make_session(ctx, path)
        typist = threading.Thread(target=_type, args=(inp, session.default_buffer, steps, missed))
        typist.start()
        try:
            code = prompt_loop(ctx, session)
        finally:
            typist.join()
    assert not missed, missed[0] + f"; the console wrote: {out(ctx)!r}, errors: {err(ctx)!r}"
    return code, ctx


def _type(inp: PipeInput, line: Buffer, steps: list[tuple[str, Until]], missed: list[str]) -> None:
    """Send each step's keys; before the next, wait until the edited line is as the step says.
        Woken at each change of the text, and every 50 ms for what fires no event (a menu opening,
        a new prompt's empty line). STEP_BOUND_S only ends a broken test (it then stops typing):
    pexpect's timeouts have the same role in the terminal tests."""
    changed = threading.Condition()

    def notify(_: Buffer) -> None:
        with changed:
            changed.notify_all()

    line.on_text_changed += notify
    try:
        for text, until in steps:
            inp.send_text(text)
            if until is None:
                continue
            bound = time.monotonic() + STEP_BOUND_S
            with changed:
                while not (until(line) if callable(until) else line.text == until):
                    if time.monotonic() > bound:
                        missed.append(f"after typing {text!r} the line read {line.text!r}")
                        return
                    changed.wait(0.05)
    finally:
        line.on_text_changed -= notify
        inp.close()


# -- end-to-end ----------------------------------------------------------------------------------
def shell_env(home: Path, boot_seconds: float = 0.0) -> dict[str, str]:
    """The environment of a spawned cs: the caller's, plus only CS2_HOME and CS2_BOOT_SECONDS."""
    env = dict(os.environ, CS2_HOME=str(home), CS2_BOOT_SECONDS=str(boot_seconds))
    env.pop("PROMPT_TOOLKIT_NO_CPR", None)  # the shell must not need it
    env.pop("CS2_CLUSTER", None)
    return env


class Shell:
    """A `python -m csshell` under pexpect; failures show Expected / Actual / Full log."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.log = io.StringIO()
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "cs2sim.csshell", *args],
            env=env,
            encoding="utf-8",
            timeout=15,
            dimensions=(40, 160),
            preexec_fn=terminal_signals,  # Ctrl-C works even if pytest runs as a background job
        )
        self.child.delaybeforesend = None
        self.child.logfile_read = self.log

    def expect(self, text: str, timeout: float = 15) -> str:
        """Wait for `text`; return what came before it (escape codes removed)."""
        try:
            self.child.expect_exact(text, timeout=timeout)
        except (pexpect.TIMEOUT, pexpect.EOF) as e:
            raise AssertionError(
                textwrap.dedent("""\
                Expected:
                ---
                {0!r}
                ---
                Actual:
                ---
                {1!r}
                ---
                Full log:
                ---
                {2}
                ---
                ({3})""").format(
                    text,
                    plain(str(self.child.before)),
                    plain(self.log.getvalue()),
                    type(e).__name__,
                )
            ) from None
        return plain(str(self.child.before))

    def prompt(self) -> str:
        """Wait for the next `cs> ` prompt (the four characters are on the wire at every prompt;
        tests/shell/test_shell_literal_prompt.py holds that)."""
        return self.expect("cs> ")

    def run(self, line: str, *expected: str) -> str:
        """Send `line`, wait for each expected text in order, then for the prompt."""
        self.child.sendline(line)
        seen = "".join(self.expect(text) + text for text in expected)
        return seen + self.prompt()

    def send(self, text: str) -> None:
        self.child.send(text)

    def line_is(self, text: str, tries: int = 100) -> None:
        """Press `?` until the shell echoes `cs> <text>?` (Tab completion is asynchronous)."""
        seen = []
        for _ in range(tries):
            self.child.send("?")
            # the echoed line: `cs>`, an attribute reset (so it is not a prompt), the text, `?`
            self.child.expect(r"cs>(?:\x1b\[0m)? ([^\r\n\x1b]*)\?\r\n", timeout=15)
            seen.append(self.child.match.group(1))
            if seen[-1] == text:
                self.prompt()
                return
            time.sleep(0.05)
        raise AssertionError(
            f"Expected the line {text!r}; the shell showed {seen[-3:]!r}; "
            f"full log:\n{plain(self.log.getvalue())}"
        )

    def exit_status(self) -> int | None:
        """Wait for the process to end; its exit status."""
        self.expect_eof()
        self.child.close()
        return self.child.exitstatus

    def expect_eof(self) -> None:
        try:
            self.child.expect(pexpect.EOF, timeout=15)
        except pexpect.TIMEOUT:
            raise AssertionError(
                f"cs did not exit; full log:\n{plain(self.log.getvalue())}"
            ) from None

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def plain(text: str) -> str:
    """Terminal output without escape codes and carriage returns."""
    return ANSI.sub("", text)
