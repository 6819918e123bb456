"""`ConsoleSession`: the interactive `cs>` under pexpect, as a test script drives it.

How it knows where a command's output starts and ends: prompt_toolkit switches the terminal's
bracketed-paste mode on while it reads a line (ESC[?2004h) and off when the line is accepted
(ESC[?2004l). So after a line is sent, everything between "off" and the next "on" is what the
command printed, and what the next render draws is either the `cs>` prompt or a question (a
confirmation, the execution-mode menu, a password prompt). The toolbar and the prompt are part
of the render, never of the output; escape codes and carriage returns are removed.
One request comes before prompt_toolkit starts: `cs --user NAME` asks for the password with
getpass ("Password for NAME: ", echo off). The session sees it as a question too, answered like
the others (or by `password=` when the session starts).

Two things about driving prompt_toolkit with pexpect that the session takes care of: it sends
without pexpect's 50 ms pause (`delaybeforesend=None`), and `cs` never asks the terminal for
the cursor position (a pexpect terminal never answers, which would cost a second per prompt).
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Mapping
from types import ModuleType

from cs2sim.scripts.testkit.result import plain

__all__ = ["ConsoleSession", "ConsoleError", "terminal_signals"]

_INPUT_ON = "\x1b[?2004h"  # prompt_toolkit starts reading a line
_INPUT_ON_RE = re.compile(re.escape(_INPUT_ON))
# `cs --user NAME` asks with getpass before the console starts: no prompt_toolkit, no ESC[?2004h
_GETPASS = re.compile(r"Password for [^\r\n]*?: ")
_INPUT_OFF = "\x1b[?2004l"  # ... and has accepted it
_RENDERED = "\x1b[?25h"  # the cursor is shown again: one render pass is complete


class ConsoleError(AssertionError):
    """The console did not do what the test expected; the message holds the session's log."""


def _pexpect() -> ModuleType:
    """pexpect, imported when a session starts (the kit's other parts work without it)."""
    try:
        import pexpect
    except ImportError:
        raise ConsoleError(
            "the console session needs pexpect, which this Python cannot import; "
            "install it (pip install pexpect) or reinstall cs2sim, which "
            "depends on it."
        ) from None
    return pexpect


