"""Output pipes: each pipe, their chaining, `display json` equal to --output-format=json, the
refusals, `?` and Tab after `|`; by the dispatcher, and through `cs -c`, `cs -f`, stdin and the
console (all in process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from shell_helpers import console, cs, err, make_context, out

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.commands.shell import question_help
from cs2sim.csshell.completion import TableCompleter
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.lexer import cursor_at_end, split_line
from cs2sim.csshell.pipes import PIPES
from cs2sim.system.machine import Machine
from cs2sim.system.state import State
from cs2sim.system.store import Store


def run(store: Store, line: str) -> tuple[int, str, str]:
    ctx = make_context(store)
    code = run_line(ctx, line)
    return code, out(ctx), err(ctx)


def software_lines(store: Store) -> list[str]:
    return run(store, "software show")[1].splitlines()


def test_a_quoted_bar_is_part_of_a_word_and_a_bare_one_splits(store: Store) -> None:
    assert split_line('audit show | match "a|b" | count; x') == [
        [["audit", "show"], ["match", "a|b"], ["count"]],
        [["x"]],
    ]
    assert split_line("show|count") == [[["show"], ["count"]]]
    assert cursor_at_end("audit show | ma").stage == 1
    assert cursor_at_end("audit show | match x; sys").stage == 0


def test_match_and_except_keep_and_drop_lines(store: Store) -> None:
    lines = software_lines(store)
    assert len(lines) > 2
    code, text, _ = run(store, "software show | match ^python")
    assert code == 0 and text.splitlines() == [x for x in lines if x.startswith("python")]
    code, text, _ = run(store, "software show | except ^python")
    assert text.splitlines() == [x for x in lines if not x.startswith("python")]
    code, text, _ = run(store, 'software show | match "^python|^sqlite"')
    assert [x.split()[0] for x in text.splitlines()] == ["python", "sqlite"]


def test_count_and_last(store: Store) -> None:
    lines = software_lines(store)
    assert run(store, "software show | count")[1] == f"Count: {len(lines)} lines\n"
    assert run(store, "software show | last 2")[1].splitlines() == lines[-2:]
    assert run(store, "software show | last 1000")[1].splitlines() == lines


def test_pipes_chain_left_to_right(store: Store) -> None:
    lines = software_lines(store)
    kept = [x for x in lines if "." in x]
    assert run(store, "software show | match '\\.' | last 2 | count")[1] == "Count: 2 lines\n"
    assert run(store, "software show | match '\\.' | count")[1] == f"Count: {len(kept)} lines\n"
    assert run(store, "software show | count | match Count")[1].startswith("Count: ")
    assert run(store, "software show | count | except Count")[1] == ""


@pytest.mark.parametrize(
    "command",
    [
        "system show",
        "config execmode show",
        "software show",
        "jobs show",
        "audit show",
        "system list",
    ],
)
def test_display_json_is_the_output_format_json(store: Store, command: str) -> None:
    code, piped, _ = run(store, f"{command} | display json")
    _, direct, _ = run(store, f"{command} --output-format=json")
    assert code == 0
    first, second = json.loads(piped), json.loads(direct)
    if command == "system show":  # only the times since differ between two calls
        first.pop("state_since"), second.pop("state_since")
    assert first == second


def test_display_json_then_match(store: Store) -> None:
    code, text, _ = run(store, "config execmode show | display json | match execmode")
    assert code == 0 and json.loads(text)["execmode"] == "PIPELINED"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("system standby --yes | display json", "has no JSON output"),
        ("software show | grep x", "did you mean `| match`?"),
        ("software show | frobnicate", "the pipes are count, display json, except, last"),
        ("software show |", "nothing after `|`"),
        ("| count", "nothing before `|`"),
        ("software show | match (", "is not a valid regular expression"),
        ("software show | last x", "give a number of lines"),
        ("software show | match", "needs REGEX"),
    ],
)
def test_a_pipe_that_cannot_be_taken_is_refused_and_nothing_runs(
    store: Store, line: str, words: str
) -> None:
    from cs2sim.system.machine import Machine
    from cs2sim.system.state import State

    code, text, error = run(store, line)
    assert code == 2
    assert text == ""  # nothing ran: the pipes are parsed before the command
    assert words in error and error.startswith("error: ") and error.count("\n") == 1
    assert Machine(store).status().state is State.ACTIVE


def test_question_mark_after_a_bar_lists_the_pipes(store: Store) -> None:
    rows = "\n".join(question_help(COMMANDS, "audit show | "))
    for pipe in ("match", "except", "count", "last", "no-more", "display"):
        assert pipe in rows
    assert "audit" not in rows  # not the command table
    code, text, _ = run(store, "audit show | ?")
    assert code == 0 and "Count the lines" in text
    assert "json" in "\n".join(question_help(COMMANDS, "audit show | display "))


def completions(text: str) -> list[str]:
    doc = Document(text, len(text))
    return [c.text for c in TableCompleter(COMMANDS).get_completions(doc, CompleteEvent())]


def test_tab_after_a_bar_completes_pipes() -> None:
    assert completions("audit show | ") == sorted(c.words[0] + " " for c in PIPES.commands())
    assert completions("audit show | m") == ["match "]
    assert completions("audit show | display j") == ["json "]
    assert completions("audit show | count | la") == ["last "]
    assert completions("audit show; sys") == ["system "]  # a new command after `;`


def test_pipes_in_cs_c_and_cs_f_and_stdin(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, stdout, stderr = cs(capsys, "-c", "software show | match ^python | count")
    assert code == 0 and stdout == "Count: 1 line\n", stderr
    script = tmp_path / "s.cs"
    script.write_text("software show | last 1\nconfig execmode show | display json\n")
    code, stdout, stderr = cs(capsys, "-f", str(script))
    assert code == 0, stderr
    last, data = stdout.splitlines()
    assert last.startswith("sqlite") and json.loads(data)["execmode"] == "PIPELINED"
    code, _, stderr = cs(capsys, stdin="software show | grep x\n")
    assert code == 2
    assert stderr == "error: stdin line 1: there is no pipe `| grep x`; did you mean `| match`?\n"


def test_pipes_in_the_console(store: Store) -> None:
    keys = (
        "software show | match ^python | count\r"
        "software show | cou?\x03"  # `?` after a bar lists the pipes; Ctrl-C drops the line
        "software show | except ^python | last 1\r"
        "config execmode show | display json | no-more\r"
        "software show | display json\r"
        "system standby --yes | display json\r"  # refused: nothing runs
    )
    code, ctx = console(store, keys, history=False)
    assert code == 0
    lines = out(ctx).splitlines()
    assert lines[:4] == [
        "Count: 1 line",
        "cs> software show | cou?",
        "  count  Count the lines instead of showing them.",
        "sqlite   : 3.40.1",
    ]
    assert json.loads(lines[4])["execmode"] == "PIPELINED"
    assert json.loads(lines[5])["sqlite"] == "3.40.1"
    assert lines[6:] == []
    assert err(ctx) == (
        "error: `system standby` has no JSON output, so it cannot take `| display json`; the "
        "show commands can (e.g. `system show | display json`).\n"
    )
    assert Machine(store).status().state is State.ACTIVE
