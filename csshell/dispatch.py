"""Run a line of commands, and the shell's one error boundary.

Every failure becomes one line `error: <sentence>` (through `Context.error`) and an exit code:
a `CsError` keeps its own, Ctrl-C is 130, anything unexpected is 70 (sysexits EX_SOFTWARE) with
"internal error: ...; rerun with --traceback and report it." No traceback reaches the user
unless `--traceback` was given.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.context import Cancelled, ExitShell
from cs2sim.csshell.lexer import Asking, split_line
from cs2sim.csshell.pipes import PIPES, json_invocation, parse_pipes, run_piped
from cs2sim.csshell.terminal import wrap
from cs2sim.system.errors import CsError, UsageError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.pipes import PipeRun
    from cs2sim.csshell.table import Invocation

__all__ = [
    "run_line",
    "guarded",
    "internal_message",
    "one_line",
    "INTERNAL_EXIT",
    "INTERRUPTED_EXIT",
    "BROKEN_PIPE_EXIT",
]

INTERNAL_EXIT = 70
INTERRUPTED_EXIT = 130
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE, what a shell reports for `yes | head -1`
MAX_DETAIL = 200  # characters of an unexpected exception's text kept in its one sentence


def one_line(text: str) -> str:
    """Collapse whitespace and newlines: an error is always one line."""
    return " ".join(str(text).split())


def internal_message(exc: BaseException) -> str:
    """The one sentence shown for a bug."""
    detail = one_line(f"{type(exc).__name__}: {exc}")[:MAX_DETAIL]
    return f"internal error: {detail}; rerun with --traceback and report it."


def guarded(ctx: Context, action: Callable[[], object]) -> int:
    """Run `action`; turn any failure into one `error:` line and an exit code (0 on success)."""
    try:
        action()
        return 0
    except (ExitShell, BrokenPipeError):  # leaving, or the reader of our output has gone (main)
        raise
    except CsError as e:
        if ctx.traceback:
            _print_traceback(ctx)
        ctx.error(one_line(str(e)))
        return e.exit_code
    except Cancelled as e:
        ctx.echo(one_line(str(e)) or "Cancelled.")
        return INTERRUPTED_EXIT
    except KeyboardInterrupt:
        ctx.echo("Cancelled.")
        return INTERRUPTED_EXIT
    except Exception as e:  # noqa: BLE001 - the boundary: a bug still gets one sentence
        if ctx.traceback:
            _print_traceback(ctx)
        ctx.error(internal_message(e))
        return INTERNAL_EXIT


def _print_traceback(ctx: Context) -> None:
    import traceback  # only for --traceback: keeps the shell's start fast

    traceback.print_exc(file=ctx.err)


def run_line(ctx: Context, line: str) -> int:
    """Run the `;`-separated commands of `line`, stopping at the first failure (a command ending
    in `?` shows what may follow instead). Returns the exit code; ExitShell propagates. When the
    line holds several commands, an error names the one that failed (`command 2 of 3 (...)`)."""
    commands: list[list[list[str]]] = []
    code = guarded(ctx, lambda: commands.extend(split_line(line)))
    where = ctx.where
    for number, stages in enumerate(commands, start=1):
        if code:
            break
        if len(commands) > 1:
            ctx.where = f"{where}command {number} of {len(commands)} (`{' '.join(stages[0])}`): "
        try:
            code = guarded(ctx, functools.partial(_run, ctx, stages))
        finally:
            ctx.where = where
    return code


def _run(ctx: Context, stages: list[list[str]]) -> None:
    """One command and its pipes: parse all of it first (nothing runs if a pipe is wrong)."""
    words, last = stages[0], stages[-1]
    # `conf exec ?`, `show | m?`: what may follow; a quoted or escaped `?` is text (lexer.py)
    if last and isinstance(last[-1], Asking):
        table = PIPES if len(stages) > 1 else ctx.table
        _echo_all(ctx, question_help(table, " ".join(last)[:-1]))
        return
    if not words:
        raise UsageError("nothing before `|`; write a command first, e.g. `audit show | count`.")
    invocation = ctx.table.parse(words)
    pipes = parse_pipes(stages[1:])
    if pipes.json:
        invocation = json_invocation(invocation)
    rows = _pager_rows(ctx, invocation) if not pipes.no_more else None
    if rows is not None:
        _run_paged(ctx, invocation, pipes, rows)
    elif pipes.filters:
        out, width = ctx.out, ctx.width()
        run_piped(ctx, invocation, pipes, lambda text: _write(out, text, width))
    else:
        invocation.command.run(ctx, invocation)


def _write(out: IO[str], text: str, width: int | None) -> None:
    out.write("\n".join(wrap(text, width)) + "\n")


def _pager_rows(ctx: Context, inv: Invocation) -> int | None:
    """The terminal's height when this command's output may be paged; else None (a script,
    not a terminal, or a command that streams: `--follow`, `--watch`)."""
    if not (ctx.interactive and ctx.is_terminal and inv.command.pages):
        return None
    if inv.option("follow") or inv.option("watch"):
        return None
    try:
        return os.get_terminal_size(ctx.out.fileno()).lines or None
    except (OSError, ValueError, AttributeError):
        return None


def _run_paged(ctx: Context, inv: Invocation, pipes: PipeRun, rows: int) -> None:
    """Run the command with its output going to the pager as it is written (the first screen
    shows as soon as it is full); leaving the pager stops the command."""
    from cs2sim.csshell.pager import PagerClosed, PagerStream

    pager = PagerStream(ctx.out, rows)
    try:
        if pipes.filters:

            def sink(text: str) -> None:
                pager.write(text + "\n")

            run_piped(ctx, inv, pipes, sink)
        else:
            with ctx.output_to(pager):  # type: ignore[arg-type]  # a TextIOBase is a text stream
                inv.command.run(ctx, inv)
    except PagerClosed:
        pass  # `q` in the pager: the rest is not wanted
    finally:
        pager.close_pager()


def _echo_all(ctx: Context, lines: list[str]) -> None:
    for text in lines:
        ctx.echo(text)
