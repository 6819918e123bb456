"""Child-process bodies of the reliability suite (importable by multiprocessing's spawn and by
`python -c`): admins racing through the console dispatcher, and loops to kill with SIGKILL."""

from __future__ import annotations

import io
import os
import random
import sys
from pathlib import Path

COMMAND_LINES = (  # standby and activate twice as often: their race is the one that matters
    "system standby --yes",
    "system standby --yes",
    "system activate",
    "system activate",
    "config execmode setup pipelined",
    "config execmode setup weight-streaming",
)


def admin_commands(home: str, name: str, seed: int, count: int) -> list[tuple[str, int, str]]:
    """Run `count` random state-changing lines as admin `name` through the real dispatcher;
    return (line, exit code, error text) of each, in order."""
    os.environ["CS2_HOME"] = home
    from cs2sim.csshell.commands import COMMANDS
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.dispatch import run_line
    from cs2sim.csshell.prompts import ScriptPrompter
    from cs2sim.system.store import Store
    from cs2sim.system.users import Identity, Role

    rng = random.Random(seed)
    who = Identity(name, Role.ADMIN, "password")
    results = []
    with Store.open() as store:
        for _ in range(count):
            line = rng.choice(COMMAND_LINES)
            out, err = io.StringIO(), io.StringIO()
            ctx = Context(store, who, COMMANDS, ScriptPrompter(), out=out, err=err)
            code = run_line(ctx, line)
            results.append((line, code, err.getvalue() + out.getvalue()))
    return results


def transition_loop(home: str, seed: int) -> None:
    """Change the system's state forever (until SIGKILL), printing a dot per commit."""
    os.environ["CS2_HOME"] = home
    from cs2sim.system.errors import InvalidTransition
    from cs2sim.system.machine import Machine
    from cs2sim.system.state import Action, ExecMode
    from cs2sim.system.store import Store
    from cs2sim.system.users import local_identity

    rng = random.Random(seed)
    with Store.open() as store:
        machine = Machine(store)
        admin = local_identity(store)
        print("ready", flush=True)
        while True:
            action = rng.choice([Action.STANDBY, Action.ACTIVATE, Action.SETUP, Action.FAULT])
            try:
                machine.perform(admin, action, mode=rng.choice(list(ExecMode)), reason="drill")
            except InvalidTransition:
                pass


def checkpoint_loop(model_dir: str, seed: int) -> None:
    """Save checkpoints forever (until SIGKILL) with runtime/artifacts/checkpoint.py, a few MB
    each so that a kill often lands inside a write."""
    import numpy as np

    from cs2sim.runtime.artifacts.checkpoint import TrainState, save_checkpoint

    rng = np.random.default_rng(seed)
    step = 0
    print("ready", flush=True)
    while True:
        step += 1
        weights = {
            "fc1.weight": rng.standard_normal((256, 1024)).astype(np.float32),  # 1 MiB
            "fc1.bias": np.full((1024,), float(step), np.float32),
        }
        state = TrainState(
            step=step,
            model=weights,
            optimizer={"m": {k: v * 0.5 for k, v in weights.items()}, "t": step},
            meta={"model": "fuzz"},
        )
        save_checkpoint(Path(model_dir), state, keep_max=3)
        sys.stdout.write(f"{step}\n")
        sys.stdout.flush()
