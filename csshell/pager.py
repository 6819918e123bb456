"""The pager: output taller than the terminal is shown a screen at a time.

`$PAGER` if set, else `less` if installed (`-R` keeps colour, `-X` leaves the text on the screen
after `q`, `-K` lets Ctrl-C leave) on a terminal that is not `dumb`, else a built-in `--More--`
(Space: next screen, Enter: next line, `q`: stop). Only an interactive shell writing to a
terminal pages; scripts, `cs -c` and `| no-more` get every line at once. Output that fits is
printed as is.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from typing import IO

__all__ = ["TerminalBuffer", "pager_command", "page", "more", "read_key"]

MORE = "--More--"


class TerminalBuffer(io.StringIO):
    """Collects a command's output as it would be drawn on `terminal` (a terminal: colour and
    the terminal's width), to be paged once the command is done."""

    def __init__(self, terminal: IO[str]) -> None:
        super().__init__()
        self.terminal = terminal

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.terminal.fileno()


def pager_command() -> list[str] | None:
    """The external pager to run, or None for the built-in one."""
    chosen = os.environ.get("PAGER", "").strip()
    if chosen:
        try:
            words = shlex.split(chosen)
        except ValueError:
            words = []
        if words and shutil.which(words[0]):
            return words
    if os.environ.get("TERM", "") in ("", "dumb"):  # less would warn and wait: the built-in
        return None
    less = shutil.which("less")
    return [less, "-R", "-X", "-K"] if less else None


def read_key(fd: int) -> str:
    """One key from the terminal `fd`, without waiting for Enter or echoing it."""
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        return os.read(fd, 8).decode("utf-8", "replace")
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def more(lines: list[str], out: IO[str], rows: int, key: Callable[[], str]) -> None:
    """The built-in pager: a screen (rows - 1 lines), then `--More--` until Space (a screen),
    Enter (a line) or `q` / Ctrl-C / Ctrl-D (stop)."""
    shown = 0
    step = max(1, rows - 1)
    while shown < len(lines):
        chunk = lines[shown : shown + step]
        out.write("".join(line + "\n" for line in chunk))
        shown += len(chunk)
        if shown >= len(lines):
            break
        out.write(MORE)
        out.flush()
        pressed = key()
        out.write("\r" + " " * len(MORE) + "\r")
        if pressed[:1] in ("q", "Q", "\x03", "\x04", ""):
            break
        step = 1 if pressed[:1] in ("\r", "\n") else max(1, rows - 1)
    out.flush()


def page(text: str, out: IO[str], rows: int) -> None:
    """Show `text` on the terminal `out`: at once if it fits in `rows - 1` lines, else paged."""
    lines = text.splitlines()
    if len(lines) < rows:
        out.write(text)
        out.flush()
        return
    command = pager_command()
    if command is None:
        import sys

        fd = sys.stdin.fileno() if sys.stdin.isatty() else out.fileno()  # where keys come from
        more(lines, out, rows, lambda: read_key(fd))
        return
    out.flush()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, encoding="utf-8")
    try:
        proc.communicate(text)
    except KeyboardInterrupt:  # `-K`: less leaves on Ctrl-C too; wait for it to restore the tty
        proc.wait()
