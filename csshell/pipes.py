"""Output pipes, as on a router's console: `show ... | match REGEX | count`.

PIPES is the one table of them (a CommandTable like the command table, so parsing, unique
prefixes, Tab, `?` and "did you mean" work the same way after `|`). A pipe either changes how
the command runs (`display json` right after the command: its `--output-format=json`;
`no-more`: no pager) or filters its output lines as they are written (`match`, `except`,
`count`, `last`, and `display json` after one of them: the lines so far as a JSON array), so a
long or streaming command is filtered line by line. Pipes chain left to right, each acting
where it sits.
"""

from __future__ import annotations

import io
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from cs2sim.csshell.table import Arg, Command, CommandTable, Invocation
from cs2sim.system.errors import AmbiguousCommand, UnknownCommand, UsageError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context

__all__ = [
    "PIPES",
    "PipeRun",
    "PipeStream",
    "parse_pipes",
    "json_invocation",
    "has_json",
    "run_piped",
]


class Filter(Protocol):
    """A line filter: what to pass on for each line, and what to add at the end."""

    def feed(self, line: str) -> list[str]: ...

    def end(self) -> list[str]: ...


@dataclass
class PipeRun:
    """What the pipes of one command ask for."""

    json: bool = False
    no_more: bool = False
    filters: list[Filter] = field(default_factory=list)


@dataclass
class _Match:
    pattern: re.Pattern[str]
    keep: bool  # True: `match` (keep matching lines); False: `except` (drop them)

    def feed(self, line: str) -> list[str]:
        return [line] if bool(self.pattern.search(line)) == self.keep else []

    def end(self) -> list[str]:
        return []


@dataclass
class _Count:
    lines: int = 0

    def feed(self, line: str) -> list[str]:
        self.lines += 1
        return []

    def end(self) -> list[str]:
        return [f"Count: {self.lines} line{'' if self.lines == 1 else 's'}"]


@dataclass
class _Last:
    kept: deque[str]

    def feed(self, line: str) -> list[str]:
        self.kept.append(line)
        return []

    def end(self) -> list[str]:
        return list(self.kept)


def _regex(inv: Invocation, pipe: str) -> re.Pattern[str]:
    text = inv.args["regex"]
    try:
        return re.compile(text)
    except re.error as e:
        raise UsageError(
            f"`| {pipe} {text}` is not a valid regular expression ({e}); quote a pattern with "
            f'spaces or `|`, e.g. `| {pipe} "standby|activate"`.'
        ) from None


def _match(run: PipeRun, inv: Invocation) -> None:
    run.filters.append(_Match(_regex(inv, "match"), keep=True))


def _except(run: PipeRun, inv: Invocation) -> None:
    run.filters.append(_Match(_regex(inv, "except"), keep=False))


def _count(run: PipeRun, inv: Invocation) -> None:
    run.filters.append(_Count())


def _last(run: PipeRun, inv: Invocation) -> None:
    raw = inv.args["n"]
    if not (raw.isascii() and raw.isdigit() and int(raw) > 0):
        raise UsageError(f"`| last {raw}`: give a number of lines, e.g. `| last 10`.")
    run.filters.append(_Last(deque(maxlen=min(int(raw), 10**7))))


def _no_more(run: PipeRun, inv: Invocation) -> None:
    run.no_more = True


@dataclass
class _Json:
    """`| display json` after a filter: the lines that reached it, as one JSON array of strings
    (the command's own JSON is what `| display json` gives right after the command)."""

    lines: list[str] = field(default_factory=list)

    def feed(self, line: str) -> list[str]:
        self.lines.append(line)
        return []

    def end(self) -> list[str]:
        import json

        return [json.dumps(self.lines)]


def _display_json(run: PipeRun, inv: Invocation) -> None:
    # it acts where it sits: first, the command prints its JSON (and the later pipes filter
    # that); after a filter, the filtered lines become a JSON array
    if run.filters:
        run.filters.append(_Json())
    else:
        run.json = True


REGEX = Arg(
    "regex",
    "A regular expression (Python syntax); quote it if it has spaces or `|`.",
    required=True,
)

