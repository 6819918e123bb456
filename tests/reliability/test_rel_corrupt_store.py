"""A damaged, forced or symlinked store is refused in one sentence: never an internal error,
never a file created outside CS2_HOME, never another store followed silently."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cs2sim.system import users
from cs2sim.system.errors import StoreError
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode
from cs2sim.system.store import DB_NAME, Store

COMMANDS = "system show; jobs show --all; audit show --last 5; user list"


def _cs(home: Path, commands: str = COMMANDS) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CS2_HOME": str(home), "CS2_BOOT_SECONDS": "0"}
    return subprocess.run(
        [sys.executable, "-m", "cs2sim.csshell", "-c", commands],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _one_sentence(p: subprocess.CompletedProcess[str]) -> None:
    assert "internal error" not in p.stderr, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert p.returncode == 0 or len(errors) >= 1, (p.returncode, p.stderr)


@pytest.fixture
def pristine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store with some history: a standby, an activation, a job, an account."""
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    home = tmp_path / "pristine"
    with Store.open(home) as store:
        machine = Machine(store)
        me = users.local_identity(store)
        machine.standby(me)
        machine.activate(me)
        job = machine.register_job(me, ExecMode.PIPELINED, "run.py", os.getpid())
        machine.finish_job(job.id, "COMPLETED")
        users.add_user(store, me, "bob", users.Role.USER, "pw")
    return home


def test_seeded_corruptions_are_one_sentence(pristine, tmp_path):
    data = (pristine / DB_NAME).read_bytes()
    for seed in range(40):
        rng = random.Random(seed)
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(damaged))
            for k in range(rng.randint(1, 64)):
                if at + k < len(damaged):
                    damaged[at + k] = rng.randrange(256)
        home = tmp_path / f"seed{seed}"
        home.mkdir(mode=0o700)
        (home / DB_NAME).write_bytes(bytes(damaged))
        (home / DB_NAME).chmod(0o600)
        _one_sentence(_cs(home))


def test_a_state_forced_past_the_check_constraint_is_one_sentence(pristine):
    db = sqlite3.connect(pristine / DB_NAME, isolation_level=None)
    db.execute("PRAGMA ignore_check_constraints = 1")
    db.execute("UPDATE systems SET state = 'BOGUS', active_mode = 'TURBO'")
    db.close()
    shown = _cs(pristine, "system show")
    assert shown.returncode == 1 and "internal error" not in shown.stderr
    assert shown.stderr.startswith("error: the system store at ") and "BOGUS" in shown.stderr
    assert shown.stderr.count("\n") == 1


def test_a_job_forced_past_the_check_constraint_is_one_sentence(pristine):
    db = sqlite3.connect(pristine / DB_NAME, isolation_level=None)
    db.execute("PRAGMA ignore_check_constraints = 1")
    db.execute("UPDATE jobs SET mode = 'TURBO', state = 'RUNNING'")
    db.close()
    shown = _cs(pristine, "system show")
    assert shown.returncode == 1 and "internal error" not in shown.stderr
    assert shown.stderr.startswith(
        "error: the system store holds a row for job 1 that no cs2sim writes"
    )
    assert shown.stderr.count("\n") == 1


def test_a_dangling_symlink_as_the_store_is_refused_and_creates_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    outside = tmp_path / "outside" / "planted.db"
    outside.parent.mkdir()
    (home / DB_NAME).symlink_to(outside)
    with pytest.raises(
        StoreError,
        match=r"is a symbolic link \(to .*planted.db\), which "
        r"cs2sim does not follow",
    ):
        Store.open(home)
    shown = _cs(home, "system show")
    assert shown.returncode == 1 and shown.stderr.count("\n") == 1
    assert not outside.exists() and not list(outside.parent.iterdir())


def test_a_symlink_to_another_valid_store_is_refused(pristine, tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / DB_NAME).symlink_to(pristine / DB_NAME)
    shown = _cs(home, "system show")
    assert shown.returncode == 1 and "is a symbolic link" in shown.stderr
    assert "internal error" not in shown.stderr
    before = (pristine / DB_NAME).read_bytes()
    with pytest.raises(StoreError, match="symbolic link"):
        Store.open(home)
    assert (pristine / DB_NAME).read_bytes() == before
    shutil.rmtree(home)
