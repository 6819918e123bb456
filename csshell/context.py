"""What a command handler gets: the store, who is acting, where to write, and how to ask.

The context holds no system state: the machine is read through `system/` on every use, so a
second shell (or a launcher) changing the store is seen at the next command. Output goes to
`out` (plain lines) or to a rich `Console` over the same file, created on first use so that
commands which draw no table never import rich. Every line and table cell passes through
csshell/terminal.py (control characters made visible; wrapped at spaces on a terminal).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, Protocol, TypeVar

from cs2sim.csshell.terminal import fit

if TYPE_CHECKING:
    from rich.console import Console

    from cs2sim.csshell.table import CommandTable
    from cs2sim.system.machine import Machine
    from cs2sim.system.store import Store
    from cs2sim.system.users import Identity

__all__ = ["Context", "ExitShell", "Cancelled", "Prompter", "find_machine"]

T = TypeVar("T")
PIPE_WIDTH = 1000  # columns of rich output when not on a terminal (no wrapping)


class ExitShell(Exception):
    """`exit` / `quit`: leave the shell (not an error)."""


class Cancelled(Exception):
    """Ctrl-C stopped a command; the message (if any) says what still holds."""

    exit_code = 130  # 128 + SIGINT, as a shell reports it


class Prompter(Protocol):
    """How a command asks the person at the keyboard (a terminal, a test, or nobody)."""

    def confirm(self, question: str, command: str) -> bool:
        """Ask a yes/no question whose default is no."""

    def choose(self, message: str, options: Sequence[tuple[T, str]], default: T, hint: str) -> T:
        """Let the user pick one of `options` (value, label); `default` is preselected."""

    def secret(self, prompt_text: str, hint: str) -> str:
        """Read a password without echoing it; `hint` says how to give it when no one can type."""


class Context:
    """The shell's session: store, identity, output streams and the prompter."""

    def __init__(
        self,
        store: Store,
        identity: Identity,
        table: CommandTable,
        prompter: Prompter,
        *,
        system: str | None = None,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
        console: Console | None = None,
        interactive: bool = False,
        assume_yes: bool = False,
        traceback: bool = False,
        columns: int | None = None,
    ) -> None:
        self.store = store
        self.where = ""  # "<script> line N: " while a script runs, so an error says where
        self.identity = identity
        self.table = table
        self.prompter = prompter
        self.system = system
        if out is None:
            if console is None:
                raise ValueError("Context needs `out` or `console`")
            out = console.file
        self.out = out
        self.err = err if err is not None else out
        self.interactive = interactive
        self.assume_yes = assume_yes
        self.traceback = traceback
        self._console = console
        self._columns = columns  # a fixed width (tests); else the terminal's, read per line
        self._machine: Machine | None = None
        # The audit id of the mode change (`config execmode setup|withdraw`) that set the
        # configured mode when this session last showed it (0: the cluster description's);
        # None: not shown yet. `system activate` warns about a change made since by another.
        self.seen_mode: int | None = None

    @property
    def machine(self) -> Machine:
        """The system facade; a thin wrapper over the store (it caches no state)."""
        if self._machine is None:
            self._machine = find_machine(self.store, self.system)
        return self._machine

    def use_system(self, name: str) -> None:
        """Act on system `name` (or the system with that IP) from now on (UsageError naming
        the known ones if none)."""
        machine = find_machine(self.store, name)
        self.system, self._machine = machine.name, machine
        self.seen_mode = None  # what this session showed was another system's mode

    def saw_mode(self) -> None:
        """Record that this session has just shown the configured mode (and who set it)."""
        origin = self.machine.mode_origin()
        self.seen_mode = origin.id if origin is not None else 0

    @property
    def can_ask(self) -> bool:
        """True when a question reaches a person (not a script: its prompter refuses)."""
        return bool(getattr(self.prompter, "asks", True))

    @property
    def is_terminal(self) -> bool:
        """True when output goes to a terminal (colour, progress bars, cursor codes allowed)."""
        isatty = getattr(self.out, "isatty", None)
        return bool(isatty and isatty())

    @property
    def console(self) -> Console:
        """A rich Console over `out`, created (and rich imported) on first use."""
        if self._console is None:
            from rich.console import Console

            # Piped output is read by scripts: one line per table row, never wrapped.
            width = None if self.is_terminal else PIPE_WIDTH
            self._console = Console(file=self.out, highlight=False, width=width)
        return self._console

    def width(self, stream: IO[str] | None = None) -> int | None:
        """Columns to wrap `stream` (default `out`) at: the terminal's, or None (not a terminal:
        never wrapped, scripts read one line per fact)."""
        if self._columns is not None:
            return self._columns
        return terminal_columns(self.out if stream is None else stream)

    @contextmanager
    def output_to(self, stream: IO[str]) -> Iterator[None]:
        """Send the command output (not errors or questions) to `stream` for a while: a pipe's
        filters, or the pager's buffer. Tables are drawn for `stream` (a terminal or not)."""
        saved = self.out, self._console, self._columns
        self.out, self._console, self._columns = stream, None, None
        try:
            yield
        finally:
            self.out.flush()
            self.out, self._console, self._columns = saved

    def echo(self, text: object = "", wrap: bool = True) -> None:
        """Write one line of plain text (no markup, no colour): control characters made visible,
        wrapped at spaces on a terminal (`wrap=False` for JSON, which must stay one line)."""
        lines = fit(text, self.width() if wrap else None)
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def error(self, message: str) -> None:
        """The one display point for errors: `error: <one sentence>`."""
        self.flush()
        lines = fit(f"error: {self.where}{message}", self.width(self.err))
        self.err.write("\n".join(lines) + "\n")
        self.err.flush()

    def warn(self, message: str) -> None:
        """A warning on the error stream: `warning: <one sentence>` (the command goes on)."""
        self.flush()
        lines = fit(f"warning: {self.where}{message}", self.width(self.err))
        self.err.write("\n".join(lines) + "\n")
        self.err.flush()

    def flush(self) -> None:
        self.out.flush()

    def table_out(self, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Draw rows as a table, block by block as they come (csshell/rowlines.py); on a
        terminal too narrow for the table, one `column : value` block per row instead."""
        from cs2sim.csshell.rowlines import table_lines

        # the terminal's width as the wrapping uses it (rich says 80 under TERM=dumb, whatever
        # the terminal's size); rich's only when the stream has no size of its own
        width = (self.width() or self.console.width) if self.is_terminal else None
        for lines in table_lines(columns, rows, width):
            if lines:
                self.out.write("\n".join(lines) + "\n")
                self.out.flush()

    def confirm(self, question: str, command: str, yes: bool = False) -> bool:
        """True if `--yes` was given (to the command or to cs), else ask (default no)."""
        if yes or self.assume_yes:
            return True
        return self.prompter.confirm(question, command)


def find_machine(store: Store, name: str | None) -> Machine:
    """The system named `name`, or whose IP it is (as a run's `--cs_ip` names it); the first
    of the cluster for None."""
    from cs2sim.system.errors import UsageError
    from cs2sim.system.machine import Machine

    if name is None:
        return Machine(store)
    try:
        return Machine(store, name)
    except UsageError as unknown:
        try:
            return Machine.for_target(store, name)
        except UsageError:
            raise unknown from None


def terminal_columns(stream: IO[str]) -> int | None:
    """The width of the terminal `stream` writes to, or None if it is not a terminal."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return None