def terminal_signals() -> None:
    """In the spawned console, before it starts: Ctrl-C and Ctrl-\\ act as on a terminal's
    foreground job. A process started in the background by a non-interactive shell (a CI script's
    `cmd &`) inherits SIGINT and SIGQUIT ignored, and so would every console it spawns: Ctrl-C
    would be echoed and do nothing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


class ConsoleSession:
    """One `cs` process on a pseudo-terminal, at its prompt between calls.

    send(line)      type a line; returns what it printed (or, if it asks something, what it
                    printed before the question; the question is then in `question`)
    answer(text)    answer the pending question (yes/no, a menu choice, a password)
    exit()          leave with `exit`; returns the exit status
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *args: str,
        width: int = 160,
        timeout: float = 15,
        password: str | None = None,
    ) -> None:
        self.timeout = timeout
        self.log = io.StringIO()
        self.question: str | None = None  # the pending question's text, None at the prompt
        self.output = ""  # what cs printed before its first prompt (a login banner, a warning)
        self._px = _pexpect()
        self._getpass = False  # the pending question is the login's password prompt
        self._ended = False  # cs's end (EOF) was read
        self.child = self._px.spawn(
            sys.executable,
            ["-m", "cs2sim.csshell", *args],
            env=dict(env),
            encoding="utf-8",
            timeout=timeout,
            dimensions=(40, width),
            preexec_fn=terminal_signals,
        )
        self.child.delaybeforesend = None
        self.child.logfile_read = self.log
        self.output = self._collect("the first prompt")
        if self._getpass and password is not None:  # `--user NAME`: log in
            self.output += self.answer(password)
            if self.closed:
                raise ConsoleError(
                    f"cs refused the login and exited: {self.output.strip()}" + self._log_tail()
                )
        if self.closed:
            raise ConsoleError("cs exited before showing its prompt" + self._log_tail())
        if self.question is not None and not self._getpass:
            raise ConsoleError(
                f"cs asked {self.question!r} instead of showing its prompt" + self._log_tail()
            )

    @property
    def closed(self) -> bool:
        """True once cs has exited (after `exit`, Ctrl-D, or a refused login)."""
        return self._ended

    # -- driving ---------------------------------------------------------------------------------
    def send(self, line: str) -> str:
        """Type `line` and Enter at the prompt; the output it printed before the next input."""
        if self.question is not None:
            raise ConsoleError(f"cs is asking {self.question!r}; use answer() first")
        return self._submit(line)

    def answer(self, text: str) -> str:
        """Answer the pending question with `text` and Enter; the output that followed."""
        if self.question is None:
            raise ConsoleError("cs is at its prompt, not asking anything; use send()")
        return self._submit(text)

    def run(self, line: str, *answers: str) -> str:
        """send(line), then answer each question in turn; all the output, back at the prompt."""
        out = self.send(line)
        for text in answers:
            out += self.answer(text)
        if self.question is not None:
            raise ConsoleError(
                f"`{line}` still asks {self.question!r} after the answers given" + self._log_tail()
            )
        return out

    def interrupt(self) -> str:
        """Press Ctrl-C (cancels the line or the running command); the output that followed."""
        self.child.sendcontrol("c")
        self._getpass = False
        return self._collect()

    def exit(self, line: str = "exit") -> int:
        """Leave the console with `line` (exit/quit); its exit status."""
        self.child.sendline(line)
        return self.wait()

    def eof(self) -> int:
        """Press Ctrl-D at the prompt (leaves the console); its exit status."""
        self.child.sendcontrol("d")
        return self.wait()

    def wait(self) -> int:
        """Wait for the process to end; its exit status (128+N for a signal N)."""
        if not self._ended:
            try:
                self.child.expect(self._px.EOF, timeout=self.timeout)
            except self._px.TIMEOUT:
                raise ConsoleError("cs did not exit" + self._log_tail()) from None
            self._ended = True
        self.child.close()
        if self.child.signalstatus is not None:
            return 128 + int(self.child.signalstatus)
        return int(self.child.exitstatus or 0)

    @property
    def transcript(self) -> str:
        """Everything the session showed so far, without escape codes."""
        return plain(self.log.getvalue())

    def close(self) -> None:
        """Kill the process if it still runs (tests need not call this with the fixtures)."""
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.close()

    # -- the protocol ----------------------------------------------------------------------------
    def _submit(self, text: str) -> str:
        self.child.sendline(text)
        if not self._getpass:  # getpass reads the line itself, with no bracketed paste
            self._expect(_INPUT_OFF, f"cs to accept {text!r}")
        return self._collect()

    def _collect(self, what: str = "the next prompt") -> str:
        """Output up to the next input request (prompt_toolkit's, or the login's getpass
        prompt, or the end); then read what that request shows."""
        found = self._expect([_INPUT_ON_RE, _GETPASS, self._px.EOF], what)
        output = plain(str(self.child.before))
        self._getpass = found == 1
        if found == 2:
            self.question = None
            self._ended = True
            return output
        if found == 1:
            self.question = plain(str(self.child.after)).strip()
            return output
        self._read_request()
        return output

    def _read_request(self) -> None:
        """After ESC[?2004h: the first complete render says prompt or question."""
        self._expect(_RENDERED, "the prompt to be drawn")
        screen = plain(str(self.child.before))
        if "cs>" in screen:
            self.question = None
        else:
            lines = [ln.strip() for ln in screen.splitlines() if ln.strip()]
            self.question = "\n".join(lines)

    def _expect(self, pattern: object, what: str) -> int:
        """Wait for `pattern` (an exact string, or a list of compiled patterns / EOF); which."""
        px = self._px
        try:
            if isinstance(pattern, str):
                return int(self.child.expect_exact(pattern, timeout=self.timeout))
            return int(self.child.expect(pattern, timeout=self.timeout))
        except px.TIMEOUT:
            raise ConsoleError(
                f"timed out after {self.timeout:g} s waiting for {what}" + self._log_tail()
            ) from None
        except px.EOF:
            self._ended = True
            raise ConsoleError(f"cs exited while waiting for {what}" + self._log_tail()) from None

    def _log_tail(self, chars: int = 2000) -> str:
        return f"\n--- console (last {chars} characters) ---\n{self.transcript[-chars:]}"
