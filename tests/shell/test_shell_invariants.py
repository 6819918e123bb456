"""Completion, help and dispatch come from one table, so they cannot drift apart.

Every path the completer offers resolves (through dispatch's parser) to a command with a
non-empty summary; every command in the table can be reached by completion and appears in
`help` and in `?`.
"""

from __future__ import annotations

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.completion import TableCompleter
from cs2sim.csshell.table import Node

COMPLETER = TableCompleter(COMMANDS)


def complete(text: str) -> list[str]:
    doc = Document(text, len(text))
    return [
        c.text for c in COMPLETER.get_completions(doc, CompleteEvent(completion_requested=True))
    ]


def completable_paths() -> set[str]:
    """Walk the completer from the empty line, following only command words."""
    found: set[str] = set()

    def walk(prefix: str) -> None:
        for text in complete(prefix):
            line = prefix + text
            node: Node = COMMANDS.walk(line.split())[0]
            if node.path != tuple(line.split()):
                continue  # an argument or option, not a command word
            if node.command is not None:
                found.add(node.command.path)
            if node.children:
                walk(line)

    walk("")
    return found


def test_every_completed_path_dispatches_to_a_command_with_a_summary() -> None:
    paths = completable_paths()
    assert paths
    for path in paths:
        node, rest = COMMANDS.walk(path.split())  # the same walk dispatch uses
        assert rest == [] and node.command is not None
        assert node.command.path == path
        assert node.command.summary.strip().endswith(".")
        if not any(a.required for a in node.command.args):
            assert COMMANDS.parse(path.split()).command is node.command


def test_every_command_is_completable() -> None:
    assert completable_paths() == {c.path for c in COMMANDS.commands()}


def test_every_command_has_help() -> None:
    help_text = "\n".join(u for u, _ in COMMANDS.help_rows())
    for command in COMMANDS.commands():
        assert command.usage in help_text
        assert command.summary
        # `?` after the parent words shows the last word with the same summary
        parent, last = command.words[:-1], command.words[-1]
        rows = question_help(COMMANDS, " ".join(parent) + (" " if parent else ""))
        assert any(r.split()[0] == last and command.summary in r for r in rows), rows


def test_every_group_word_has_a_summary() -> None:
    def walk(node: Node) -> None:
        for child in node.children.values():
            assert child.summary.strip(), child.path
            walk(child)

    walk(COMMANDS.root)


def test_completion_meta_is_the_help_summary() -> None:
    doc = Document("system ", 7)
    metas = {
        c.text.strip(): c.display_meta_text for c in COMPLETER.get_completions(doc, CompleteEvent())
    }
    for word, node in COMMANDS.root.children["system"].children.items():
        assert metas[word] == node.summary
