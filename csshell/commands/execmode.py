"""`config execmode show|setup`: the execution mode, as in the Weight Streaming Quickstart,
Section 1 (docs/sources.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cs2sim.system.state import Action, ExecMode, State

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.audit import AuditEntry
    from cs2sim.system.machine import SystemStatus

__all__ = [
    "execmode_show",
    "execmode_setup",
    "menu_options",
    "execmode_withdraw",
    "mode_lines",
    "SETUP_MESSAGE",
]

SETUP_MESSAGE = "Select the execution mode:"
LABEL_WIDTH = len("Configured Execution Mode")  # the Quickstart's label sets the column


def mode_lines(status: SystemStatus) -> list[str]:
    """`Configured Execution Mode : X`, plus the active mode while a change is pending."""
    lines = [f"{'Configured Execution Mode':<{LABEL_WIDTH}} : {status.configured_mode}"]
    if status.pending_mode_change:
        if status.state is State.ACTIVATING:
            when = "once the reboot in progress completes"
        else:
            when = "at the next `system activate`"
        lines.append(
            f"{'Active Execution Mode':<{LABEL_WIDTH}} : {status.active_mode} "
            f"({status.configured_mode} takes effect {when})"
        )
    return lines


def execmode_show(ctx: Context, inv: Invocation) -> None:
    """Print the configured mode (and the active one while a change is pending)."""
    status = ctx.machine.status()
    origin = ctx.machine.mode_origin()
    ctx.saw_mode()
    if inv.option("output_format") == "json":
        import json

        ctx.echo(
            json.dumps(
                {
                    "execmode": str(status.configured_mode),
                    "active_execmode": str(status.active_mode),
                    "pending_mode_change": status.pending_mode_change,
                    "system": status.name,
                    "state": str(status.state),
                    "configured_by": origin.user if origin else None,
                    "configured_at": origin.at if origin else None,
                }
            ),
            wrap=False,
        )
        return
    if ctx.machine.several:  # a cluster of several CS-2s: say which system's mode this is
        ctx.echo(f"{'System':<{LABEL_WIDTH}} : {status.name} ({status.ip})")
    for line in mode_lines(status):
        ctx.echo(line)


def execmode_setup(ctx: Context, inv: Invocation) -> None:
    """Record the configured mode (STANDBY only); it takes effect at `system activate`.

    Another admin's pending choice is never replaced silently: on a terminal the menu shows it
    as theirs and a different choice is asked about; a script is refused unless it says
    `--yes`."""
    machine = ctx.machine
    machine.check(ctx.identity, Action.SETUP)  # refuse before showing the menu
    status = machine.status()
    origin = machine.mode_origin()
    theirs = status.pending_mode_change and origin is not None and origin.user != ctx.identity.name
    raw = inv.args.get("mode")
    if raw is not None:
        mode = ExecMode.parse(raw)
    else:
        mode = ctx.prompter.choose(
            SETUP_MESSAGE,
            menu_options(status, origin.user if theirs and origin else None),
            status.configured_mode,
            hint="name the mode: `config execmode setup weight-streaming` (or pipelined).",
        )
    replace = bool(inv.option("yes") or ctx.assume_yes)
    if theirs and origin is not None and mode is not status.configured_mode and not replace:
        replace = _ask_to_replace(ctx, status, origin, mode)
    # without a yes, the system refuses (and audits) replacing another's choice, also one
    # made between this check and the change
    machine.setup_execmode(ctx.identity, mode, keep_others=not replace)
    ctx.saw_mode()
    on = f" (on {machine.name})" if machine.several else ""  # several systems: say which
    ctx.echo(f"Selected execution mode configuration: ✔ {mode.label}{on}")


def menu_options(status: SystemStatus, pending_by: str | None) -> list[tuple[ExecMode, str]]:
    """The menu's rows: with no change pending, the mode is `(current)`; with one pending, the
    mode the system runs is `(active)` and the pending one says so and, when another account
    chose it, whose it is (it is nobody's "current" mode)."""
    if not status.pending_mode_change:  # configured = active: the one mode it runs
        return [
            (m, f"{m.label} (current)" if m is status.active_mode else m.label) for m in ExecMode
        ]
    options = []
    for m in ExecMode:
        notes = []
        if m is status.active_mode:
            notes.append("active")
        if m is status.configured_mode:
            notes.append(f"pending, chosen by {pending_by}" if pending_by else "pending")
        options.append((m, f"{m.label} ({', '.join(notes)})" if notes else m.label))
    return options


def _ask_to_replace(ctx: Context, status: SystemStatus, origin: AuditEntry, mode: ExecMode) -> bool:
    """Another admin chose a different pending mode: on a terminal, ask (a "no" is audited and
    cancels); a script gets False (the system then refuses, audited)."""
    from cs2sim.csshell.context import Cancelled
    from cs2sim.csshell.render import clock

    if not ctx.can_ask:
        return False
    ctx.echo(
        f"Note: {origin.user} chose {status.configured_mode.label} at {clock(origin.at)} "
        "(pending until `system activate`)."
    )
    question = f"Replace it with {mode.label}?"
    if ctx.prompter.confirm(question, "config execmode setup"):
        return True
    ctx.machine.record_declined(ctx.identity, Action.SETUP, question)
    raise Cancelled(
        f"Cancelled; {status.configured_mode.label} stays configured, as {origin.user} chose."
    )


def execmode_withdraw(ctx: Context, inv: Invocation) -> None:
    """Take back a pending mode change (STANDBY only; admin): the active mode is configured
    again, so the next `system activate` boots into the mode the system already runs."""
    machine = ctx.machine
    before = machine.status()
    origin = machine.mode_origin()
    machine.withdraw_execmode(ctx.identity)  # refused (audited) when nothing is pending
    ctx.saw_mode()
    by = f" (set by {origin.user})" if origin is not None else ""
    ctx.echo(
        f"Withdrew the pending change to {before.configured_mode.label}{by}; {machine.name} "
        f"is configured for {before.active_mode.label} again, the mode it runs in."
    )
