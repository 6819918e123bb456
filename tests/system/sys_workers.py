"""Child-process bodies for the concurrency tests (importable by multiprocessing's spawn)."""

from __future__ import annotations

import os
import random
import time

from cs2sim.system.errors import InvalidTransition
from cs2sim.system.machine import Machine
from cs2sim.system.state import Action, ExecMode
from cs2sim.system.store import Store
from cs2sim.system.users import local_identity


def race(home: str, seed: int, attempts: int) -> int:
    """Try random admin transitions; return how many were attempted (every one is audited)."""
    os.environ["CS2_HOME"] = home
    rng = random.Random(seed)
    with Store.open() as store:
        machine = Machine(store)
        admin = local_identity(store)
        for _ in range(attempts):
            action = rng.choice([Action.STANDBY, Action.ACTIVATE, Action.SETUP])
            mode = rng.choice(list(ExecMode))
            try:
                machine.perform(admin, action, mode=mode)
            except InvalidTransition:
                pass  # lost the race, or the state did not allow it: audited as refused
            if rng.random() < 0.3:
                machine.status()  # readers settle finished reboots too
    return attempts


def commit_then_hang(home: str, committed: int, done_event, holding_event) -> None:
    """Commit `committed` transitions, then die (SIGKILL from the parent) mid-transition."""
    os.environ["CS2_HOME"] = home
    store = Store.open()
    machine = Machine(store)
    admin = local_identity(store)
    for i in range(committed):
        (machine.standby if i % 2 == 0 else machine.activate)(admin)
    done_event.set()

    def hang(db, row, to, now):
        # the change is written but not committed when the kill arrives
        db.execute("UPDATE systems SET state = 'FAULT', fault_reason = 'half-done'")
        db.execute(
            "INSERT INTO audit (at, user, system, command, from_state, to_state, outcome,"
            " detail) VALUES (?, 'ghost', 'cs2-1', 'x', '', '', 'ok', 'uncommitted')",
            (time.time(),),
        )
        holding_event.set()
        time.sleep(600)
        return {}, ""

    machine._attempt(admin, Action.FAULT, hang)
