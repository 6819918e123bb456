"""Run a line of commands, and the shell's one error boundary.

Every failure becomes one line `error: <sentence>` (through `Context.error`) and an exit code:
a `CsError` keeps its own, Ctrl-C is 130, anything unexpected is 70 (sysexits EX_SOFTWARE) with
"internal error: ...; rerun with --traceback and report it." No traceback reaches the user
unless `--traceback` was given.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.context import Cancelled, ExitShell
from cs2sim.csshell.table import split_commands
from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context

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
    except Exception as e:  # the boundary: a bug still gets one sentence
        if ctx.traceback:
            _print_traceback(ctx)
        ctx.error(internal_message(e))
        return INTERNAL_EXIT


def _print_traceback(ctx: Context) -> None:
    import traceback  # only for --traceback: keeps the shell's start fast

    traceback.print_exc(file=ctx.err)


def run_line(ctx: Context, line: str) -> int:
    """Run the `;`-separated commands of `line`, stopping at the first failure (a command ending
    in `?` shows what may follow instead). Returns the exit code; ExitShell propagates."""
    commands: list[list[str]] = []
    code = guarded(ctx, lambda: commands.extend(split_commands(line)))
    for words in commands:
        if code:
            break
        code = guarded(ctx, functools.partial(_run, ctx, words))
    return code


def _run(ctx: Context, words: list[str]) -> None:
    if words[-1].endswith("?"):  # `conf exec ?`, `conf?`: what may follow, like a router
        _echo_all(ctx, question_help(ctx.table, " ".join(words)[:-1]))
        return
    invocation = ctx.table.parse(words)
    invocation.command.run(ctx, invocation)


def _echo_all(ctx: Context, lines: list[str]) -> None:
    for text in lines:
        ctx.echo(text)
