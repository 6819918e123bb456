"""Tab completion derived from the command table (summaries become the menu's meta column)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from cs2sim.csshell.table import words_and_partial
from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.csshell.table import CommandTable

__all__ = ["TableCompleter"]


class TableCompleter(Completer):
    """Complete command words, argument choices, options and option values from the table."""

    def __init__(self, table: CommandTable) -> None:
        self.table = table

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        try:
            words, partial = words_and_partial(document.text_before_cursor)
            suggestions = self.table.suggest(words, partial)
        except CsError:
            return  # an unknown earlier word: nothing to offer (Enter shows the error)
        for s in suggestions:
            if s.text:
                yield Completion(
                    s.text, start_position=-s.replace, display=s.display, display_meta=s.summary
                )
