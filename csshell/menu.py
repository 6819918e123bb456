"""A one-choice menu: arrow keys + Enter, or type a number or the start of a name.

prompt_toolkit's `choice()` moves the highlight when a letter is typed but still returns the
previously selected value on Enter, and cannot take a whole typed name; this small application
keeps one rule: Enter returns the highlighted option, and typing moves the highlight.

    Select the execution mode:
    > 1. Pipelined (current)
      2. Weight Streaming
    ↑/↓ or a number or name, then Enter: weig
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.styles import Style

__all__ = ["Menu", "choose", "normalize"]

T = TypeVar("T")
STYLE = Style.from_dict({"selected": "bold reverse", "hint": "#888888", "bad": "#ff5f5f"})


def normalize(text: str) -> str:
    """Compare names the way people type them: case, spaces, `-` and `_` ignored."""
    return "".join(c for c in text.lower() if c.isalnum())


class Menu(Generic[T]):
    """The menu's state (highlight, typed text) and its key handling, without I/O."""

    def __init__(self, message: str, options: Sequence[tuple[T, str]], default: T) -> None:
        self.message = message
        self.options = list(options)
        values = [v for v, _ in self.options]
        self.index = values.index(default) if default in values else 0
        self.typed = ""
        self.rejected = ""  # typed text that Enter refused (shown once, then forgotten)

    def match(self, typed: str) -> int | None:
        """The option a typed number or name prefix names, or None."""
        if typed.isdigit():
            n = int(typed)
            return n - 1 if 1 <= n <= len(self.options) else None
        key = normalize(typed)
        found = [i for i, (_, label) in enumerate(self.options) if normalize(label).startswith(key)]
        return found[0] if key and found else None

    def type(self, text: str) -> None:
        # text that names nothing is not kept under what comes next: `3` then `2` is `2`
        if self.typed and self.match(self.typed) is None and self.match(text) is not None:
            self.typed = ""
        self.typed += text
        self.rejected = ""
        found = self.match(self.typed)
        if found is not None:
            self.index = found

    def backspace(self) -> None:
        self.typed = self.typed[:-1]
        found = self.match(self.typed)
        if found is not None:
            self.index = found

    def move(self, step: int) -> None:
        self.typed = ""
        self.index = max(0, min(len(self.options) - 1, self.index + step))

    def accept(self) -> T | None:
        """The chosen value, or None while typed text names no option."""
        if self.typed and self.match(self.typed) is None:
            self.rejected, self.typed = self.typed, ""  # said once; the next key starts afresh
            return None
        return self.options[self.index][0]

    def fragments(self) -> StyleAndTextTuples:
        lines: StyleAndTextTuples = [("", f"{self.message}\n")]
        for i, (_, label) in enumerate(self.options):
            mark, style = ("> ", "class:selected") if i == self.index else ("  ", "")
            lines += [("", mark), (style, f"{i + 1}. {label}"), ("", "\n")]
        bad = self.typed if self.typed and self.match(self.typed) is None else self.rejected
        if bad:
            lines.append(("class:bad", f"no option matches {bad!r}; "))
        lines += [("class:hint", "↑/↓ or a number or name, then Enter: "), ("", self.typed)]
        return lines


def choose(message: str, options: Sequence[tuple[T, str]], default: T) -> T:
    """Run the menu on the current terminal; KeyboardInterrupt on Ctrl-C, EOFError on Ctrl-D."""
    menu = Menu(message, options, default)
    kb = KeyBindings()

    @kb.add("up")
    def _up(event: KeyPressEvent) -> None:
        menu.move(-1)

    @kb.add("down")
    def _down(event: KeyPressEvent) -> None:
        menu.move(+1)

    @kb.add("backspace")
    def _back(event: KeyPressEvent) -> None:
        menu.backspace()

    @kb.add("enter")
    @kb.add("c-j")  # a bare newline: what `pexpect.sendline` and some serial consoles send
    def _enter(event: KeyPressEvent) -> None:
        value = menu.accept()
        if value is not None:
            event.app.exit(result=value)

    @kb.add("c-c")
    @kb.add("<sigint>")
    def _interrupt(event: KeyPressEvent) -> None:
        event.app.exit(exception=KeyboardInterrupt())

    @kb.add("c-d")  # end of input, as at the prompt: leave the menu, choose nothing
    def _eof(event: KeyPressEvent) -> None:
        event.app.exit(exception=EOFError())

    @kb.add(Keys.Any)
    def _type(event: KeyPressEvent) -> None:
        if event.data.isprintable():
            menu.type(event.data)

    @kb.add(Keys.BracketedPaste)
    def _paste(event: KeyPressEvent) -> None:
        menu.type(event.data.strip())

    control = FormattedTextControl(menu.fragments, show_cursor=True)
    app: Application[T] = Application(
        layout=Layout(Window(control, dont_extend_height=True)),
        key_bindings=kb,
        style=STYLE,
        full_screen=False,
    )
    return app.run()
