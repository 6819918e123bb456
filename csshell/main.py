"""`cs`: the entry point. Options, login, then one of four ways to read commands.

    cs                              interactive shell (stdin and stdout are a terminal)
    cs config execmode show         one command given as words (as `ssh root@system cs ...`)
    cs -c "system standby --yes; config execmode setup ws"     `;`-separated commands
    cs -f FILE                      one command per line, `#` comments, blank lines skipped
    ... | cs                        commands on stdin when it is not a terminal

Non-interactive runs stop at the first failing command and exit with its code; questions are
never asked (`--yes` answers confirmations), except for one command given as words on a
terminal (`ssh -t root@system cs system standby`), which asks as the shell does. This function is
the outer error boundary: nothing
below it prints a traceback unless `--traceback` is given.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Iterable
from typing import Any, NoReturn

from cs2sim.csshell.context import Context, ExitShell
from cs2sim.csshell.dispatch import (
    BROKEN_PIPE_EXIT,
    INTERNAL_EXIT,
    INTERRUPTED_EXIT,
    internal_message,
    one_line,
    run_line,
)
from cs2sim.system.errors import CsError, UsageError

__all__ = ["main", "build_parser", "script_lines"]


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are our one-sentence UsageError."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; run `cs --help` for the options.")


def build_parser() -> argparse.ArgumentParser:
    """The `cs` command line."""
    p = _Parser(
        prog="cs",
        # no abbreviations: `--password` must not silently mean `--password-file`, and a flag
        # that takes a path or a secret is spelled in full
        allow_abbrev=False,
        description="The cs> admin console of a simulated Cerebras CS-2 (cs2sim).",
        epilog="Without COMMAND, -c or -f: an interactive shell on a terminal, or commands "
        "read from stdin. State lives in $CS2_HOME (default ~/.cs2sim).",
    )
    p.add_argument(
        "-c", dest="commands", metavar="COMMANDS", help="run these `;`-separated commands and exit"
    )
    p.add_argument(
        "-f",
        dest="file",
        metavar="FILE",
        help="run the commands in FILE (one per line, `#` comments) and exit",
    )
    p.add_argument(
        "--system",
        metavar="NAME",
        help="the CS-2 system to act on (default: the first in the cluster description)",
    )
    p.add_argument(
        "--user",
        metavar="NAME",
        help="log in as account NAME (password asked, or read from --password-file)",
    )
    p.add_argument(
        "--password-file",
        metavar="FILE",
        help="read --user's password from the first line of FILE (mode 0600)",
    )
    p.add_argument("-y", "--yes", action="store_true", help="answer yes to confirmations")
    p.add_argument(
        "--traceback",
        action="store_true",
        help="show the Python traceback of an error (for bug reports)",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="one command to run, e.g. `cs config execmode show --output-format=json`",
    )
    return p


def script_lines(lines: Iterable[str]) -> Iterable[tuple[int, str]]:
    """(line number, text) of the script lines to run: blank and `#` comment lines skipped, a
    trailing `# comment` removed (a `#` inside quotes or a word is kept), a byte order mark at
    the start dropped. The same for -c, -f and stdin."""
    from cs2sim.csshell.lexer import strip_comment

    for number, line in enumerate(lines, start=1):
        if number == 1:
            line = line.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors)
        text = strip_comment(line).strip()
        if text:
            yield number, text


def _no_operator_words(words: list[str]) -> None:
    """Refuse `cs system show '|' match X`: a quoted `|` or `;` reaches cs as a word, which
    the command would refuse without saying why; the line belongs in -c."""
    found = next((w for w in words if w in ("|", ";")), None)
    if found is not None:
        line = " ".join(words)
        raise UsageError(
            f"`{found}` given to cs as a word is not a {'pipe' if found == '|' else 'separator'};"
            f" give the whole line with -c: cs -c {shlex.quote(line)}."
        )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cs2sim")
    except PackageNotFoundError:
        return "unknown"


def _run_script(ctx: Context, lines: Iterable[tuple[int, str]], source: str = "") -> int:
    """Run numbered lines until one fails (its exit code) or `exit`; 0 if all succeed.

    With a `source` (a file name, "stdin"), an error names where it happened:
    `error: change-mode.cs line 3: ...`, so a long script's failure is found at once.
    """
    try:
        for number, line in lines:
            ctx.where = f"{source} line {number}: " if source else ""
            code = run_line(ctx, line)
            if code:
                return code
    except ExitShell:
        return 0
    finally:
        ctx.where = ""
    return 0


def _read_file(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8-sig") as f:  # -sig: a byte order mark is not a command
            return f.read().splitlines()
    except OSError as e:
        raise UsageError(
            f"cannot read command file {path}: {e.strerror}; check the path."
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"command file {path} is not UTF-8 text; save it as UTF-8.") from None


def _session(args: argparse.Namespace) -> int:
    """Log in, build the context and run the commands the way the options say."""
    from cs2sim.csshell.commands import COMMANDS
    from cs2sim.csshell.login import login
    from cs2sim.csshell.prompts import ScriptPrompter, TerminalPrompter
    from cs2sim.system.store import Store

    if args.version:
        print(f"cs (cs2sim) {_version()}")
        return 0
    given = [x for x in (args.commands is not None, args.file is not None, bool(args.command)) if x]
    if len(given) > 1:
        raise UsageError("give commands one way: -c, -f or as words, not several.")
    on_terminal = sys.stdin.isatty() and sys.stdout.isatty()
    interactive = not given and on_terminal
    # `cs system standby` typed at a terminal (the `ssh -t root@system cs ...` habit) asks as
    # the shell does; -c, -f and piped commands never wait for an answer
    asks = interactive or (bool(args.command) and on_terminal)
    store = Store.open()
    try:
        identity = login(store, args.user, args.password_file)
        ctx = Context(
            store,
            identity,
            COMMANDS,
            TerminalPrompter() if asks else ScriptPrompter(),
            system=args.system,
            out=sys.stdout,
            err=sys.stderr,
            interactive=interactive,
            assume_yes=args.yes,
            traceback=args.traceback,
        )
        ctx.machine  # noqa: B018 - an unknown --system fails here, before any command
        if interactive:
            from cs2sim.csshell.repl import history_path, run_interactive

            return run_interactive(ctx, history_path(store.home, identity.name))
        if args.commands is not None:
            lines = args.commands.splitlines()
            # several lines: an error names its line, as for -f (`-c line 3: ...`)
            return _run_script(ctx, script_lines(lines), "-c" if len(lines) > 1 else "")
        if args.file is not None:
            return _run_script(ctx, script_lines(_read_file(args.file)), args.file)
        if args.command:
            _no_operator_words(args.command)
            return _run_script(ctx, [(1, shlex.join(args.command))])
        return _run_script(ctx, script_lines(sys.stdin), "stdin")
    finally:
        store.close()


def _show_warnings_as_sentences() -> None:
    """A CsWarning from system/ (a damaged row skipped) is shown as `warning: <sentence>`."""
    import warnings

    from cs2sim.system.errors import CsWarning

    default = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, CsWarning):
            sys.stderr.write(f"warning: {one_line(str(message))}\n")
        else:
            default(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Run cs; return the exit code (0 ok, 1 refused, 2 usage, 77 permission or login,
    130 Ctrl-C, 141 output pipe closed, 70 bug)."""
    show_traceback = "--traceback" in (sys.argv[1:] if argv is None else argv)
    _show_warnings_as_sentences()
    try:
        args = build_parser().parse_args(argv)
        return _session(args)
    except CsError as e:
        if show_traceback:
            _print_traceback()
        _error(one_line(str(e)))
        return e.exit_code
    except SystemExit as e:  # argparse's --help
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return INTERRUPTED_EXIT
    except BrokenPipeError:  # `cs audit show | head -1`: the reader left; nothing to say
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    except Exception as e:  # noqa: BLE001 - the outer boundary: a bug still gets one sentence
        if show_traceback:
            _print_traceback()
        _error(internal_message(e))
        return INTERNAL_EXIT


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _print_traceback() -> None:
    import traceback

    traceback.print_exc()


def _error(message: str) -> None:
    """An error before (or outside) a Context: made visible and wrapped like Context.error."""
    from cs2sim.csshell.context import terminal_columns
    from cs2sim.csshell.terminal import fit

    sys.stdout.flush()
    sys.stderr.write("\n".join(fit(f"error: {message}", terminal_columns(sys.stderr))) + "\n")
    sys.stderr.flush()
