"""Command handlers in-process: injected output (rich Console on StringIO) and a scripted
prompter; assertions on the text a user reads and on the store, never on terminal bytes."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from shell_helpers import ALICE, Scripted, err, make_context, out, write_password

from cs2sim.csshell.commands import system as cmd_system
from cs2sim.csshell.commands.system import STANDBY_QUESTION
from cs2sim.csshell.context import ExitShell
from cs2sim.csshell.dispatch import run_line
from cs2sim.system.machine import Machine
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import Store


def status(store: Store):
    return Machine(store).status()


def test_the_quickstarts_section_1_in_process(store: Store) -> None:
    """The Weight Streaming Quickstart's five steps, with its exact strings."""
    prompter = Scripted(True, ExecMode.WEIGHT_STREAMING)
    ctx = make_context(store, prompter=prompter, interactive=True)

    assert run_line(ctx, "config execmode show") == 0
    assert out(ctx) == "Configured Execution Mode : PIPELINED\n"

    assert run_line(ctx, "system standby") == 0
    assert prompter.asked == ["This puts the system in standby. Do you want to proceed?"]
    assert status(store).state is State.STANDBY

    assert run_line(ctx, "config execmode setup") == 0
    assert prompter.default is ExecMode.PIPELINED  # the current mode is preselected
    assert [v for v, _ in prompter.options] == [ExecMode.PIPELINED, ExecMode.WEIGHT_STREAMING]
    assert out(ctx).endswith("Selected execution mode configuration: ✔ Weight Streaming\n")

    assert run_line(ctx, "system activate") == 0
    assert out(ctx).endswith("System activated in Weight Streaming mode.\n")

    ctx.out.truncate(0), ctx.out.seek(0)
    assert run_line(ctx, "config execmode show") == 0
    assert out(ctx) == "Configured Execution Mode : WEIGHT_STREAMING\n"
    assert err(ctx) == ""


def test_pending_change_is_shown_as_pending(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "system standby --yes; config execmode setup weight-streaming") == 0
    ctx.out.truncate(0), ctx.out.seek(0)
    run_line(ctx, "config execmode show")
    first, second = out(ctx).splitlines()
    assert first == "Configured Execution Mode : WEIGHT_STREAMING"
    assert second == (
        "Active Execution Mode     : PIPELINED (WEIGHT_STREAMING takes effect "
        "at the next `system activate`)"
    )


def test_json_output(store: Store) -> None:
    ctx = make_context(store)
    run_line(ctx, "config execmode show --output-format=json")
    data = json.loads(out(ctx))
    assert data["execmode"] == "PIPELINED"
    assert data["pending_mode_change"] is False
    ctx.out.truncate(0), ctx.out.seek(0)
    run_line(ctx, "system show --output-format=json")
    data = json.loads(out(ctx))
    assert data["state"] == "ACTIVE" and data["execmode"] == "PIPELINED"
    assert data["running_jobs"] == [] and data["software_version"].startswith("1.4.0-")


def test_setup_refused_when_active_before_the_menu(store: Store) -> None:
    prompter = Scripted(ExecMode.WEIGHT_STREAMING)
    ctx = make_context(store, prompter=prompter, interactive=True)
    assert run_line(ctx, "config execmode setup") == 1
    assert prompter.asked == []  # refused before showing the menu
    assert err(ctx) == (
        "error: Execution mode can only be changed in STANDBY; run `system standby` first.\n"
    )
    assert status(store).configured_mode is ExecMode.PIPELINED


def test_non_admin_refused_before_the_question_and_audited(store: Store) -> None:
    prompter = Scripted(True)
    ctx = make_context(store, identity=ALICE, prompter=prompter)
    assert run_line(ctx, "system standby") == 77
    assert prompter.asked == []
    assert err(ctx).startswith("error: Permission denied: `system standby` needs the admin role")
    assert status(store).state is State.ACTIVE
    last = Machine(store).audit(last=1)[0]
    assert (last.user, last.command, last.outcome) == ("alice", "system standby", "denied")


