"""The command tree: one table from which dispatch, completion, `?` help and `help` are derived.

A command is a path of words (``config execmode show``) plus its arguments and options. The tree
is built from a flat list of `Command` rows and a mapping of group summaries. Every consumer walks
the same tree with the same word matcher (`CommandTable.match`): exact word, else a unique prefix,
else an error that lists the candidates ("ambiguous") or the nearest words ("did you mean").
So an abbreviation that dispatches also completes, and a word that completes also has help.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cs2sim.csshell.lexer import cursor_at_end, split_line
from cs2sim.system.errors import AmbiguousCommand, UnknownCommand, UsageError

__all__ = [
    "Arg",
    "Option",
    "LIVE_KINDS",
    "Live",
    "Command",
    "Invocation",
    "Node",
    "Suggestion",
    "CommandTable",
    "split_commands",
    "words_and_partial",
]

# What a value may be completed from, read when Tab is pressed: the cluster's systems, the queue's
# job ids, the accounts, files. A Live function maps (kind, the partial word) to (value,
# description) pairs; the console supplies one that reads the store (csshell/live.py).
LIVE_KINDS = ("system", "job", "user", "path")
Live = Callable[[str, str], list[tuple[str, str]]]

# A handler's first argument is the session's Context (csshell/context.py). It is typed Any here
# because the Context holds this table: naming it would make the two modules import each other.
Handler = Callable[[Any, "Invocation"], Any]


@dataclass(frozen=True)
class Option:
    """A `--name` option: a flag, or a value from `choices`, or a free value named by `metavar`."""

    name: str
    summary: str
    choices: tuple[str, ...] = ()
    metavar: str = ""
    exact: bool = False  # only the full name: a flag taking a secret or a path is never guessed
    live: str = ""  # its values complete from what exists now: a LIVE_KINDS name
    also: tuple[str, ...] = ()  # words offered beside the live values (`--system all`)

    @property
    def takes_value(self) -> bool:
        return bool(self.choices or self.metavar)

    @property
    def key(self) -> str:
        return self.name.lstrip("-").replace("-", "_")

    @property
    def usage(self) -> str:
        if self.choices:
            return f"{self.name}={'|'.join(self.choices)}"
        return f"{self.name} {self.metavar}" if self.metavar else self.name


@dataclass(frozen=True)
class Arg:
    """A positional argument; `choices` (if any) complete and accept unique prefixes."""

    name: str
    summary: str
    choices: tuple[str, ...] = ()
    required: bool = False
    strict: bool = True  # False: `choices` only complete; the handler parses the value itself
    tree: bool = False  # the rest of the line is a command path (`help config execmode`)
    rest: bool = False  # the rest of the line is free text (`system fault fan 3 stopped`)
    live: str = ""  # its values complete from what exists now: a LIVE_KINDS name

    @property
    def usage(self) -> str:
        text = "|".join(self.choices) if self.choices else self.name.upper()
        text += "..." if self.tree or self.rest else ""
        return text if self.required else f"[{text}]"


@dataclass(frozen=True)
class Command:
    """One runnable path of words; `summary` is both its help row and its completion meta text."""

    path: str
    summary: str
    run: Handler
    args: tuple[Arg, ...] = ()
    options: tuple[Option, ...] = ()
    pages: bool = False  # its output is a finished text (a show command): the pager may hold it
    # only its full name runs it (`exit`, `quit`): a stray `q` must not end a session, as on
    # Junos and in pgcli; Tab still completes it
    exact: bool = False

    @property
    def words(self) -> tuple[str, ...]:
        return tuple(self.path.split())

    @property
    def usage(self) -> str:
        parts = [self.path] + [a.usage for a in self.args] + [f"[{o.usage}]" for o in self.options]
        return " ".join(parts)


@dataclass(frozen=True)
class Invocation:
    """A parsed command line: the command, its arguments by name and its options by key."""

    command: Command
    args: dict[str, str]
    options: dict[str, Any]

    def option(self, key: str, default: Any = None) -> Any:
        return self.options.get(key, default)


@dataclass
class Node:
    """A word in the tree: a group (children), a command, or both."""

    word: str
    summary: str
    path: tuple[str, ...] = ()
    children: dict[str, Node] = field(default_factory=dict)
    command: Command | None = None


def split_commands(line: str) -> list[list[str]]:
    """The commands of one input line (separated by an unquoted `;`), each as its words before
    any output pipe (csshell/lexer.py splits the whole line, pipes included)."""
    return [stages[0] for stages in split_line(line) if stages[0]]


def words_and_partial(text: str) -> tuple[list[str], str]:
    """The complete words of the last stage (command or pipe) of the last `;` command in
    `text`, and the word being typed."""
    cursor = cursor_at_end(text)
    return cursor.words, cursor.partial


def _quote(words: Iterable[str]) -> str:
    return ", ".join(words)


def _exact(node: Node) -> bool:
    return node.command is not None and node.command.exact and not node.children


class CommandTable:
    """The tree of commands plus the matching rules every consumer shares."""

    def __init__(self, commands: Sequence[Command], groups: Mapping[str, str]) -> None:
        self.root = Node(word="", summary="All commands.")
        for path, summary in groups.items():
            self._node_for(tuple(path.split()), summary)
        for command in commands:
            node = self._node_for(command.words, command.summary)
            if node.command is not None:
                raise ValueError(f"command {command.path!r} registered twice")
            node.command = command
            node.summary = command.summary

    def _node_for(self, words: tuple[str, ...], summary: str) -> Node:
        node = self.root
        for i, word in enumerate(words):
            if word not in node.children:
                node.children[word] = Node(word=word, summary=summary, path=words[: i + 1])
            node = node.children[word]
        return node

    # -- walking -------------------------------------------------------------------------------

    def commands(self) -> list[Command]:
        """Every command in the tree, in path order."""
        found: list[Command] = []

        def walk(node: Node) -> None:
            if node.command is not None:
                found.append(node.command)
            for child in sorted(node.children):
                walk(node.children[child])

        walk(self.root)
        return found

    def candidates(self, node: Node, prefix: str) -> list[str]:
        """The child words of `node` that start with `prefix` (case-insensitive), sorted."""
        prefix = prefix.lower()
        return sorted(w for w in node.children if w.startswith(prefix))

    def match(self, node: Node, word: str, suggest: bool = True) -> Node:
        """The child of `node` named by `word`: exact, else a unique prefix; errors otherwise
        (an unknown word's error suggests near words unless `suggest` is False)."""
        key = word.lower()
        if key in node.children:
            return node.children[key]
        found = [w for w in self.candidates(node, key) if not _exact(node.children[w])]
        if len(found) == 1:
            return node.children[found[0]]
        where = f"`{' '.join(node.path)}` has" if node.path else "there is"
        full = [w for w in self.candidates(node, key) if _exact(node.children[w])]
        if full and not found:
            raise UnknownCommand(
                f"{where} no command `{word}`; type {' or '.join(f'`{w}`' for w in full)} "
                "in full (it is never shortened).",
                tuple(full),
            )
        if found:
            raise AmbiguousCommand(
                f"`{word}` is ambiguous: it could be {_quote(found)}; type more letters.",
                tuple(found),
            )
        if not suggest:  # the caller only tries a reading: the message is not shown
            raise UnknownCommand(f"{where} no command `{word}`.", ())
        import difflib  # only on the error path

        near = tuple(difflib.get_close_matches(key, list(node.children), n=3, cutoff=0.6))
        if near:
            hint = f"did you mean {' or '.join(f'`{w}`' for w in near)}?"
        else:
            hint = f"choose one of {_quote(sorted(node.children))} (or type `help`)."
        raise UnknownCommand(f"{where} no command `{word}`; {hint}", near)

    def walk(self, words: Sequence[str], suggest: bool = True) -> tuple[Node, list[str]]:
        """Follow `words` as far as they name tree nodes; return the last node and the rest."""
        node = self.root
        rest = list(words)
        while rest and node.children and not (node.command and rest[0].startswith("-")):
            if node.command is not None and rest[0].lower() not in node.children:
                if not self.candidates(node, rest[0]):
                    break  # a command's argument, not a sub-word
            node = self.match(node, rest[0], suggest)
            rest.pop(0)
        return node, rest

    # -- parsing -------------------------------------------------------------------------------

    def parse(self, words: Sequence[str]) -> Invocation:
        """Resolve `words` to a command and parse its arguments and options."""
        try:
            node, rest = self.walk(words)
        except UnknownCommand as e:
            turned = self._verb_first(words)
            if turned is None:
                raise
            raise UnknownCommand(
                f"there is no command `{' '.join(words[: len(turned)])}`; did you mean "
                f"`{' '.join(turned)}`? (here the object comes first, then the verb)",
                (" ".join(turned),),
            ) from e
        if node.command is None:
            if node is self.root:
                raise UsageError("no command given; type `help` to list the commands.")
            subs = _quote(sorted(node.children))
            raise UsageError(f"`{' '.join(node.path)}` is incomplete; add one of: {subs}.")
        command = node.command
        args: dict[str, str] = {}
        options: dict[str, Any] = {}
        positional = list(command.args)
        i = 0
        while i < len(rest):
            token = rest[i]
            i += 1
            if token.startswith("--") and len(token) > 2:
                option, value = self._option(command, token)
                if option.takes_value and value is None:
                    if i >= len(rest):
                        raise UsageError(f"`{option.name}` needs a value: {option.usage}.")
                    value = rest[i]
                    i += 1
                if option.takes_value:
                    options[option.key] = _choose(option.name, option.choices, value or "")
                else:
                    options[option.key] = True
                continue
            if not positional:
                raise UsageError(
                    f"`{command.path}` does not take `{token}`; usage: {command.usage}."
                )
            arg = positional.pop(0)
            if arg.tree or arg.rest:  # everything left is one value, options included
                args[arg.name] = " ".join(rest[i - 1 :])
                break
            args[arg.name] = _choose(arg.name, arg.choices, token) if arg.strict else token
        missing = [a for a in positional if a.required]
        if missing:
            raise UsageError(f"`{command.path}` needs {missing[0].usage}; usage: {command.usage}.")
        return Invocation(command, args, options)

    def _verb_first(self, words: Sequence[str]) -> tuple[str, ...] | None:
        """The command path that the first two or three `words` name in another order (`show
        system` -> `system show`, the habit of other consoles), if exactly one does."""
        from itertools import permutations

        for n in (2, 3):
            if len(words) < n:
                break
            found = set()
            for order in permutations(words[:n]):
                try:
                    # a failed reading's near words are never shown: difflib is not asked
                    node, rest = self.walk(list(order), suggest=False)
                except (UnknownCommand, AmbiguousCommand):
                    continue
                if node.command is not None and not rest:
                    found.add(node.command.words)
            if len(found) == 1:
                return found.pop()
        return None

    def _option(self, command: Command, token: str) -> tuple[Option, str | None]:
        name, eq, value = token.partition("=")
        by_name = {o.name: o for o in command.options}
        found = [o for o in by_name if o.startswith(name.lower()) and not by_name[o].exact]
        if name.lower() in by_name:
            found = [name.lower()]
        if len(found) == 1:
            option = by_name[found[0]]
            if eq and not option.takes_value:
                raise UsageError(f"`{option.name}` takes no value; write just `{option.name}`.")
            return option, (value if eq else None)
        if found:
            raise UsageError(f"`{name}` is ambiguous: it could be {_quote(found)}.")
        known = _quote(by_name) if by_name else "none"
        import difflib

        near = difflib.get_close_matches(name, list(by_name), n=1)
        hint = f"did you mean `{near[0]}`?" if near else f"its options: {known}."
        raise UsageError(f"`{command.path}` has no option `{name}`; {hint}")

    # -- help ----------------------------------------------------------------------------------

    def help_rows(self, node: Node | None = None) -> list[tuple[str, str]]:
        """(usage, summary) for every command at or under `node`."""
        start = node or self.root
        rows: list[tuple[str, str]] = []

        def walk(n: Node) -> None:
            if n.command is not None:
                rows.append((n.command.usage, n.command.summary))
            for child in sorted(n.children):
                walk(n.children[child])

        walk(start)
        return rows

    def suggest(
        self, words: Sequence[str], partial: str, live: Live | None = None
    ) -> list[Suggestion]:
        """What may follow `words` and starts with `partial`: for Tab (text) and `?` (rows);
        with `live`, the existing values of an argument or option that names one.

        Raises the same UnknownCommand / AmbiguousCommand as dispatch for a bad earlier word.
        """
        node, rest = self.walk(words)
        found: list[Suggestion] = []
        if node.command is None or (not rest and node.children and not partial.startswith("-")):
            for w in self.candidates(node, partial):
                found.append(Suggestion(w + " ", w, node.children[w].summary, len(partial)))
            if node.command is None:
                return found
        command = node.command
        if command.args and command.args[0].tree:  # `help WORDS`: the tree again
            return self.suggest(rest, partial, live) + ([] if rest or partial else [_cr(command)])
        taken, pending, used = _consumed(command, rest)
        if pending is not None or (partial.startswith("--") and "=" in partial):
            option = pending or self._option(command, partial)[0]
            value = partial.partition("=")[2] if pending is None else partial
            for c in option.choices:
                if c.startswith(value.lower()):
                    found.append(Suggestion(c + " ", c, option.summary, len(value)))
            for c in option.also:
                if c.startswith(value.lower()):
                    found.append(Suggestion(c + " ", c, option.summary, len(value)))
            found += _live(live, option.live, value)
            if not option.choices:
                found.append(Suggestion("", option.metavar, option.summary, 0))
            return found
        if not partial.startswith("-") and taken < len(command.args):
            arg = command.args[taken]
            for c in arg.choices:
                if c.startswith(partial.lower()):
                    found.append(Suggestion(c + " ", c, arg.summary, len(partial)))
            found += _live(live, arg.live, partial)
            if not arg.choices:
                found.append(Suggestion("", arg.name.upper(), arg.summary, 0))
        for o in command.options:
            if o.name.startswith(partial) and o.key not in used:
                text = o.name + ("=" if o.choices else " " if o.metavar else " ")
                found.append(Suggestion(text, o.usage, o.summary, len(partial)))
        if not partial and not any(a.required for a in command.args[taken:]):
            found.append(_cr(command))
        return found


@dataclass(frozen=True)
class Suggestion:
    """One thing that may come next: `text` replaces the last `replace` characters on Tab;
    `display` and `summary` are the `?` row and the completion menu entry. An empty `text`
    is help only (`<cr>`, a free value such as NAME)."""

    text: str
    display: str
    summary: str
    replace: int


def _live(live: Live | None, kind: str, partial: str) -> list[Suggestion]:
    """The existing values of `kind` that start with `partial` (none without a source)."""
    if live is None or not kind:
        return []
    found = []
    for value, description in live(kind, partial):
        end = "" if kind == "path" and value.endswith("/") else " "  # a directory: go on typing
        found.append(Suggestion(value + end, value, description, len(partial)))
    return found


def _cr(command: Command) -> Suggestion:
    return Suggestion("", "<cr>", f"Run `{command.path}`.", 0)


def _consumed(command: Command, rest: Sequence[str]) -> tuple[int, Option | None, set[str]]:
    """Given the complete words after a command: positional args taken, an option still
    waiting for its value (`--role ` then Tab), and the option keys already given."""
    by_name = {o.name: o for o in command.options}
    taken, pending, used = 0, None, set()
    for token in rest:
        if pending is not None:
            pending = None
            continue
        if token.startswith("--"):
            name, eq, _ = token.partition("=")
            matches = [o for n, o in by_name.items() if n.startswith(name)]
            if len(matches) == 1:
                used.add(matches[0].key)
                if matches[0].takes_value and not eq:
                    pending = matches[0]
            continue
        taken += 1
    return taken, pending, used


def _choose(name: str, choices: tuple[str, ...], value: str) -> str:
    """`value` if it is one of `choices` or a unique prefix of one; a usage error otherwise."""
    if not choices:
        return value
    key = value.lower().replace("_", "-")
    if key in choices:
        return key
    found = [c for c in choices if c.startswith(key)] if key else []
    if len(found) == 1:
        return found[0]
    allowed = " or ".join(choices) if len(choices) == 2 else ", ".join(choices)
    raise UsageError(f"`{name}` must be {allowed}, not `{value}`.")
