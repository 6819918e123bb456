"""`system show|status|standby|activate`: the system's state and its two changes."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from cs2sim.csshell.commands.execmode import LABEL_WIDTH, mode_lines
from cs2sim.csshell.context import Cancelled
from cs2sim.csshell.render import JOB_COLUMNS, ago, clock, job_dict, job_rows, seconds
from cs2sim.system.errors import RuntimeFailure
from cs2sim.system.state import Action, ExecMode, State

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.audit import AuditEntry
    from cs2sim.system.jobs import Job
    from cs2sim.system.machine import SystemStatus

__all__ = [
    "system_fault",
    "system_list",
    "system_use",
    "system_show",
    "system_standby",
    "system_activate",
    "STANDBY_QUESTION",
    "wait_active",
]

# the Weight Streaming Quickstart's words, exact
STANDBY_QUESTION = "This puts the system in standby. Do you want to proceed?"
POLL_S = 0.1  # how often the reboot wait re-reads the store


def _state_text(status: SystemStatus, now: float) -> str:
    text = f"{status.state} since {clock(status.state_since)} ({ago(status.state_since, now)})"
    left = status.ready_in(now)
    return text if left is None else f"{text}, ready in {seconds(left)}"


def system_show(ctx: Context, inv: Invocation) -> None:
    """State, modes, since when, running jobs and software version of the system."""
    status = ctx.machine.status()
    status = dataclasses.replace(
        status, running_jobs=tuple(_with_nodes(ctx, j) for j in status.running_jobs)
    )
    ctx.saw_mode()
    if inv.option("output_format") == "json":
        import json

        ctx.echo(
            json.dumps(
                {
                    "system": status.name,
                    "ip": status.ip,
                    "state": str(status.state),
                    "state_since": status.state_since,
                    "activating_until": status.activating_until,
                    "execmode": str(status.configured_mode),
                    "active_execmode": str(status.active_mode),
                    "pending_mode_change": status.pending_mode_change,
                    "fault_reason": status.fault_reason or None,
                    "software_version": status.software_version,
                    "running_jobs": [job_dict(j) for j in status.running_jobs],
                }
            ),
            wrap=False,
        )
        return
    now = time.time()
    label = f"{{:<{LABEL_WIDTH}}} : {{}}"
    ctx.echo(label.format("System", f"{status.name} ({status.ip})"))
    ctx.echo(label.format("State", _state_text(status, now)))
    for line in mode_lines(status):
        ctx.echo(line)
    if not status.pending_mode_change:
        ctx.echo(label.format("Active Execution Mode", status.active_mode))
    if status.fault_reason:
        ctx.echo(label.format("Fault", status.fault_reason))
    ctx.echo(label.format("Software Version", status.software_version))
    ctx.echo(label.format("Running Jobs", len(status.running_jobs) or "none"))
    if status.running_jobs:
        ctx.table_out(JOB_COLUMNS, job_rows(status.running_jobs))
    elif status.held_by is not None and ctx.machine.several:
        ctx.echo(
            label.format(
                "Reserved By", f"job {status.held_by} (a launch starting; `jobs show` lists it)"
            )
        )


def _with_nodes(ctx: Context, job: Job) -> Job:
    """A launched run's nodes: the run registers itself on the CS-2 without them, under its
    launch's id; the queue placed it, so `system show` names the nodes `jobs show` names."""
    if job.nodes:
        return job
    from cs2sim.system.errors import CsError
    from cs2sim.system.sched import queue

    try:
        launched = queue.state(ctx.store, job.id)
    except CsError:  # a run started by hand: no launch, no nodes
        return job
    nodes = tuple(n for part in launched.nodes for n in part)
    return dataclasses.replace(job, nodes=nodes) if nodes else job


LIST_COLUMNS = ("", "system", "ip", "state", "active mode", "configured mode", "job")


def system_list(ctx: Context, inv: Invocation) -> None:
    """Every CS-2 system of the cluster: state, modes and the job holding it (`*`: the one
    this session acts on)."""
    from cs2sim.system.machine import Machine, list_systems

    statuses = [Machine(ctx.store, name).status() for name in list_systems(ctx.store)]
    if inv.option("output_format") == "json":
        import json

        ctx.echo(
            json.dumps(
                [
                    {
                        "system": st.name,
                        "ip": st.ip,
                        "state": str(st.state),
                        "execmode": str(st.configured_mode),
                        "active_execmode": str(st.active_mode),
                        "job": st.held_by,
                        "current": st.name == ctx.machine.name,
                    }
                    for st in statuses
                ]
            ),
            wrap=False,
        )
        return
    now = time.time()
    rows = []
    for st in statuses:
        state = str(st.state)
        left = st.ready_in(now)
        if left is not None:
            state += f" (ready in {seconds(left)})"
        configured = str(st.configured_mode) + (" (at activate)" if st.pending_mode_change else "")
        rows.append(
            (
                "*" if st.name == ctx.machine.name else "",
                st.name,
                st.ip,
                state,
                str(st.active_mode),
                configured,
                "-" if st.held_by is None else str(st.held_by),
            )
        )
    ctx.table_out(LIST_COLUMNS, rows)


