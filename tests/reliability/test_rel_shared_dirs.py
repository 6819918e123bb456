"""Shared directories cannot lock a user out, and nothing another user planted is read, with real
OS users: another member's `/tmp/cs2sim-<uid>` (made first, mode 0777) lets the victim's launch
run, from a private place of its own, said in one warning line; `jobs log` never reads that
directory (a FIFO planted there does not hang it, a planted log is not shown); a run-log FIFO
of another user in model_dir ends in one sentence, exit 77; another user's `model_dir/.cs2sim`
is refused. Needs root; skipped otherwise."""

from __future__ import annotations

import os
import pwd
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rel_helpers import run_as
from test_rel_shared_store import CAN, _env, member, members, shared  # noqa: F401 - fixtures

from cs2sim.system.errors import CsError

pytestmark = pytest.mark.skipif(not CAN, reason="needs root and useradd/groupadd")


def _captured(
    user: pwd.struct_passwd, env: dict[str, str], fn: Callable[[], Any]
) -> tuple[Any, str]:
    """`fn()` as `user` in a forked child with `env`, its stdout and stderr captured; a hang
    ends the child (SIGALRM) and fails the test instead of waiting forever."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the `with out:` below, after the child)

    def run() -> Any:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115 (the child's stdio)
        sys.stderr = open(2, "w", closefd=False, encoding="utf-8")  # noqa: SIM115 (the child's stdio)
        signal.alarm(300)
        tempfile.tempdir = None  # the child's TMPDIR, not the one this process cached
        try:
            return fn()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()

    with out:
        result = run_as(user, run, env)
        out.seek(0)
        return result, out.read().decode("utf-8", "replace")


@pytest.fixture
def sticky_tmp() -> Any:
    """A stand-in for /tmp (world-writable, sticky) that the test removes afterwards."""
    top = Path(tempfile.mkdtemp(prefix="cs2sim-tmp-"))
    top.chmod(0o1777)
    try:
        yield top
    finally:
        import shutil

        shutil.rmtree(top, ignore_errors=True)


def _home_of(user: pwd.struct_passwd, top: Path) -> Path:
    home = top / f"home-{user.pw_name}"
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    home.chmod(0o700)
    return home


@pytest.mark.slow
def test_a_foreign_tmp_dir_lets_the_victims_job_run_and_jobs_log_ignores_it(
    shared,  # noqa: F811
    members,  # noqa: F811
    sticky_tmp,
):
    victim, other = members
    taken = sticky_tmp / f"cs2sim-{victim.pw_uid}"  # the other member made it first
    taken.mkdir()
    taken.chmod(0o777)
    os.chown(taken, other.pw_uid, other.pw_gid)
    env = {**_env(shared), "TMPDIR": str(sticky_tmp), "HOME": str(_home_of(victim, sticky_tmp))}

    def launch() -> int:
        import warnings

        from cs2sim.scripts.csrun_wse import main
        from cs2sim.scripts.launch_common import write_err
        from cs2sim.system.errors import one_line_warnings

        warnings.resetwarnings()  # as a fresh launcher process (not pytest's "error" filter)
        one_line_warnings(write_err)  # what importing launch_common did at its start
        return main(["--total-nodes", "1", "--tasks-per-node", "2", "echo", "from-the-job"])

    code, said = _captured(victim, env, launch)
    assert code == 0, said
    warnings = [line for line in said.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{taken} is not yours alone" in warnings[0], said
    assert "Traceback" not in said and said.splitlines().count("from-the-job") == 2
    moved = Path(env["HOME"]) / ".cache" / "cs2sim" / "run" / "cs2sim" / "slurm"
    (job,) = [int(p.name) for p in moved.iterdir()]
    assert sorted(p.name for p in taken.iterdir()) == []  # nothing written in the foreign dir

    planted = taken / "slurm" / str(job)  # what the other member plants for `jobs log`
    planted.mkdir(parents=True)
    os.mkfifo(planted / "task-0.log")
    (planted / "task-1.log").write_text("PLANTED by another user\n")
    for p in (taken / "slurm", planted, *planted.iterdir()):
        os.chown(p, other.pw_uid, other.pw_gid)

    def log(*words: str) -> int:
        from cs2sim.csshell.main import main

        return main(["-c", " ".join(("jobs log", str(job), *words))])

    code, shown = _captured(victim, env, log)
    assert code == 0 and "PLANTED" not in shown, shown
    assert sorted(shown.splitlines()) == ["0: from-the-job", "1: from-the-job"], shown
    code, shown = _captured(victim, env, lambda: log("--task", "1"))
    assert code == 0 and shown.splitlines() == ["from-the-job"], shown


def test_a_fifo_in_a_log_dir_is_refused_not_waited_on(tmp_path: Path) -> None:
    from cs2sim.system.paths import UnsafePath
    from cs2sim.system.safeopen import open_regular

    os.mkfifo(tmp_path / "task-0.log")
    start = time.monotonic()
    with pytest.raises(UnsafePath, match="task-0.log is a FIFO, so it was not read"):
        open_regular(tmp_path / "task-0.log")
    assert time.monotonic() - start < 60  # returned at once; a blocking open never returns


def test_a_run_log_fifo_of_another_user_exits_77(shared, members, sticky_tmp):  # noqa: F811
    from cs2sim.runtime.artifacts.atomic import open_append

    runner, other = members
    model_dir = sticky_tmp / "md"
    model_dir.mkdir()
    model_dir.chmod(0o1777)  # a model_dir both may write in (a shared project directory)
    fifo = model_dir / "run_20261129_000000.log"
    os.mkfifo(fifo, 0o600)
    os.chown(fifo, other.pw_uid, other.pw_gid)

    def open_log() -> tuple[int, str]:
        try:
            open_append(fifo)
            return 0, "opened"
        except CsError as e:
            return e.exit_code, str(e)

    code, said = run_as(runner, open_log, _env(shared))
    assert code == 77, said
    assert said == (
        f"{fifo} is a FIFO of uid {other.pw_uid}, not a file of this run; remove it, or use "
        "another model_dir."
    )


def test_a_cs2sim_marker_of_another_user_is_refused(shared, members, sticky_tmp):  # noqa: F811
    from cs2sim.runtime.job.rendezvous import make_job_dir

    runner, other = members
    model_dir = sticky_tmp / "md"
    model_dir.mkdir()
    model_dir.chmod(0o1777)
    marker = model_dir / ".cs2sim"
    marker.mkdir(mode=0o755)
    os.chown(marker, other.pw_uid, other.pw_gid)

    def make() -> tuple[int, str]:
        try:
            make_job_dir(model_dir, "7")
            return 0, "made"
        except CsError as e:
            return e.exit_code, str(e)

    code, said = run_as(runner, make, _env(shared))
    assert code == 77 and said.startswith(f"{marker} is owned by uid {other.pw_uid}"), said
    assert list(marker.iterdir()) == []  # nothing made in it
