"""Tab completion derived from the command table (summaries become the menu's meta column).

After a `|` the words complete from the pipes' table (csshell/pipes.py) instead; arguments and
options that name something that exists (a system, a job, an account, a file) complete from the
store through a `Live` source (csshell/live.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from cs2sim.csshell.lexer import cursor_at_end
from cs2sim.csshell.pipes import PIPES
from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.csshell.table import CommandTable, Live

__all__ = ["TableCompleter"]


class TableCompleter(Completer):
    """Complete command words, argument choices, options, option values and live names."""

    def __init__(self, table: CommandTable, live: Live | None = None) -> None:
        self.table = table
        self.live = live

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        try:
            cursor = cursor_at_end(document.text_before_cursor)
            table = PIPES if cursor.stage else self.table
            suggestions = table.suggest(cursor.words, cursor.partial, self.live)
        except CsError:
            return  # an unknown earlier word: nothing to offer (Enter shows the error)
        for s in suggestions:
            if s.text:
                yield Completion(
                    s.text, start_position=-s.replace, display=s.display, display_meta=s.summary
                )