def system_use(ctx: Context, inv: Invocation) -> None:
    """Act on another system of the cluster from now on (as `cs --system NAME`)."""
    ctx.use_system(inv.args["name"])
    status = ctx.machine.status()
    ctx.echo(f"Now acting on {status.name} ({status.ip}): {status.state}, {status.active_mode}.")


def system_standby(ctx: Context, inv: Invocation) -> None:
    """Ask, then put the system in STANDBY (admin)."""
    machine = ctx.machine
    force = bool(inv.option("force"))
    machine.check(ctx.identity, Action.STANDBY, force=force)  # refuse before asking
    jobs = [_with_nodes(ctx, j) for j in machine.running_jobs()]  # as `system show` lists them
    if jobs:
        ctx.echo(
            f"{len(jobs)} job(s) running on {machine.name}; forced standby stops them at their "
            "next step (the checkpoints they have written are kept):"
        )
        ctx.table_out(JOB_COLUMNS, job_rows(jobs))
    if not ctx.confirm(STANDBY_QUESTION, "system standby", bool(inv.option("yes"))):
        machine.record_declined(ctx.identity, Action.STANDBY, STANDBY_QUESTION)  # audited too
        ctx.echo(f"Cancelled; {machine.name} stays {machine.status().state}.")
        return
    status = machine.standby(ctx.identity, force=force)
    ctx.echo(f"System {status.name} is in {status.state}.")


def system_activate(ctx: Context, inv: Invocation) -> None:
    """Reboot into the configured mode (admin) and wait until the system is ACTIVE.

    What is reported comes from the audit log, so the exit code agrees with it: the reboot
    completed (exit 0), even if another admin changed the state before this shell looked again
    (said, with who and when), or it did not (exit 1, naming what stopped it).
    """
    machine = ctx.machine
    machine.check(ctx.identity, Action.ACTIVATE)
    raw = inv.option("expect_mode")
    status = machine.status()
    mode = status.configured_mode
    origin = machine.mode_origin()
    if raw is not None:  # a script's assertion, checked inside the activation (refused: audited)
        started = machine.activate(ctx.identity, expect=ExecMode.parse(raw))
        ctx.echo(boot_plan(status, origin))
    else:
        ctx.echo(boot_plan(status, origin))
        if _unseen_change(ctx, origin) and not _go_ahead(ctx, origin, mode):
            machine.record_declined(
                ctx.identity, Action.ACTIVATE, f"Boot {machine.name} into {mode.label} mode?"
            )
            ctx.echo(
                f"Cancelled; nothing was changed ({machine.name} stays {machine.status().state})."
            )
            return
        # what was announced is what boots: a change made meanwhile is refused, not booted
        started = machine.activate(ctx.identity, expect=mode)
    ctx.seen_mode = origin.id if origin is not None else 0
    status = wait_active(ctx, started)
    if started.audit_id is None:  # unreachable: an allowed activation always writes its row
        raise RuntimeFailure("The activation left no audit row; run `audit show` to check.")
    outcome = machine.boot_outcome(started.audit_id)
    if outcome.booted is None:
        stopped = outcome.since[0] if outcome.since else None
        why = (
            f"{stopped.user} put {machine.name} in {stopped.to_state} at {clock(stopped.at)}"
            f" (`{stopped.command}`)"
            if stopped
            else f"{machine.name} is {status.state} now"
        )
        raise RuntimeFailure(
            f"The reboot did not complete: {why}; run `system show` and `audit show` to see why."
        )
    mode = ExecMode(started.configured_mode)  # what it booted into (setup needs STANDBY)
    if not outcome.since:
        which = f" {machine.name}" if machine.several else ""  # several systems: say which
        ctx.echo(f"System{which} activated in {mode.label} mode.")
        return
    then = outcome.since[0]
    more = len(outcome.since) - 1
    ctx.echo(
        f"System {machine.name} booted into {mode.label} mode at {clock(outcome.booted.at)}; "
        f"then {then.user} put it in {then.to_state} at {clock(then.at)} (`{then.command}`)"
        + (f", and it changed {more} more time(s) since (see `audit show`)." if more else ".")
    )


