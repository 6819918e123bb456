"""Asking the person at the keyboard: yes/no, a menu choice, a password.

`TerminalPrompter` asks through prompt_toolkit (so tests can drive it with pipe input);
`ScriptPrompter` is used when cs is not interactive (-c, -f, stdin) and never waits for an answer:
each question becomes a usage error that says which flag or argument answers it instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from cs2sim.csshell.context import Cancelled
from cs2sim.system.errors import UsageError

__all__ = ["TerminalPrompter", "ScriptPrompter", "YES", "NO"]

T = TypeVar("T")

YES = ("y", "yes")
NO = ("", "n", "no")  # Enter alone takes the default, which is always no
NOTHING_CHANGED = "Cancelled; nothing was changed."


class TerminalPrompter:
    """Ask on the terminal with prompt_toolkit."""

    asks = True

    def confirm(self, question: str, command: str) -> bool:
        """Ask until the answer is yes or no; Enter and Ctrl-D mean no."""
        from prompt_toolkit.shortcuts import prompt

        while True:
            try:
                answer = prompt(f"{question} (yes/no) [no]: ").strip().lower()
            except EOFError:
                return False
            if answer in YES:
                return True
            if answer in NO:
                return False
            print("Please answer yes or no.", flush=True)

    def choose(self, message: str, options: Sequence[tuple[T, str]], default: T, hint: str) -> T:
        """Arrow keys + Enter, a typed number, or the start of a name (csshell/menu.py)."""
        from cs2sim.csshell.menu import choose

        try:
            return choose(message, options, default)
        except EOFError:  # Ctrl-D
            raise Cancelled(NOTHING_CHANGED) from None

    def secret(self, prompt_text: str, hint: str) -> str:
        """Read a password without echo."""
        from prompt_toolkit.shortcuts import prompt

        try:
            return prompt(prompt_text, is_password=True)
        except EOFError:  # Ctrl-D
            raise Cancelled(NOTHING_CHANGED) from None


class ScriptPrompter:
    """No one to ask: every question is an error naming the flag that answers it."""

    asks = False

    def confirm(self, question: str, command: str) -> bool:
        raise UsageError(f"`{command}` asks for confirmation and cs is not interactive; add --yes.")

    def choose(self, message: str, options: Sequence[tuple[T, str]], default: T, hint: str) -> T:
        raise UsageError(f"cs is not interactive, so it cannot show a menu; {hint}")

    def secret(self, prompt_text: str, hint: str) -> str:
        raise UsageError(f"cs is not interactive, so it cannot ask for a password; {hint}")
