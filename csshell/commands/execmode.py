"""`config execmode show|setup`: the execution mode, as in the Weight Streaming Quickstart,
Section 1 (docs/sources.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cs2sim.system.state import Action, ExecMode, State

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.machine import SystemStatus

__all__ = ["execmode_show", "execmode_setup", "execmode_withdraw", "mode_lines", "SETUP_MESSAGE"]

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
    """Record the configured mode (STANDBY only); it takes effect at `system activate`."""
    machine = ctx.machine
    machine.check(ctx.identity, Action.SETUP)  # refuse before showing the menu
    raw = inv.args.get("mode")
    if raw is not None:
        mode = ExecMode.parse(raw)
    else:
        current = machine.status().configured_mode
        options = [(m, f"{m.label} (current)" if m is current else m.label) for m in ExecMode]
        mode = ctx.prompter.choose(
            SETUP_MESSAGE,
            options,
            current,
            hint="name the mode: `config execmode setup weight-streaming` (or pipelined).",
        )
    machine.setup_execmode(ctx.identity, mode)
    ctx.saw_mode()
    on = f" (on {machine.name})" if machine.several else ""  # several systems: say which
    ctx.echo(f"Selected execution mode configuration: ✔ {mode.label}{on}")


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
