"""Splitting a typed line: `;` between commands, `|` between a command and its output pipes.

    audit show --user bob | match "standby|activate" | count; system show

A line is a list of commands; a command is a list of stages (the command's words, then one word
list per pipe); words follow POSIX shell quoting (single quotes literal, double quotes with
backslash escapes, a backslash escaping the next character). Only an unquoted `;` or `|` splits,
so a regular expression with `|` is written in quotes, as in a shell.

A `?` typed unquoted at the end of a word asks what may follow (`conf exec ?`, `show | m?`); a
`?` inside quotes or after a backslash is text (`match "stand(by)?"`, `fault is it broken\\?`).
The word then comes back as `Asking`, so the quoting decides, not the characters.
"""

from __future__ import annotations

from dataclasses import dataclass

from cs2sim.system.errors import UsageError

__all__ = [
    "Asking",
    "Cursor",
    "split_line",
    "cursor_at_end",
    "strip_comment",
    "open_quote",
    "OPERATORS",
]

OPERATORS = frozenset(";|")
_DOUBLE_ESCAPES = frozenset('\\"$`')


class Asking(str):
    """A word whose last character is an unquoted, unescaped `?`: a request for help."""

    __slots__ = ()


def _tokens(line: str) -> tuple[list[tuple[str, bool]], bool]:
    """(text, is_operator) tokens of `line`, and whether the line ends inside a word (no
    whitespace or operator after the last word). A word ending in a bare `?` is an Asking."""
    tokens: list[tuple[str, bool]] = []
    word: list[str] = []
    in_word = False
    asking = False  # the last character added to `word` was a bare `?`
    i, n = 0, len(line)

    def end_word() -> None:
        nonlocal in_word, asking
        if in_word:
            text = "".join(word)
            tokens.append((Asking(text) if asking else text, False))
            word.clear()
            in_word = False
        asking = False

    while i < n:
        ch = line[i]
        if not ch.isspace() and ch not in OPERATORS:
            asking = False  # set again below if this character is a bare `?`
        if ch.isspace():
            end_word()
        elif ch in OPERATORS:
            end_word()
            tokens.append((ch, True))
        elif ch == "'":
            close = line.find("'", i + 1)
            if close < 0:
                raise UsageError("cannot read the line: no closing quotation; check the quotes.")
            word.append(line[i + 1 : close])
            in_word = True
            i = close
        elif ch == '"':
            i += 1
            while i < n and line[i] != '"':
                if line[i] == "\\" and i + 1 < n and line[i + 1] in _DOUBLE_ESCAPES:
                    i += 1
                word.append(line[i])
                i += 1
            if i >= n:
                raise UsageError("cannot read the line: no closing quotation; check the quotes.")
            in_word = True
        elif ch == "\\":
            if i + 1 >= n:
                raise UsageError("cannot read the line: no escaped character; check the quotes.")
            word.append(line[i + 1])
            in_word = True
            i += 1
        else:
            word.append(ch)
            in_word = True
            asking = ch == "?"
        i += 1
    open_word = in_word
    end_word()
    return tokens, open_word


def split_line(line: str) -> list[list[list[str]]]:
    """The commands of `line`, each as its stages, each stage a list of words. Empty commands
    (`a;;b`) are dropped; an empty stage (`show |`, `| count`) is kept as [] for the caller to
    refuse with its own words."""
    commands: list[list[list[str]]] = [[[]]]
    for text, operator in _tokens(line)[0]:
        if operator and text == ";":
            commands.append([[]])
        elif operator:
            commands[-1].append([])
        else:
            commands[-1][-1].append(text)
    return [c for c in commands if c != [[]]]


@dataclass(frozen=True)
class Cursor:
    """Where the end of a partly typed line is: in which stage of its last command (0: the
    command, 1 and more: a pipe), the complete words of that stage and the word being typed."""

    stage: int
    words: list[str]
    partial: str


def cursor_at_end(text: str) -> Cursor:
    """The Cursor at the end of `text`, for Tab and `?`."""
    tokens, open_word = _tokens(text)
    stage, words = 0, list[str]()
    for token, operator in tokens:
        if operator:
            stage, words = (0 if token == ";" else stage + 1), []
        else:
            words.append(token)
    partial = words.pop() if open_word and words else ""
    return Cursor(stage, words, partial)


def strip_comment(line: str) -> str:
    """`line` without a trailing `# comment` (a script line's): a `#` that starts a word outside
    quotes begins the comment, as in a POSIX shell; `fan#3` and `"# 3"` are kept."""
    quote = ""
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            i += 1
        elif ch == "#" and (i == 0 or line[i - 1].isspace() or line[i - 1] in OPERATORS):
            return line[:i].rstrip()
        i += 1
    return line


def open_quote(text: str) -> bool:
    """True if `text` ends inside quotes or right after an escaping backslash: a `?` typed
    there is text, not a request for help."""
    quote = ""
    i = 0
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                if i + 1 == len(text):
                    return True
                i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "\\":
            if i + 1 == len(text):
                return True
            i += 1
        i += 1
    return bool(quote)
