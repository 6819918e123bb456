"""Property: no input line crashes the dispatcher or shows a traceback (real Store in tmp)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cs2sim.csshell.commands import COMMANDS
from cs2sim.csshell.context import Context, ExitShell
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.prompts import ScriptPrompter
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity

# Words the table knows (so lines reach deep into parsing), mixed with arbitrary text.
VOCAB = sorted(
    {w for c in COMMANDS.commands() for w in c.words}
    | {o.name for c in COMMANDS.commands() for o in c.options}
    | {v for c in COMMANDS.commands() for a in c.args for v in a.choices}
    | {"--output-format=json", "--yes", "?", ";", "'", '"', "-", "--", "ws", "--last"}
)
# Counts as people type them, and the edges: beyond sqlite's int64, digits int() rejects ("²").
NUMBER = st.one_of(
    st.integers(min_value=-3, max_value=100).map(str),
    st.integers(min_value=2**63 - 1, max_value=2**70).map(str),
    st.sampled_from(["²", "١٢", "1_000", "+5", " 7", "1e3"]),
)
WORD = st.one_of(st.sampled_from(VOCAB), st.text(max_size=12), NUMBER)
# A real command followed by one of its own options and a value: reaches every handler's checks.
OPTIONS = [(c.path, o.name) for c in COMMANDS.commands() for o in c.options] + [
    (c.path, "") for c in COMMANDS.commands() if c.path not in ("exit", "quit")
]
COMMAND_LINE = st.builds(
    lambda pair, value: " ".join(w for w in (*pair, value) if w),
    st.sampled_from(OPTIONS),
    st.one_of(NUMBER, WORD),
)
LINE = st.one_of(st.text(max_size=80), st.lists(WORD, max_size=8).map(" ".join), COMMAND_LINE)


@pytest.fixture(scope="module")
def shared_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as tmp:
        mp = pytest.MonkeyPatch()
        mp.setenv("CS2_BOOT_SECONDS", "0")
        mp.delenv("CS2_CLUSTER", raising=False)
        store = Store.open(Path(tmp))
        yield store
        store.close()
        mp.undo()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=LINE)
def test_any_line_gives_output_or_one_error_line(shared_store: Store, line: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    ctx = Context(
        shared_store, local_identity(shared_store), COMMANDS, ScriptPrompter(), out=out, err=err
    )
    try:
        code = run_line(ctx, line)
    except ExitShell:
        return
    errors = err.getvalue()
    assert "Traceback" not in errors + out.getvalue()
    assert "internal error" not in errors, errors
    if code:
        assert errors.startswith("error: ")
        assert errors.count("\n") == 1, errors  # exactly one line
    else:
        assert errors == ""
