"""Tab completion and `?` help, tested directly on Document/CompleteEvent (no terminal)."""

from __future__ import annotations

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.completion import TableCompleter


def completions(text: str) -> dict[str, str]:
    """completed text -> meta, for the line `text` with the cursor at its end."""
    found = TableCompleter(COMMANDS).get_completions(Document(text, len(text)), CompleteEvent())
    return {c.text: c.display_meta_text for c in found}


def test_top_level_words_with_summaries() -> None:
    got = completions("")
    assert set(got) == {w + " " for w in COMMANDS.root.children}
    assert got["config "] == "Configure the system."


def test_prefix_and_abbreviated_earlier_words() -> None:
    assert set(completions("con")) == {"config "}
    assert set(completions("conf exec ")) == {"setup ", "show ", "withdraw "}
    assert set(completions("conf exec sh")) == {"show "}
    assert set(completions("sys st")) == {"standby ", "status "}


def test_start_position_replaces_only_the_partial_word() -> None:
    doc = Document("conf exec sh", 12)
    (c,) = TableCompleter(COMMANDS).get_completions(doc, CompleteEvent())
    assert c.start_position == -2
    assert doc.text[: len(doc.text) + c.start_position] + c.text == "conf exec show "


def test_arguments_options_and_option_values() -> None:
    assert set(completions("config execmode setup ")) == {
        "pipelined ",
        "weight-streaming ",
        "--yes ",
    }
    assert set(completions("config execmode setup w")) == {"weight-streaming "}
    assert set(completions("config execmode show ")) == {"--output-format="}
    assert set(completions("config execmode show --output-format=")) == {"json ", "text "}
    assert set(completions("config execmode show --output-format=j")) == {"json "}
    assert set(completions("user add bob --role ")) == {"admin ", "user "}
    assert "--yes " in completions("system standby ")


def test_given_options_are_not_offered_again() -> None:
    assert set(completions("system standby --yes ")) == {"--force "}
    assert completions("system standby --yes --force ") == {}


def test_help_completes_command_words() -> None:
    assert set(completions("help conf")) == {"config "}
    assert set(completions("help config execmode ")) == {"setup ", "show ", "withdraw "}


def test_unknown_earlier_word_offers_nothing() -> None:
    assert completions("sytem ") == {}
    assert completions("s ") == {}  # ambiguous: nothing to build on


def test_after_a_semicolon_completion_starts_over() -> None:
    assert set(completions("system show; conf")) == {"config "}


def test_question_help_lists_next_words_and_cr() -> None:
    rows = question_help(COMMANDS, "config execmode ")
    assert [r.split()[0] for r in rows] == ["setup", "show", "withdraw"]
    rows = question_help(COMMANDS, "config execmode show ")
    assert rows[0].split()[0] == "--output-format=json|text"
    assert rows[-1].split()[0] == "<cr>"
    rows = question_help(COMMANDS, "user add ")
    assert "<cr>" not in " ".join(rows)  # NAME is required
    assert rows[0].split()[0] == "NAME"


def test_question_help_on_a_partial_word() -> None:
    rows = question_help(COMMANDS, "s")
    assert [r.split()[0] for r in rows] == ["software", "system"]
    assert "no command starts with `x`" in question_help(COMMANDS, "x")[0]