PIPES = CommandTable(
    (
        Command("match", "Show only the lines that match REGEX.", _match, args=(REGEX,)),
        Command("except", "Show only the lines that do not match REGEX.", _except, args=(REGEX,)),
        Command("count", "Count the lines instead of showing them.", _count),
        Command(
            "last",
            "Show only the last N lines.",
            _last,
            args=(Arg("n", "How many lines.", required=True),),
        ),
        Command("no-more", "Print everything at once, without the pager.", _no_more),
        Command(
            "display json", "Show the output as JSON (as --output-format=json).", _display_json
        ),
    ),
    {"display": "Show the output in another format."},
)

# What a shell user may type after `|` out of habit, and the pipe that does it here.
HABITS = {
    "grep": "match",
    "egrep": "match",
    "wc": "count",
    "tail": "last",
    "more": "no-more",
    "less": "no-more",
    "cat": "no-more",
    "json": "display json",
    "jq": "display json",
}


def _pipe_names() -> str:
    return ", ".join(c.path for c in PIPES.commands())


def parse_pipes(stages: list[list[str]]) -> PipeRun:
    """Parse and apply the pipe stages of one command (everything after its first `|`)."""
    run = PipeRun()
    for words in stages:
        if not words:
            raise UsageError(
                f"nothing after `|`; add a pipe: {_pipe_names()} (e.g. `| match standby`)."
            )
        try:
            inv = PIPES.parse(words)
        except (UnknownCommand, AmbiguousCommand) as e:
            habit = HABITS.get(words[0].lower()) or (e.candidates[0] if e.candidates else "")
            hint = f"did you mean `| {habit}`?" if habit else f"the pipes are {_pipe_names()}."
            if isinstance(e, AmbiguousCommand):
                hint = f"it could be {', '.join(e.candidates)}; type more letters."
            raise UsageError(f"there is no pipe `| {' '.join(words)}`; {hint}") from None
        except UsageError as e:
            raise UsageError(f"`| {' '.join(words)}`: {e}") from None
        inv.command.run(run, inv)
    return run


def json_invocation(inv: Invocation) -> Invocation:
    """`inv` with --output-format=json, or a refusal for a command that has no JSON form."""
    if not has_json(inv.command):
        raise UsageError(
            f"`{inv.command.path}` has no JSON output, so it cannot take `| display json`; "
            "the show commands can (e.g. `system show | display json`)."
        )
    return replace(inv, options={**inv.options, "output_format": "json"})


def has_json(command: Command) -> bool:
    """True if `command` can print JSON (it takes --output-format)."""
    return any(o.key == "output_format" for o in command.options)


class PipeStream(io.TextIOBase):
    """A text stream that runs each complete line written to it through the filters in order
    and hands what comes out to `sink`; `finish()` flushes a last partial line and lets the
    filters that wait for the end (`count`, `last`) speak. Not a terminal: commands print to
    it as to a pipe (no colour, no wrapping)."""

    def __init__(self, filters: list[Filter], sink: Callable[[str], None]) -> None:
        super().__init__()
        self.filters = filters
        self.sink = sink
        self._partial = ""

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if lines:
            self._push(lines, 0)
        return len(text)

    def _push(self, lines: list[str], start: int) -> None:
        for f in self.filters[start:]:
            passed: list[str] = []
            for line in lines:
                passed.extend(f.feed(line))
            lines = passed
        for line in lines:
            self.sink(line)

    def finish(self) -> None:
        if self._partial:
            line, self._partial = self._partial, ""
            self._push([line], 0)
        for i, f in enumerate(self.filters):
            self._push(f.end(), i + 1)


def run_piped(ctx: Context, inv: Invocation, run: PipeRun, sink: Callable[[str], None]) -> None:
    """Run the command `inv` with its output going through the pipes' filters to `sink`."""
    stream = PipeStream(run.filters, sink)
    with ctx.output_to(stream):  # type: ignore[arg-type]  # a TextIOBase is a text stream
        inv.command.run(ctx, inv)
    stream.finish()
