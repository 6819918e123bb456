"""`kill -9` at random points: of a state transition (the store stays readable, its state legal
and its audit chain whole) and of a checkpoint save (resume loads a valid checkpoint)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rel_helpers import replay

from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store

HERE = Path(__file__).parent
TRIALS = 6


def start(body: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -c` running rel_workers.<body>(*args); returns once it says "ready"."""
    code = f"import rel_workers, sys; rel_workers.{body}(*sys.argv[1:-1], int(sys.argv[-1]))"
    environment = dict(os.environ, **(env or {}))
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE), environment.get("PYTHONPATH", "")])
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args], env=environment, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def kill_after(child: subprocess.Popen[str], seconds: float) -> None:
    time.sleep(seconds)
    child.send_signal(signal.SIGKILL)
    child.wait(30)
    if child.stdout is not None:
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_during_transitions_leaves_a_legal_store(home, trial: int) -> None:
    rng = random.Random(trial)
    Store.open(home).close()
    child = start("transition_loop", str(home), str(trial), env={"CS2_BOOT_SECONDS": "0.005"})
    kill_after(child, rng.uniform(0.05, 0.4))
    raw = sqlite3.connect(home / "cs2sim.db")
    assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    raw.close()
    with Store.open(home) as store:
        machine = Machine(store)
        status = machine.status()
        log = machine.audit()
        assert status.state in State and status.active_mode in ExecMode
        assert len([e for e in log if e.command != "booted"]) > 1  # it was killed mid-run
        assert replay(log) == (status.state, status.configured_mode, status.active_mode)
        assert (status.state is State.FAULT) == bool(status.fault_reason)
        assert (status.state is State.ACTIVATING) == (status.activating_until is not None)
        admin = machine_admin(store)  # and it is writable: the next legal change commits
        if status.state is State.STANDBY:
            assert machine.activate(admin).state is State.ACTIVE  # (CS2_BOOT_SECONDS=0 here)
        else:
            assert machine.standby(admin).state is State.STANDBY


def machine_admin(store: Store):
    from cs2sim.system.users import local_identity

    return local_identity(store)


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_during_checkpoint_saves_resumes_from_a_valid_one(tmp_path: Path, trial: int) -> None:
    from cs2sim.runtime.artifacts.checkpoint import list_checkpoints, load_checkpoint, load_latest

    rng = random.Random(100 + trial)
    model_dir = tmp_path / "model_dir"
    child = start("checkpoint_loop", str(model_dir), str(trial))
    assert child.stdout is not None
    first = child.stdout.readline()  # at least one checkpoint is complete...
    assert first.strip() == "1"
    kill_after(child, rng.uniform(0.0, 0.3))  # ...then die anywhere in a later save
    state = load_latest(model_dir)
    assert state is not None, "no loadable checkpoint after a kill"
    assert state.step >= 1
    assert float(state.model["fc1.bias"][0]) == state.step  # the payload is that step's
    assert state.model["fc1.weight"].shape == (256, 1024)
    for path in list_checkpoints(model_dir):  # every listed checkpoint verifies
        assert load_checkpoint(path).step >= 1
    # a resumed run saves on top of what the killed one left (its temp files are cleaned)
    from cs2sim.runtime.artifacts.checkpoint import TrainState, save_checkpoint

    save_checkpoint(model_dir, TrainState(step=state.step + 1, model=state.model), keep_max=3)
    assert load_latest(model_dir).step == state.step + 1  # type: ignore[union-attr]
    assert not [p for p in model_dir.iterdir() if p.name.startswith(".")], "temp files left"
