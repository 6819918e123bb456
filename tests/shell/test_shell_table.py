"""The command tree: resolving words, abbreviations, errors that name candidates, options."""

from __future__ import annotations

import pytest

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.table import split_commands, words_and_partial
from cs2sim.system.errors import AmbiguousCommand, UnknownCommand, UsageError


def path_of(line: str) -> str:
    return COMMANDS.parse(line.split()).command.path


@pytest.mark.parametrize(
    ("line", "path"),
    [
        ("config execmode show", "config execmode show"),
        ("conf exec sh", "config execmode show"),  # the example
        ("CONFIG EXECMODE SHOW", "config execmode show"),  # case-insensitive words
        ("sys stand", "system standby"),
        ("sys act", "system activate"),
        ("system sh", "system show"),
        ("so sh", "software show"),
        ("a sh", "audit show"),
        ("u l", "user list"),
        ("he", "help"),  # `h` is help or history
    ],
)
def test_unique_prefixes_resolve(line: str, path: str) -> None:
    assert path_of(line) == path


def test_ambiguous_prefix_lists_the_candidates() -> None:
    with pytest.raises(AmbiguousCommand) as e:
        COMMANDS.parse(["s"])
    assert e.value.candidates == ("software", "system")
    assert "software, system" in str(e.value)
    with pytest.raises(AmbiguousCommand) as e:
        COMMANDS.parse(["system", "st"])
    assert e.value.candidates == ("standby", "status")


def test_unknown_word_suggests_the_nearest() -> None:
    with pytest.raises(UnknownCommand) as e:
        COMMANDS.parse(["sytem", "show"])
    assert e.value.candidates == ("system",)
    assert "did you mean `system`?" in str(e.value)
    with pytest.raises(UnknownCommand) as e:
        COMMANDS.parse(["config", "exemode"])
    assert "`execmode`" in str(e.value)


def test_unknown_word_without_near_match_lists_the_choices() -> None:
    with pytest.raises(UnknownCommand) as e:
        COMMANDS.parse(["zzz"])
    assert "config" in str(e.value) and "system" in str(e.value)


def test_incomplete_command_names_the_next_words() -> None:
    with pytest.raises(UsageError) as e:
        COMMANDS.parse(["config", "execmode"])
    assert "setup, show" in str(e.value)


def test_options_values_and_prefixes() -> None:
    inv = COMMANDS.parse(["config", "execmode", "show", "--output-format=json"])
    assert inv.option("output_format") == "json"
    inv = COMMANDS.parse(["conf", "exec", "sh", "--out", "j"])
    assert inv.option("output_format") == "json"
    inv = COMMANDS.parse(["audit", "show", "--last", "3"])
    assert inv.option("last") == "3"
    inv = COMMANDS.parse(["system", "standby", "--yes"])
    assert inv.option("yes") is True


@pytest.mark.parametrize(
    ("words", "fragment"),
    [
        (["config", "execmode", "show", "--output-format=xml"], "json or text"),
        (["config", "execmode", "show", "--bogus"], "no option `--bogus`"),
        (["system", "standby", "--yes=1"], "takes no value"),
        (["audit", "show", "--last"], "needs a value"),
        (["system", "show", "extra"], "does not take `extra`"),
        (["user", "add"], "needs NAME"),
    ],
)
def test_bad_arguments_are_one_sentence_usage_errors(words: list[str], fragment: str) -> None:
    with pytest.raises(UsageError) as e:
        COMMANDS.parse(words)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)


def test_setup_mode_argument_is_passed_through_for_the_mode_parser() -> None:
    inv = COMMANDS.parse(["config", "execmode", "setup", "ws"])
    assert inv.args == {"mode": "ws"}


def test_split_commands_on_semicolons_and_quotes() -> None:
    assert split_commands("system show; config execmode show") == [
        ["system", "show"],
        ["config", "execmode", "show"],
    ]
    assert split_commands("a;;b ;") == [["a"], ["b"]]
    assert split_commands("user add 'x;y'") == [["user", "add", "x;y"]]
    with pytest.raises(UsageError):
        split_commands("user add 'x")


def test_words_and_partial() -> None:
    assert words_and_partial("conf exec sh") == (["conf", "exec"], "sh")
    assert words_and_partial("conf exec ") == (["conf", "exec"], "")
    assert words_and_partial("system show; conf") == ([], "conf")
    assert words_and_partial("") == ([], "")
