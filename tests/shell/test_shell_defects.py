"""Regression tests for defects found by using the console as other consoles' users do: each
fails on the code before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from shell_helpers import Scripted, cs, err, make_context, out

from cs2sim.csshell.commands.execmode import menu_options
from cs2sim.csshell.dispatch import run_line
from cs2sim.csshell.main import script_lines
from cs2sim.csshell.menu import Menu
from cs2sim.system import users
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode
from cs2sim.system.store import Store
from cs2sim.system.users import Identity, Role

BOB = Identity("bob", Role.ADMIN, "password")
MODES = [(ExecMode.PIPELINED, "Pipelined"), (ExecMode.WEIGHT_STREAMING, "Weight Streaming")]


def bob_chose_weight_streaming(store: Store) -> None:
    root = make_context(store)
    users.add_user(store, root.identity, "bob", Role.ADMIN, "a long password 1")
    assert run_line(root, "system standby --yes") == 0
    assert (
        run_line(make_context(store, identity=BOB), "config execmode setup weight-streaming") == 0
    )


def test_menu_forgets_input_that_named_nothing() -> None:
    menu = Menu("Select the execution mode:", MODES, ExecMode.PIPELINED)
    menu.type("3")
    assert menu.accept() is None  # Enter on `3`: refused, said once
    menu.type("2")
    assert menu.typed == "2" and menu.accept() is ExecMode.WEIGHT_STREAMING
    menu = Menu("Select the execution mode:", MODES, ExecMode.PIPELINED)
    menu.type("3")
    menu.type("2")  # no Enter between: `32` names nothing, `2` does
    assert menu.accept() is ExecMode.WEIGHT_STREAMING


def test_a_second_admins_script_does_not_replace_a_pending_choice(store: Store) -> None:
    bob_chose_weight_streaming(store)
    ctx = make_context(store)  # root, a script (ScriptPrompter)
    assert run_line(ctx, "config execmode setup pipelined") == 1
    assert "bob chose WEIGHT_STREAMING" in err(ctx)
    assert "`config execmode setup pipelined --yes`" in err(ctx)
    assert Machine(store).status().configured_mode is ExecMode.WEIGHT_STREAMING
    last = Machine(store).audit()[-1]  # the refusal is audited, as every attempt is
    assert (last.user, last.command, last.outcome) == ("root", "config execmode setup", "refused")
    ctx = make_context(store)
    assert run_line(ctx, "config execmode setup pipelined --yes") == 0
    assert Machine(store).status().configured_mode is ExecMode.PIPELINED


def test_a_second_admin_at_a_terminal_is_asked(store: Store) -> None:
    bob_chose_weight_streaming(store)
    prompter = Scripted(ExecMode.PIPELINED, False)  # the menu's choice, then "no"
    ctx = make_context(store, prompter=prompter)
    assert run_line(ctx, "config execmode setup") == 130
    assert prompter.asked[-1] == "Replace it with Pipelined?"
    assert Machine(store).status().configured_mode is ExecMode.WEIGHT_STREAMING
    last = Machine(store).audit()[-1]  # answered no: still one audit row
    assert (last.command, last.outcome) == ("config execmode setup", "refused")
    assert "answered no to 'Replace it with Pipelined?'" in last.detail
    # the menu did not call bob's pending choice "(current)"
    labels = dict(prompter.options)
    assert "current" not in labels[ExecMode.WEIGHT_STREAMING]
    assert labels[ExecMode.WEIGHT_STREAMING] == "Weight Streaming (pending, chosen by bob)"
    assert labels[ExecMode.PIPELINED] == "Pipelined (active)"
    # choosing what bob chose replaces nothing: no question
    prompter = Scripted(ExecMode.WEIGHT_STREAMING)
    assert run_line(make_context(store, prompter=prompter), "config execmode setup") == 0
    assert len(prompter.asked) == 1


def test_menu_rows_without_a_pending_change(store: Store) -> None:
    status = Machine(store).status()
    assert menu_options(status, None)[0] == (ExecMode.PIPELINED, "Pipelined (current)")


def test_a_script_line_may_end_with_a_comment(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert list(script_lines(["system show  # look first", 'system fault "fan #3"', "# x"])) == [
        (1, "system show"),
        (2, 'system fault "fan #3"'),
    ]
    script = tmp_path / "c.cs"
    script.write_text("config execmode show   # what runs now\n")
    code, stdout, stderr = cs(capsys, "-f", str(script))
    assert code == 0, stderr
    assert stdout == "Configured Execution Mode : PIPELINED\n"


def test_a_c_error_names_the_part_that_failed(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "config execmode show; software show; sytem show") == 2
    assert err(ctx).startswith("error: command 3 of 3 (`sytem show`): there is no command")
    assert "Configured Execution Mode" in out(ctx)


def test_answering_no_is_audited(store: Store) -> None:
    """Every attempt leaves a row: a `system standby` or `system activate` answered no too."""
    ctx = make_context(store, prompter=Scripted(False))
    assert run_line(ctx, "system standby") == 0
    last = Machine(store).audit()[-1]
    assert (last.command, last.outcome, last.from_state, last.to_state) == (
        "system standby",
        "refused",
        "ACTIVE",
        "ACTIVE",
    )
    assert last.detail.startswith("answered no to")
    bob_chose_weight_streaming(store)
    root = make_context(store, prompter=Scripted(False))  # bob's change is unseen by root
    assert run_line(root, "system activate") == 0  # cancelled: nothing changed
    last = Machine(store).audit()[-1]
    assert (last.user, last.command, last.outcome) == ("root", "system activate", "refused")
    assert "Boot cs2-1 into Weight Streaming mode?" in last.detail


def test_a_denied_user_add_is_audited_with_its_role(store: Store) -> None:
    from shell_helpers import ALICE

    ctx = make_context(store, identity=ALICE)
    assert run_line(ctx, "user add mallory --role admin --password-file /nonexistent") == 77
    last = Machine(store).audit()[-1]
    assert (last.user, last.outcome) == ("alice", "denied")
    assert last.command == "user add mallory --role admin"


def test_a_forced_standby_is_audited_as_forced(store: Store) -> None:
    import os

    machine = Machine(store)
    root = make_context(store).identity
    job = machine.register_job(root, ExecMode.PIPELINED, "python run.py", os.getpid())
    assert run_line(make_context(store), "system standby --force --yes") == 0
    last = machine.audit()[-1]
    assert last.command == "system standby" and last.detail.startswith("forced: 1 job(s)")
    assert str(job.id) in last.detail


def test_a_job_stopped_by_a_forced_standby_has_one_end_everywhere(store: Store) -> None:
    """The run records itself CANCELLED and exits 75; the queue must not call it FAILED."""
    import json
    import os

    from cs2sim.system.sched import queue
    from cs2sim.system.sched.allocation import Allocation
    from cs2sim.system.sched.backend import EmbeddedBackend
    from cs2sim.system.sched.request import Component, JobRequest
    from cs2sim.system.sched.runner import StepResult

    nodes = queue.cluster_nodes(store)
    req = JobRequest((Component(1, 1, 1),), ("python", "run.py", "CSX"), name="run")
    qid = queue.submit(store, req, user="root", nodes=nodes)
    machine = Machine(store)
    root = make_context(store).identity
    machine.register_job(root, ExecMode.PIPELINED, "python run.py CSX", os.getpid(), job_id=qid)
    assert run_line(make_context(store), "system standby --force --yes") == 0
    machine.finish_job(qid, "CANCELLED")  # what the stopped run records
    placed = queue.state(store, qid).nodes
    EmbeddedBackend(store).release(Allocation(qid, placed, req), StepResult([], 75))
    ctx = make_context(store)
    assert run_line(ctx, "jobs show --all --output-format=json") == 0
    [job] = [j for j in json.loads(out(ctx)) if j["id"] == qid]
    assert (job["state"], job["exit_code"]) == ("CANCELLED", 75)
    ends = [e.detail for e in machine.audit() if e.command == "job end"]
    assert ends == [f"job {qid} CANCELLED"]


def test_system_show_names_a_launched_runs_nodes_as_jobs_show_does(store: Store) -> None:
    import json
    import os

    from cs2sim.system.sched import queue
    from cs2sim.system.sched.request import Component, JobRequest

    nodes = queue.cluster_nodes(store)
    req = JobRequest((Component(1, 1, 1), Component(2, 1, 1)), ("python", "run.py", "CSX"))
    qid = queue.submit(store, req, user="root", nodes=nodes)
    placed = [n for part in queue.state(store, qid).nodes for n in part]
    assert len(placed) == 3
    root = make_context(store).identity
    # the run registers itself on the CS-2 under its launch's id, without nodes
    Machine(store).register_job(
        root, ExecMode.PIPELINED, "python run.py CSX", os.getpid(), job_id=qid
    )
    ctx = make_context(store)
    assert run_line(ctx, "system show --output-format=json") == 0
    [running] = json.loads(out(ctx))["running_jobs"]
    assert running["id"] == qid and running["nodes"] == placed
    ctx = make_context(store)
    assert run_line(ctx, "system show | match python") == 0
    assert ",".join(placed) in out(ctx)
