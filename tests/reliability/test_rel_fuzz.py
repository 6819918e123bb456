"""Console fuzz: thousands of lines through the in-process dispatcher (hypothesis).

Properties, for every line: no traceback and no internal error; a failure is exactly one
`error:` line; nothing a line prints carries a control character (terminal injection); and a
line that fails (or any line of a non-admin) changes nothing in the store but the audit log.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_helpers import dump

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.context import Context, ExitShell
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.prompts import ScriptPrompter
from cs2sim.system import audit
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role, local_identity

VOCAB = sorted(
    {w for c in COMMANDS.commands() for w in c.words}
    | {o.name for c in COMMANDS.commands() for o in c.options}
    | {v for c in COMMANDS.commands() for a in c.args for v in a.choices}
    | {"--output-format=json", "--yes", "?", ";", "'", '"', "--", "--last", "--password", "ws"}
)
# What an attacker types: escape sequences, C1 CSI, bidi overrides, NUL, newlines, markup.
NASTY = st.sampled_from(
    [
        "\x1b[2J",
        "\x1b]0;pwned\x07",
        "\x9b31m",
        "\u202egnp.exe",
        "\x00",
        "\r",
        "\x08\x08",
        "[bold red]x[/]",
        "\x1b[?1049h",
        "\x7f",
        "\ufeff",
        "\n",
    ]
)
WORD = st.one_of(st.sampled_from(VOCAB), st.text(max_size=10), NASTY)
LINE = st.one_of(
    st.text(max_size=60),
    st.lists(WORD, max_size=7).map(" ".join),
    st.builds(
        lambda c, w: f"{c} {w}",
        st.sampled_from([c.path for c in COMMANDS.commands()]),
        st.lists(WORD, max_size=3).map(" ".join),
    ),
)
CONTROL = set(map(chr, range(0x20))) - {"\n"} | set(map(chr, range(0x7F, 0xA0))) | {"\u202e"}

pytestmark = pytest.mark.slow  # thousands of hypothesis console lines


@pytest.fixture(scope="module")
def fuzz_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as tmp:
        mp = pytest.MonkeyPatch()
        mp.setenv("CS2_BOOT_SECONDS", "0")
        mp.delenv("CS2_CLUSTER", raising=False)
        store = Store.open(Path(tmp))
        # the first command on a new store writes the cluster description's systems into it
        # (whoever runs it): done here, so that a non-admin's first line changes nothing
        assert run(store, local_identity(store), "system show")[0] == 0
        yield store
        store.close()
        mp.undo()


def run(store: Store, who: Identity, line: str) -> tuple[int | None, str, str]:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(store, who, COMMANDS, ScriptPrompter(), out=out, err=err)
    try:
        code: int | None = run_line(ctx, line)
    except ExitShell:
        code = None
    return code, out.getvalue(), err.getvalue()


def check_output(code: int | None, out: str, err: str) -> None:
    assert "Traceback" not in out + err
    assert "internal error" not in err, err
    assert not CONTROL & set(out + err), repr(out + err)  # nothing reaches the terminal raw
    if code:
        assert err.startswith("error: ") and err.count("\n") == 1, err
    else:  # a success may warn (e.g. "older matching entries not shown"), one line a warning
        assert all(line.startswith("warning: ") for line in err.splitlines()), err


SETTINGS = settings(
    max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck), database=None
)


# One line, two runs: hypothesis's drawing of a line (~1 ms) costs several times a run of it, so
# both properties are checked on each of the 3000 lines rather than each on 3000 of its own.
@SETTINGS
@given(line=LINE)
def test_lines_never_crash_refusals_change_nothing_and_non_admins_change_nothing(
    fuzz_store: Store, line: str
) -> None:
    """As the admin: a refused one-command line changes nothing. As a non-admin: no line
    changes anything but the audit log. Either way: no crash, one error line, no raw control
    character."""
    before = dump(fuzz_store)
    code, out, err = run(fuzz_store, local_identity(fuzz_store), line)
    check_output(code, out, err)
    if code and ";" not in line:  # `a; b` runs a before b fails: only a one-command line is atomic
        assert dump(fuzz_store) == before, line  # so `before` is the store as it is
    else:
        before = dump(fuzz_store)  # the line may have changed the store

    code, out, err = run(fuzz_store, Identity("mallory", Role.USER, "local"), line)
    check_output(code, out, err)
    assert dump(fuzz_store) == before, line


# -- regression cases (what the fuzz found) ------------------------------------------------------
def test_a_success_that_warns_passes_the_output_check(fuzz_store: Store) -> None:
    """`audit show` as JSON says on stderr that older rows were left out: allowed, and exit 0."""
    admin = local_identity(fuzz_store)
    with fuzz_store.transaction() as db:  # more rows than `audit show` returns by default
        for n in range(30):
            audit.record(db, user="root", system="", command=f"probe {n}", outcome="ok")
    code, out, err = run(fuzz_store, admin, "audit show --output-format=json")
    assert code == 0 and err.startswith("warning: ") and "not shown" in err, err
    check_output(code, out, err)


@pytest.mark.parametrize(
    "line",
    [
        "user passwd '\x1b[2J\x1b[Hyou have been pwned'",
        "user remove \x1b]0;title\x07",
        "user passwd \x9b2J\u202eevil",
        "audit show --last \x1b[31m",
    ],
)
def test_control_sequences_are_shown_not_obeyed(fuzz_store: Store, line: str) -> None:
    who = Identity("mallory", Role.USER, "local")
    code, out, err = run(fuzz_store, who, line)
    check_output(code, out, err)
    assert code and ("^[" in err or "\\x9b" in err or "\\u202e" in err), err
    # the audit log keeps what was typed; `audit show` (admin) shows it escaped
    code, out, err = run(fuzz_store, local_identity(fuzz_store), "audit show --last 3")
    check_output(code, out, err)
    assert code == 0 and ("^[" in out or "\\x9b" in out or "\\u202e" in out), out