def test_standby_answer_no_changes_nothing(store: Store) -> None:
    ctx = make_context(store, prompter=Scripted(False))
    assert run_line(ctx, "system standby") == 0
    assert "Cancelled; cs2-1 stays ACTIVE." in out(ctx)
    assert status(store).state is State.ACTIVE


def test_standby_lists_running_jobs_first(store: Store) -> None:
    admin = make_context(store).identity
    Machine(store).register_job(admin, ExecMode.PIPELINED, "python run.py", os.getpid())
    prompter = Scripted(False)
    ctx = make_context(store, prompter=prompter)
    assert run_line(ctx, "system standby") != 0  # refused while a job runs, before asking
    assert "system standby --force" in err(ctx) and prompter.asked == []
    run_line(ctx, "system standby --force")
    text = out(ctx)
    assert "1 job(s) running on cs2-1" in text and "python run.py" in text
    assert prompter.asked == [STANDBY_QUESTION]
    assert status(store).state is State.ACTIVE  # answered no


def test_non_interactive_confirmation_needs_yes(store: Store) -> None:
    ctx = make_context(store)  # ScriptPrompter: nobody to ask
    assert run_line(ctx, "system standby") == 2
    assert "add --yes" in err(ctx)
    assert status(store).state is State.ACTIVE
    assert run_line(make_context(store, assume_yes=True), "system standby") == 0  # cs --yes
    assert status(store).state is State.STANDBY


def test_non_interactive_setup_needs_the_mode(store: Store) -> None:
    ctx = make_context(store)
    run_line(ctx, "system standby --yes")
    assert run_line(ctx, "config execmode setup") == 2
    assert "config execmode setup weight-streaming" in err(ctx)
    assert run_line(ctx, "config execmode setup ws") == 0
    assert status(store).configured_mode is ExecMode.WEIGHT_STREAMING


