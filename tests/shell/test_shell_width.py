"""Console text wraps at word boundaries on a terminal at any width down to 60
columns (help, banner, messages, error lines); pipes are never wrapped. Tested at 60 and 120."""

from __future__ import annotations

import pytest
from shell_helpers import make_context, out, plain

from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.repl import banner
from cs2sim.csshell.terminal import fit, visible, wrap

WIDTHS = (60, 120)
LINES = [
    "help",
    "help config execmode",
    "system show",
    "config execmode show",
    "user list",
    "audit show --last 5",
    "frobnicate the widgets",  # an error line naming every command
    "system standby",  # an error: asks for confirmation, not interactive
    "system activate",  # refused: already ACTIVE
]


def words(text: str) -> list[str]:
    return text.split()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("line", LINES)
def test_wrapped_at_spaces_within_the_width(store, width: int, line: str) -> None:
    wide = make_context(store)  # not a terminal: one line per fact, never wrapped
    narrow = make_context(store, columns=width)
    run_line(wide, line)
    run_line(narrow, line)
    for stream in ("out", "err"):
        a = getattr(wide, stream).getvalue()
        b = getattr(narrow, stream).getvalue()
        assert all(len(x) <= width for x in b.splitlines()), b
        assert words(a) == words(b)  # the same words, none cut in two
    if width == 60 and line == "help":
        assert max(len(x) for x in wide.out.getvalue().splitlines()) > 60  # it did wrap


@pytest.mark.parametrize("width", WIDTHS)
def test_banner_and_hanging_indents(store, width: int) -> None:
    ctx = make_context(store, columns=width)
    ctx.echo(banner(ctx))
    ctx.echo(
        "Active Execution Mode     : WEIGHT_STREAMING (PIPELINED takes effect at the next "
        "`system activate`, once the reboot in progress completes)"
    )
    ctx.error(
        "The reboot did not complete: bob put cs2-1 in FAULT at 2026-11-23 10:00:00 "
        "(`system fault`); run `system show` and `audit show` to see why."
    )
    text = out(ctx)
    lines = text.splitlines()
    assert all(len(x) <= width for x in lines)
    assert words(text) == words(banner(ctx)) + words(
        "Active Execution Mode : WEIGHT_STREAMING (PIPELINED takes effect at the next "
        "`system activate`, once the reboot in progress completes)"
    )
    if width == 60:  # continuation lines hang under the value, after "Label : "
        value_col = lines[-1].index(lines[-1].strip()) if len(lines) > 2 else 0
        assert value_col == len("Active Execution Mode     : ")
        errors = ctx.err.getvalue().splitlines()  # type: ignore[attr-defined]
        assert len(errors) > 1 and all(e.startswith("       ") for e in errors[1:])


def test_pipes_are_never_wrapped(store) -> None:
    ctx = make_context(store)  # StringIO: not a terminal
    run_line(ctx, "help")
    assert max(len(x) for x in out(ctx).splitlines()) > 60


def test_visible_and_fit() -> None:
    assert visible("a\x1b[2Jb") == "a^[[2Jb"
    assert visible("\x00\x07\x7f\x9b\u202e\ufeff") == "^@^G^?\\x9b\\u202e\\ufeff"
    assert visible("Weight Streaming ✔ ü 中") == "Weight Streaming ✔ ü 中"
    assert fit("x\nerror: fake", None) == ["x^Jerror: fake"]  # never a line of its own
    assert wrap("a " * 10, None) == ["a " * 10]
    long = "error: cannot read /" + "x" * 80 + " now"
    assert all(len(x) <= 60 for x in wrap(long, 60))


@pytest.mark.parametrize("width", WIDTHS)
def test_interactive_shell_at_width(home, width: int) -> None:
    """End to end under pexpect on a terminal of `width` columns: banner and `help` lines fit
    and no word is cut."""
    from shell_helpers import Shell, shell_env

    sh = Shell(shell_env(home))
    sh.child.setwinsize(40, width)
    try:
        first = sh.prompt()
        sh.child.sendline("help")
        shown = sh.expect("Leave the shell (also `exit` or Ctrl-D).")  # the last row, whole
        sh.prompt()
    finally:
        sh.close()
    text = plain(first)
    assert "cs2sim console on cs2-1, logged in as" in " ".join(text.split())
    printed = [x for x in plain(shown).splitlines() if x.strip() and "cs>" not in x]
    assert printed and all(len(x) <= width for x in printed), printed
    joined = " ".join(" ".join(printed).split())
    for phrase in ("any word may be shortened to a unique prefix", "Show the configured execution"):
        assert phrase in joined


@pytest.mark.parametrize("width", WIDTHS)
def test_toolbar_fits_the_width(store, width: int) -> None:
    from cs2sim.csshell.toolbar import Toolbar
    from cs2sim.system.machine import Machine
    from cs2sim.system.state import ExecMode

    ctx = make_context(store)
    machine = Machine(store)
    machine.standby(ctx.identity)
    machine.setup_execmode(ctx.identity, ExecMode.WEIGHT_STREAMING)  # the longest toolbar
    text = "".join(t for _, t in Toolbar(ctx, columns=lambda: width)())
    assert len(text) <= width, text
    assert "STANDBY" in text and ctx.identity.name in text
    assert ("WEIGHT_STREAMING" if width == 120 else "WS") in text
