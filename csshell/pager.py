"""The pager: output taller than the terminal is shown a screen at a time.

`$PAGER` if set, else `less` if installed (`-R` keeps colour, `-X` leaves the text on the screen
after `q`, `-K` lets Ctrl-C leave) on a terminal that is not `dumb`, else a built-in `--More--`
(Space: next screen, Enter: next line, `q`: stop). Only an interactive shell writing to a
terminal pages; scripts, `cs -c` and `| no-more` get every line at once. Output that fits is
printed as is.

A command's output reaches the pager as it is written (PagerStream): the first screen shows as
soon as it is full, not when the command ends, and leaving the pager (`q`) stops the command.
"""

from __future__ import annotations

import io
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from typing import IO

__all__ = [
    "PagerStream",
    "PagerClosed",
    "pager_command",
    "page",
    "more",
    "read_key",
]

MORE = "--More--"


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


class PagerClosed(Exception):
    """The person left the pager (`q`): the command writing to it stops."""


class PagerStream(io.TextIOBase):
    """A terminal-like stream that pages what is written to it as it comes: lines are held
    until they overflow one screen (rows - 1 lines); then the pager starts (the external one is
    fed through its stdin, the built-in `--More--` shows screen by screen) and every later line
    goes straight to it. Output that never overflows is written as is by `close_pager()`.
    A write after the person left the pager raises PagerClosed."""

    def __init__(self, terminal: IO[str], rows: int, key: Callable[[], str] | None = None) -> None:
        super().__init__()
        self.terminal, self.rows = terminal, rows
        self._held: list[str] = []
        self._partial = ""
        self._proc: subprocess.Popen[str] | None = None
        self._builtin = False
        self._left = 0  # built-in: lines still to show before the next --More--
        self._key = key
        self._closed = False

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.terminal.fileno()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self._closed:
            raise PagerClosed()
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if self._proc is None and not self._builtin:
            self._held.extend(lines)
            if len(self._held) >= self.rows:
                held, self._held = self._held, []
                self._start()
                self._send(held)
        elif lines:
            self._send(lines)
        return len(text)

    def _start(self) -> None:
        command = pager_command()
        if command is None:
            self._builtin = True
            self._left = max(1, self.rows - 1)
            if self._key is None:
                import sys

                fd = sys.stdin.fileno() if sys.stdin.isatty() else self.terminal.fileno()
                self._key = lambda: read_key(fd)
            return
        self.terminal.flush()
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, text=True, encoding="utf-8")

    def _send(self, lines: list[str]) -> None:
        if self._proc is not None:
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write("".join(line + "\n" for line in lines))
            except (BrokenPipeError, OSError):  # less has quit: stop the command
                self._closed = True
                raise PagerClosed() from None
            return
        out = self.terminal
        for line in lines:
            if self._left == 0:
                out.write(MORE)
                out.flush()
                assert self._key is not None
                pressed = self._key()
                out.write("\r" + " " * len(MORE) + "\r")
                if pressed[:1] in ("q", "Q", "\x03", "\x04", ""):
                    self._closed = True
                    out.flush()
                    raise PagerClosed()
                self._left = 1 if pressed[:1] in ("\r", "\n") else max(1, self.rows - 1)
            out.write(line + "\n")
            self._left -= 1
        out.flush()

    def close_pager(self) -> None:
        """The command has ended: write what is held, end the pager and wait for it."""
        if self._closed:
            self._stop()
            return
        tail = [self._partial] if self._partial else []
        self._partial = ""
        if self._proc is None and not self._builtin:
            self.terminal.write("".join(line + "\n" for line in self._held + tail))
            self.terminal.flush()
            self._held = []
            return
        try:
            if tail:
                self._send(tail)
        except PagerClosed:
            pass
        self._stop()

    def _stop(self) -> None:
        if self._proc is None:
            return
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        except OSError:
            pass
        try:
            self._proc.wait()
        except KeyboardInterrupt:  # `-K`: less leaves on Ctrl-C too; wait for it to restore the tty
            self._proc.wait()
