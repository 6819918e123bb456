"""Helpers shared by the system/ tests (a unique module name: tests/ has no packages)."""

from __future__ import annotations

import time

from cs2sim.system.store import Store


class FakeClock:
    """A clock that moves only when told to: lets a reboot finish without sleeping."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def dump(store: Store, skip: tuple[str, ...] = ("audit",)) -> dict[str, list[tuple]]:
    """Every row of every table but `skip`: compare before/after to prove nothing changed."""
    with store.read() as db:
        tables = [
            t
            for (t,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
            if t not in skip
        ]
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