def test_activate_waits_for_the_reboot(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0.3")
    ctx = make_context(store)
    run_line(ctx, "system standby --yes")
    assert run_line(ctx, "system activate") == 0
    assert out(ctx).splitlines()[-1] == "System activated in Pipelined mode."
    assert status(store).state is State.ACTIVE


def test_ctrl_c_while_waiting_leaves_the_reboot_running(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CS2_BOOT_SECONDS", "60")
    ctx = make_context(store)
    run_line(ctx, "system standby --yes")

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cmd_system.time, "sleep", interrupt)
    assert run_line(ctx, "system activate") == 130
    assert "keeps rebooting" in out(ctx) and "system show" in out(ctx)
    assert status(store).state is State.ACTIVATING


def test_user_accounts(store: Store, tmp_path: Path) -> None:
    ctx = make_context(store, prompter=Scripted("s3cret", "s3cret"), interactive=True)
    assert run_line(ctx, "user add alice --role user") == 0
    pw = write_password(tmp_path / "pw", "other")
    assert run_line(ctx, f"user add bob --role admin --password-file {pw}") == 0
    ctx.out.truncate(0), ctx.out.seek(0)
    run_line(ctx, "user list")
    table = out(ctx)
    assert "alice" in table and "bob" in table and "admin" in table

    from cs2sim.system.users import authenticate

    assert authenticate(store, "alice", "s3cret").role == "user"
    assert authenticate(store, "bob", "other").role == "admin"
    assert run_line(ctx, "user remove bob") == 0


def test_user_add_passwords_must_match(store: Store) -> None:
    ctx = make_context(store, prompter=Scripted("one", "two"), interactive=True)
    assert run_line(ctx, "user add alice") == 2
    assert "the two passwords differ" in err(ctx)


def test_user_add_by_non_admin_refused_before_asking(store: Store) -> None:
    prompter = Scripted("x", "x")
    ctx = make_context(store, identity=ALICE, prompter=prompter)
    assert run_line(ctx, "user add mallory") == 77
    assert prompter.asked == []


def test_password_file_must_be_private(store: Store, tmp_path: Path) -> None:
    pw = write_password(tmp_path / "pw", "x", mode=0o644)
    ctx = make_context(store)
    assert run_line(ctx, f"user add carol --password-file {pw}") == 2
    assert "chmod 600" in err(ctx)


def test_help_software_audit(store: Store) -> None:
    ctx = make_context(store)
    run_line(ctx, "help")
    assert "config execmode show [--output-format=json|text]" in out(ctx)
    run_line(ctx, "help config execmode setup")
    assert "Choose the execution mode" in out(ctx)
    run_line(ctx, "software show")
    assert "firmware : faraday (Pipelined)" in out(ctx)
    run_line(ctx, "system standby --yes")
    ctx.out.truncate(0), ctx.out.seek(0)
    run_line(ctx, "audit show --last 1")
    assert "system standby" in out(ctx) and "ACTIVE" in out(ctx) and "STANDBY" in out(ctx)
    assert run_line(ctx, "audit show --last x") == 2


def test_system_show_text(store: Store) -> None:
    ctx = make_context(store)
    run_line(ctx, "system show")
    lines = out(ctx).splitlines()
    assert lines[0] == "System                    : cs2-1 (127.0.1.1)"
    assert lines[1].startswith("State                     : ACTIVE since ")
    assert "Configured Execution Mode : PIPELINED" in lines
    assert "Running Jobs              : none" in lines


def test_fault_rehearsal_and_recovery(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "system fault fan 3 stopped") == 0
    assert status(store).state is State.FAULT
    assert run_line(ctx, "system show") == 0
    assert "Fault                     : fan 3 stopped" in out(ctx)
    assert run_line(ctx, "system activate") == 1
    assert "run `system standby` first" in err(ctx)
    assert run_line(ctx, "system standby --yes; system activate") == 0
    assert status(store).state is State.ACTIVE


def test_stops_at_first_error_and_exit_raises(store: Store) -> None:
    ctx = make_context(store)
    assert run_line(ctx, "sytem show; config execmode show") == 2
    assert out(ctx) == ""  # the second command did not run
    with pytest.raises(ExitShell):
        run_line(ctx, "config execmode show; exit")


def test_unexpected_exception_is_one_sentence(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_context(store)

    def broken() -> None:
        raise ZeroDivisionError("boom\nsecond line")

    monkeypatch.setattr(ctx.machine, "status", broken)
    assert run_line(ctx, "system show") == 70
    assert err(ctx) == (
        "error: internal error: ZeroDivisionError: boom second line; "
        "rerun with --traceback and report it.\n"
    )


@pytest.mark.parametrize("last", ["99999999999999999999999", "²", "-1", "1.5"])
def test_audit_last_is_checked_never_an_internal_error(store: Store, last: str) -> None:
    ctx = make_context(store)
    code = run_line(ctx, f"audit show --last {last}")
    if last.isascii() and last.isdigit():  # a huge count means "all of them"
        assert (code, err(ctx)) == (0, "")
    else:
        assert code == 2 and err(ctx).startswith("error: `--last` must be a whole number")


def test_user_add_checks_the_name_before_asking_a_password(store: Store) -> None:
    prompter = Scripted("x", "x")
    ctx = make_context(store, prompter=prompter)
    assert run_line(ctx, "user add BAD!") == 2
    assert prompter.asked == [] and "Invalid user name 'BAD!'" in err(ctx)


class _Terminal(io.StringIO):
    """Output that says it is a terminal (so tables are drawn for a person)."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("width", [40, 200])
def test_a_table_on_a_narrow_terminal_keeps_every_value(store: Store, width: int) -> None:
    ctx = make_context(store, console=Console(file=_Terminal(), width=width, color_system=None))
    assert run_line(ctx, "system fault fan 3 stopped; audit show") == 0
    text = out(ctx)
    for value in ("root", "system fault", "ACTIVE → FAULT", "ok", "fan 3 stopped"):
        assert value.replace("root", ctx.identity.name) in text, text
    if width == 40:  # one `column : value` block per row instead of a shrunken table
        assert "outcome : ok" in text.splitlines()
        assert "───" not in text
