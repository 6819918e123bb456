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

from cs2sim.csshell.main import main
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


def _cs_here(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """`cs -c COMMANDS` by its entry point in this process (what the console process runs, less
    the interpreter's start: ~0.15 CPU-s a run)."""
    monkeypatch.setenv("CS2_HOME", str(home))
    code = main(["-c", COMMANDS])
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["cs", "-c", COMMANDS], code, captured.out, captured.err)


def _damaged(data: bytes, seed: int) -> bytes:
    rng = random.Random(seed)
    damaged = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(damaged))
        for k in range(rng.randint(1, 64)):
            if at + k < len(damaged):
                damaged[at + k] = rng.randrange(256)
    return bytes(damaged)


SEEDS = range(40)


def _outcome(p: subprocess.CompletedProcess[str]) -> tuple[int, bool]:
    """A run's kind: its exit code, and whether a command (not the store's opening) failed."""
    return p.returncode, p.stderr.startswith("error: command ")


def test_seeded_corruptions_are_one_sentence(pristine, tmp_path, capsys, monkeypatch):
    """Each damaged store through the console's entry point in this process; the first store of
    each outcome (today: run through, refused at opening, refused at the third command) also
    through a real `cs -c` process, for what only a process shows (the exit, the interpreter's
    last words)."""
    data = (pristine / DB_NAME).read_bytes()
    outcomes: set[tuple[int, bool]] = set()
    for seed in SEEDS:
        home = tmp_path / f"seed{seed}"
        home.mkdir(mode=0o700)
        (home / DB_NAME).write_bytes(_damaged(data, seed))
        (home / DB_NAME).chmod(0o600)
        shown = _cs_here(home, capsys, monkeypatch)
        _one_sentence(shown)
        if _outcome(shown) not in outcomes:
            outcomes.add(_outcome(shown))
            process_home = tmp_path / f"seed{seed}-process"
            process_home.mkdir(mode=0o700)
            (process_home / DB_NAME).write_bytes(_damaged(data, seed))
            (process_home / DB_NAME).chmod(0o600)
            _one_sentence(_cs(process_home))
    assert len(outcomes) >= 2, outcomes  # the seeds still damage the store in more than one way


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
