"""A guarded mode change (what activate boots into and who set it; a warning, on a
terminal a question, when another admin changed it unseen; --expect-mode; withdrawing a
pending change), and `jobs show` that says what it leaves out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from shell_helpers import Scripted, err, make_context, out

from cs2sim.csshell.dispatch import run_line
from cs2sim.system.audit import entries
from cs2sim.system.machine import Machine
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role, add_user, local_identity

ALICE_ADMIN = Identity("alice", Role.ADMIN, "password")


def _status(store: Store):
    return Machine(store).status()


def _clear(ctx: Any) -> None:
    for stream in (ctx.out, ctx.err):
        stream.truncate(0), stream.seek(0)


def _two_admins(store: Store) -> tuple[Any, Any]:
    """root configures weight streaming in STANDBY; then alice replaces it with pipelined (on
    purpose: --yes; without it the replacement is refused)."""
    add_user(store, local_identity(store), "alice", Role.ADMIN, "alice-pass-22")
    root = make_context(store, prompter=Scripted(False))
    assert run_line(root, "system standby --yes; config execmode setup weight-streaming") == 0
    alice = make_context(store, identity=ALICE_ADMIN)
    assert run_line(alice, "config execmode setup pipelined --yes") == 0
    _clear(root)
    return root, alice


def test_activate_says_what_it_boots_into_and_who_set_it(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "system standby --yes; config execmode setup ws") == 0
    _clear(ctx)
    assert run_line(ctx, "system activate") == 0
    first = out(ctx).splitlines()[0]
    me = ctx.identity.name
    assert first.startswith(
        f"cs2-1 will boot into Weight Streaming mode (now Pipelined), as configured by {me} at "
    )
    assert err(ctx) == ""  # the session set it itself: no warning


def test_another_admins_unseen_change_is_asked_about_on_a_terminal(store: Store) -> None:
    root, _ = _two_admins(store)
    assert run_line(root, "system activate") == 0  # answered no: nothing changed
    assert root.prompter.asked == ["Boot cs2-1 into Pipelined mode?"]
    text = out(root)
    assert "as configured by alice at " in text
    assert "Note: alice set the configured mode to PIPELINED at " in text
    assert "Cancelled; nothing was changed (cs2-1 stays STANDBY)." in text
    assert _status(store).state is State.STANDBY
    # once this session has shown the mode, it boots without asking again
    assert run_line(root, "config execmode show") == 0
    root.prompter.answers = []
    assert run_line(root, "system activate") == 0
    assert root.prompter.asked == ["Boot cs2-1 into Pipelined mode?"]
    assert _status(store).active_mode is ExecMode.PIPELINED


def test_another_admins_change_warns_a_script_and_boots(store: Store) -> None:
    root, _ = _two_admins(store)
    root.prompter = __import__("cs2sim.csshell.prompts", fromlist=["x"]).ScriptPrompter()
    assert run_line(root, "system activate") == 0
    warning = err(root)
    assert warning.startswith("warning: alice set the configured mode to PIPELINED at ")
    assert "--expect-mode pipelined" in warning
    assert _status(store).state is State.ACTIVE


def test_expect_mode_refuses_a_different_pending_mode(store: Store) -> None:
    root, _ = _two_admins(store)
    assert run_line(root, "system activate --expect-mode weight-streaming") == 1
    assert (
        "configured for PIPELINED, not WEIGHT_STREAMING as expected, so it was not "
        "rebooted" in err(root)
    )
    assert _status(store).state is State.STANDBY  # nothing was done
    last = entries(store)[-1]
    assert (last.command, last.outcome) == ("system activate", "refused")
    _clear(root)
    assert run_line(root, "system activate --expect-mode PIPELINED") == 0  # no question asked
    assert root.prompter.asked == []
    assert _status(store).state is State.ACTIVE


def test_a_pending_change_can_be_withdrawn(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "system standby --yes; config execmode setup ws") == 0
    assert _status(store).pending_mode_change
    _clear(ctx)
    assert run_line(ctx, "config execmode withdraw") == 0
    assert out(ctx) == (
        "Withdrew the pending change to Weight Streaming (set by "
        f"{ctx.identity.name}); cs2-1 is configured for Pipelined again, the "
        "mode it runs in.\n"
    )
    s = _status(store)
    assert (s.configured_mode, s.active_mode, s.state) == (
        ExecMode.PIPELINED,
        ExecMode.PIPELINED,
        State.STANDBY,
    )
    last = entries(store)[-1]
    assert (last.command, last.outcome) == ("config execmode withdraw", "ok")
    # nothing pending any more: refused and audited
    assert run_line(ctx, "config execmode withdraw") == 1
    assert "No mode change is pending on cs2-1" in err(ctx)
    assert entries(store)[-1].outcome == "refused"
    # the withdrawal is what set the configured mode now
    assert Machine(store).mode_origin().command == "config execmode withdraw"


def test_withdraw_needs_an_admin_and_standby(store: Store) -> None:
    user = make_context(store, identity=Identity("bob", Role.USER, "password"))
    assert run_line(user, "config execmode withdraw") == 77
    assert entries(store)[-1].outcome == "denied"
    admin = make_context(store)
    assert run_line(admin, "config execmode withdraw") == 1  # ACTIVE: nothing can be pending
    assert "no mode change is pending" in err(admin)


# -- jobs show -------------------------------------------------------------------------------
def _queue(store: Store, pending: int, ended: int) -> tuple[int, list[int]]:
    nodes = queue.cluster_nodes(store)
    whole = JobRequest((Component(len(nodes), 1, 1),), ("python", "run.py"), name="big")
    done = []
    for _ in range(ended):
        j = queue.submit(store, whole, user="carol", nodes=nodes)
        queue.finish(store, j, "COMPLETED", 0, nodes)
        done.append(j)
    running = queue.submit(store, whole, user="alice", nodes=nodes)  # this (live) process
    for _ in range(pending):
        queue.submit(store, whole, user="bob", nodes=nodes)
    return running, done


def test_jobs_show_lists_running_then_the_head_of_the_queue_and_says_what_it_hides(
    store: Store,
) -> None:
    running, done = _queue(store, pending=250, ended=3)
    ctx = make_context(store)
    assert run_line(ctx, "jobs show") == 0
    lines = out(ctx).splitlines()
    rows = [ln.split() for ln in lines[2:-1]]
    assert len(rows) == 200
    assert rows[0][0] == str(running) and rows[0][3] == "R"  # the running job first
    assert [int(r[0]) for r in rows[1:]] == list(range(running + 1, running + 200))  # FIFO head
    assert lines[-1] == (
        "... and 51 more pending job(s) not shown; `jobs show --limit 0` lists them all."
    )
    _clear(ctx)
    assert run_line(ctx, "jobs show --limit 0") == 0
    assert len(out(ctx).splitlines()) == 2 + 251
    _clear(ctx)
    assert run_line(ctx, "jobs show --all --limit 5") == 0
    lines = out(ctx).splitlines()
    assert [ln.split()[0] for ln in lines[2:-1]] == [str(running + k) for k in range(5)]
    assert lines[-1] == (
        "... and 246 more pending and 3 older ended job(s) not shown; "
        "`jobs show --all --limit 0` lists them all."
    )
    # JSON lists every job (stdout stays one document)
    _clear(ctx)
    assert run_line(ctx, "jobs show --all --output-format json") == 0
    data = json.loads(out(ctx))
    assert len(data) == 1 + 250 + 3 and err(ctx) == ""
    assert [d["id"] for d in data[-3:]] == list(reversed(done))  # ended: most recent first


def test_jobs_show_limit_must_be_a_number(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "jobs show --limit many") == 2
    assert "--limit many is not a number of jobs" in err(ctx)


# -- one job id ------------------------------------------------------------------------------
def test_standby_refusal_names_each_jobs_id_user_and_command(store: Store) -> None:
    m = Machine(store)
    admin = local_identity(store)
    job = m.register_job(
        Identity("dave", Role.USER, "local"),
        ExecMode.PIPELINED,
        "python run.py -p params.yaml --cs_ip cs2-1",
        os.getpid(),
    )
    ctx = make_context(store)
    assert run_line(ctx, "system standby --yes") == 1
    text = err(ctx)
    assert (
        f"has 1 job(s) running: job {job.id} (dave: python run.py -p params.yaml --cs_ip "
        f"cs2-1); wait for them to finish, cancel them (`jobs cancel {job.id}`)"
    ) in text
    assert admin.role is Role.ADMIN


def test_a_standalone_jobs_id_cancels_it(store: Store, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    # a process that records SIGINT as run.py does (Ctrl-C: CANCELLED, checkpoints kept)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nprint('ready', flush=True)\ntry:\n    time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('interrupted')",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "ready\n"
        m = Machine(store)
        job = m.register_job(local_identity(store), ExecMode.PIPELINED, "python run.py", child.pid)
        ctx = make_context(store)
        assert run_line(ctx, f"jobs cancel {job.id}") == 0
        assert f"Stopping job {job.id}" in out(ctx)
        assert child.communicate(timeout=30)[0] == "interrupted\n"
        assert entries(store)[-1].command == "jobs cancel"
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait()


@pytest.mark.parametrize("who", ["bob"])
def test_only_the_owner_or_an_admin_cancels_a_standalone_job(store: Store, who: str) -> None:
    m = Machine(store)
    job = m.register_job(Identity("dave", Role.USER, "local"), ExecMode.PIPELINED, "x", os.getpid())
    ctx = make_context(store, identity=Identity(who, Role.USER, "password"))
    assert run_line(ctx, f"jobs cancel {job.id}") == 77
    assert "belongs to dave" in err(ctx) and entries(store)[-1].outcome == "denied"
