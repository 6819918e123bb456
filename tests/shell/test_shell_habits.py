"""Habits from other consoles: verb-first words answered with the right command, `history`,
`user list` in JSON, `--system` / `system use` by IP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shell_helpers import console, err, make_context, out

from cs2sim.csshell.dispatch import run_line
from cs2sim.system.cluster import EXAMPLE_PATH
from cs2sim.system.store import Store


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("show system", "system show"),
        ("show jobs", "jobs show"),
        ("show config execmode", "config execmode show"),
        ("cancel jobs 12", "jobs cancel"),
        ("show sys", "system show"),
    ],
)
def test_verb_first_gets_the_right_command(store: Store, typed: str, meant: str) -> None:
    ctx = make_context(store)
    assert run_line(ctx, typed) == 2
    assert f"did you mean `{meant}`?" in err(ctx)


def test_user_list_json(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "user list --output-format=json") == 0
    data = json.loads(out(ctx))
    assert [u["name"] for u in data["users"]] == [ctx.identity.name]
    assert data["users"][0]["role"] == "admin" and data["you"]["role"] == "admin"


def test_system_by_ip(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "cluster.yaml").write_text(EXAMPLE_PATH.read_text())
    store = Store.open(home)
    try:
        ctx = make_context(store, system="127.0.1.3")
        assert ctx.machine.name == "cs2-3"
        assert run_line(ctx, "system use 127.0.1.2") == 0
        assert "Now acting on cs2-2 (127.0.1.2)" in out(ctx)
        assert run_line(ctx, "system use 10.9.9.9") == 2
        assert "Unknown system '10.9.9.9'" in err(ctx)
    finally:
        store.close()


def test_history_lists_what_was_typed(store: Store) -> None:
    keys = "config execmode show\rsoftware show\rhistory\rhistory --last 1 | display json\r"
    code, ctx = console(store, keys)  # at the console: each line is saved before it runs
    assert code == 0
    lines = out(ctx).splitlines()
    assert lines[-4:] == [
        "1  config execmode show",
        "2  software show",
        "3  history",
        '["history --last 1 | display json"]',
    ]