def boot_plan(status: SystemStatus, origin: AuditEntry | None) -> str:
    """`cs2-1 will boot into Weight Streaming mode (now Pipelined), as configured by alice at
    ...`: what `system activate` is about to do, and who decided it."""
    mode, active = status.configured_mode, status.active_mode
    change = f"now {active.label}" if mode is not active else "no mode change"
    if origin is None:
        who = "as the cluster description sets it (never changed with `config execmode setup`)"
    else:
        who = f"as configured by {origin.user} at {clock(origin.at)}"
    return f"{status.name} will boot into {mode.label} mode ({change}), {who}."


def _unseen_change(ctx: Context, origin: AuditEntry | None) -> bool:
    """Whether another account set the configured mode since this session last showed it (a
    session that showed nothing yet: since the system's last activation)."""
    if origin is None or origin.user == ctx.identity.name:
        return False
    if ctx.seen_mode is not None:
        return origin.id > ctx.seen_mode
    last = ctx.machine.last_activation()
    return last is None or origin.id > last.id


def _go_ahead(ctx: Context, origin: AuditEntry | None, mode: ExecMode) -> bool:
    """Another account's unseen change: ask on a terminal (default no), warn a script."""
    assert origin is not None
    warning = (
        f"{origin.user} set the configured mode to {mode} at {clock(origin.at)}, after this "
        "session last showed it"
    )
    if ctx.can_ask and not ctx.assume_yes:
        ctx.echo(f"Note: {warning}.")
        return ctx.confirm(f"Boot {ctx.machine.name} into {mode.label} mode?", "system activate")
    ctx.warn(
        f"{warning}; booting into it (add --expect-mode {_mode_word(mode)} to refuse "
        "instead when it is not the mode you expect)."
    )
    return True


def _mode_word(mode: ExecMode) -> str:
    return mode.label.lower().replace(" ", "-")


def system_fault(ctx: Context, inv: Invocation) -> None:
    """Put the system in FAULT for a rehearsal (admin); `system standby` clears it."""
    status = ctx.machine.inject_fault(ctx.identity, inv.args.get("reason", ""))
    ctx.echo(
        f"System {status.name} is in {status.state}: {status.fault_reason}. "
        "Recover with `system standby`, then `system activate`."
    )


def wait_active(ctx: Context, status: SystemStatus) -> SystemStatus:
    """Poll the store until this reboot is over (a progress bar on a terminal); Ctrl-C stops.

    Returns the first status after it: normally ACTIVE, but another admin may have changed the
    state meanwhile (the caller asks the audit log what happened)."""
    machine = ctx.machine
    try:
        if _rebooting(status, status):
            status = _wait_with_progress(ctx, status) if ctx.is_terminal else _wait(ctx, status)
    except KeyboardInterrupt:
        left = status.ready_in() or 0.0
        raise Cancelled(
            f"Stopped waiting; {machine.name} keeps rebooting (the reboot does not need this "
            f"shell) and will be ACTIVE in about {seconds(left)}; run `system show` to check."
        ) from None
    return status


def _rebooting(status: SystemStatus, started: SystemStatus) -> bool:
    """Still in the reboot that `started` began (not a later one another admin started)."""
    return status.state is State.ACTIVATING and status.activating_until == started.activating_until


def _sleep_until(until: float | None) -> None:
    left = (until or 0.0) - time.time()
    time.sleep(min(POLL_S, max(0.01, left)))


def _wait(ctx: Context, status: SystemStatus) -> SystemStatus:
    started = status
    while _rebooting(status, started):
        _sleep_until(status.activating_until)
        status = ctx.machine.status()
    return status


def _wait_with_progress(ctx: Context, status: SystemStatus) -> SystemStatus:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

    start = time.time()
    total = max(1e-3, (status.activating_until or start) - start)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[left]}"),
    )
    with Progress(*columns, console=ctx.console, transient=True) as progress:
        task = progress.add_task(
            f"Rebooting {status.name} into {status.configured_mode.label} mode",
            total=total,
            left="",
        )
        started = status
        while _rebooting(status, started):
            now = time.time()
            left = status.ready_in(now) or 0.0
            progress.update(task, completed=min(total, now - start), left=f"ready in {left:.1f} s")
            _sleep_until(status.activating_until)
            status = ctx.machine.status()
        progress.update(task, completed=total, left="")
    return status
