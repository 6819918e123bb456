"""Concurrent admins: several processes race standby / setup / activate through the real console
dispatcher. The audit chain replays without a break, and every command's exit code agrees with
its audit row (an activation whose reboot completed exits 0, even when another
admin's standby lands before the waiting shell looks again)."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

import rel_workers
from rel_helpers import ACTIONS_BY_WORDS, replay

from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store

WORKERS, LINES = 4, 100


def test_racing_admins_exit_codes_match_the_audit_log(home, monkeypatch) -> None:
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0.02")  # reboots end while the others race
    Store.open(home).close()
    names = [f"admin{i}" for i in range(WORKERS)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WORKERS) as pool:
        results = pool.starmap(
            rel_workers.admin_commands,
            [(str(home), n, seed, LINES) for seed, n in enumerate(names)],
        )
    with Store.open(home) as store:
        machine = Machine(store)
        status = machine.status()
        log = machine.audit()
    # 1. the chain: every row follows from the one before, and ends in the stored state
    assert replay(log) == (status.state, status.configured_mode, status.active_mode)
    assert status.state in State and status.configured_mode in ExecMode
    # 2. one row per command, by its user, in order; the exit code says what the row says
    rows = defaultdict(list)
    for e in log:
        if e.command in ACTIONS_BY_WORDS:
            rows[e.user].append(e)
    booted_after = _booted_after(log)
    activations_ok = 0
    for name, lines in zip(names, results, strict=True):
        assert len(rows[name]) == len(lines) == LINES, name
        for (line, code, text), row in zip(lines, rows[name], strict=True):
            words = (
                " ".join(line.split()[:3]) if line.startswith("config") else line.split(" --")[0]
            )
            assert row.command == words, (line, row)
            if row.outcome != "ok":
                assert (row.outcome, code) == ("refused", 1), (line, code, text, row)
            elif row.command == "system activate":
                activations_ok += 1
                # the reboot completed (a `booted` row follows before any other change): exit 0
                assert booted_after[row.id], row
                assert code == 0, (line, code, text, row)
                assert "activated" in text or "booted into" in text, text
            else:
                assert code == 0, (line, code, text, row)
    assert activations_ok > 0  # the race really exercised activations


def _booted_after(log) -> dict[int, bool]:
    """For each ok activation row: is the next state change of the system its `booted` row?"""
    result: dict[int, bool] = {}
    pending: int | None = None
    for e in log:
        changed = e.outcome == "ok" and (e.from_state != e.to_state or e.command == "booted")
        if not changed:
            continue
        if pending is not None:
            result[pending] = e.command == "booted"
            pending = None
        if e.command == "system activate":
            pending = e.id
    if pending is not None:
        result[pending] = False
    return result
