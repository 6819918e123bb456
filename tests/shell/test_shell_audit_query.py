"""`audit show` filters: --user, --command, --outcome, --since / --until, --system, --all, JSON;
and the time forms --since takes."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from shell_helpers import ALICE, console, err, make_context, out

from cs2sim.csshell import timespec
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.timespec import parse_moment
from cs2sim.system import audit
from cs2sim.system.store import Store

# The clock the queries read: fixed for the whole module, and handed to the console's time
# parser by `logged` (a clock read at import would drift from the rows' stamps on a slow machine).
NOW = 1_800_000_000.0


class _FrozenClock:
    @staticmethod
    def time() -> float:
        return NOW


@pytest.fixture
def logged(store: Store, monkeypatch: pytest.MonkeyPatch) -> Store:
    """Six rows over three days, two users, three outcomes, two systems and a system-less one;
    `--since` / `--until` durations count back from NOW, whatever the machine's speed."""
    monkeypatch.setattr(timespec, "time", _FrozenClock)
    rows = [
        (NOW - 3 * 86400, "root", "cs2-1", "system standby", "ok"),
        (NOW - 2 * 86400, "bob", "cs2-1", "system activate", "denied"),
        (NOW - 7200, "root", "cs2-1", "config execmode setup", "refused"),
        (NOW - 1800, "bob", "", "user passwd bob", "ok"),
        (NOW - 600, "root", "cs2-9", "system standby", "ok"),
        (NOW - 60, "root", "cs2-1", "system fault", "error"),
    ]
    with store.transaction() as db:
        for at, user, system, command, outcome in rows:
            audit.record(db, user=user, system=system, command=command, outcome=outcome, at=at)
    return store


def shown(store: Store, line: str) -> list[dict[str, object]]:
    ctx = make_context(store)
    code = run_line(ctx, line + " --output-format=json")
    assert code == 0, err(ctx)
    return json.loads(out(ctx))


def commands(store: Store, line: str) -> list[str]:
    return [str(row["command"]) for row in shown(store, line)]


def test_filters_by_user_command_and_outcome(logged: Store) -> None:
    assert commands(logged, "audit show --user bob") == ["system activate", "user passwd bob"]
    assert commands(logged, "audit show --command standby") == ["system standby"]  # cs2-1 only
    assert commands(logged, "audit show --outcome refused") == ["config execmode setup"]
    assert commands(logged, "audit show --outcome failed") == ["system fault"]  # stored "error"
    assert commands(logged, "audit show --user root --outcome ok") == ["system standby"]


def test_filters_by_time(logged: Store) -> None:
    assert commands(logged, "audit show --since 1h") == ["user passwd bob", "system fault"]
    assert commands(logged, "audit show --since 3h --until 1h") == ["config execmode setup"]
    assert commands(logged, "audit show --until 1d") == ["system standby", "system activate"]


def test_system_all_and_by_ip(logged: Store) -> None:
    everything = commands(logged, "audit show --system all")
    assert len(everything) == 6 and "system standby" in everything[-2:]
    assert commands(logged, "audit show --system 127.0.1.1") == commands(logged, "audit show")
    ctx = make_context(logged)
    assert run_line(ctx, "audit show --system nowhere") == 2
    assert "Unknown system 'nowhere'" in err(ctx)


def test_last_and_all(logged: Store) -> None:
    assert commands(logged, "audit show --system all --last 2") == [
        "system standby",
        "system fault",
    ]
    assert len(commands(logged, "audit show --system all --all")) == 6
    ctx = make_context(logged)
    assert run_line(ctx, "audit show --all --last 3") == 2


def test_text_output_says_what_was_left_out(logged: Store) -> None:
    ctx = make_context(logged)
    assert run_line(ctx, "audit show --system all --last 2") == 0
    text = out(ctx)
    assert "system fault" in text and "cs2-9" in text
    assert text.splitlines()[-1].startswith("... and 4 older matching entries not shown")
    ctx = make_context(logged)
    assert run_line(ctx, "audit show --user nobody") == 0
    assert out(ctx) == "No audit entries match.\n"


def test_a_user_sees_the_same_log(logged: Store) -> None:
    ctx = make_context(logged, identity=ALICE)
    assert run_line(ctx, "audit show --user bob --output-format=json") == 0
    assert len(json.loads(out(ctx))) == 2


def test_time_forms() -> None:
    now = datetime(2026, 11, 26, 12, 0, 0).timestamp()
    assert parse_moment("1h", "--since", now) == now - 3600
    assert parse_moment("1h30m", "--since", now) == now - 5400
    assert parse_moment("2d", "--since", now) == now - 2 * 86400
    assert parse_moment("90s", "--since", now) == now - 90
    assert parse_moment("10:00", "--since", now) == datetime(2026, 11, 26, 10).timestamp()
    assert parse_moment("2026-11-25", "--since", now) == datetime(2026, 11, 25).timestamp()
    assert (
        parse_moment("2026-11-25T08:30", "--since", now)
        == datetime(2026, 11, 25, 8, 30).timestamp()
    )
    with pytest.raises(Exception, match="`--since 5x` is not a time"):
        parse_moment("5x", "--since", now)


def test_audit_filters_in_the_console(store: Store) -> None:
    keys = (
        "system standby --yes\r"
        "system activate --expect-mode weight-streaming\r"  # refused
        "audit show --outcome refused --since 10m | match system\r"
        "audit show --user root --outcome ok --command standby | match STANDBY | count\r"
        "audit show --since tomorrow\r"
    )
    code, ctx = console(store, keys, history=False)
    assert code == 0
    lines = out(ctx).splitlines()
    assert lines[0] == "System cs2-1 is in STANDBY."
    refused = lines[1].split()
    assert refused[2:7] == ["root", "system", "activate", "STANDBY", "refused"]
    assert lines[2:] == ["Count: 1 line"]
    assert err(ctx).splitlines()[-1].startswith("error: `--since tomorrow` is not a time")
