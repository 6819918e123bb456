"""`jobs show` and `jobs cancel`: the embedded scheduler's queue, as `squeue` and `scancel` show it.

With the Slurm backend (cluster.yaml `site: scheduler: slurm`, or CS2_SCHEDULER=slurm) the rows
are real squeue's and cancelling runs real scancel: the same columns either way.

Columns are squeue's default ones without PARTITION (one partition here): JOBID, NAME, USER,
ST, TIME, NODES, NODELIST(REASON). A heterogeneous job shows one row per component (`57+0`,
`57+1`, ...; Model Zoo's csrun_wse, docs/sources.md, ALCF's squeue); it is cancelled by its base id,
like scancel.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cs2sim.csshell.commands.jobinfo import slurm_backend
from cs2sim.csshell.context import Cancelled
from cs2sim.system.errors import UsageError

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.sched.queue import Listing, QueueJob

__all__ = ["jobs_show", "jobs_cancel", "JOBS_COLUMNS", "squeue_time", "queue_rows", "not_shown"]

JOBS_COLUMNS = ("JOBID", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)")
ST = {"PENDING": "PD", "RUNNING": "R", "COMPLETED": "CD", "FAILED": "F", "CANCELLED": "CA"}


def squeue_time(seconds: float) -> str:
    """squeue's TIME: M:SS, H:MM:SS, or D-HH:MM:SS."""
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{s:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{s:02d}"
    return f"{minutes}:{s:02d}"


def queue_rows(jobs: list[QueueJob], now: float, systems: bool = False) -> list[tuple[str, ...]]:
    """One row per job component, squeue style; with `systems`, a last column naming the CS-2
    systems the job holds (on its first component's row)."""
    from cs2sim.system.sched.hostlist import compress

    rows: list[tuple[str, ...]] = []
    for job in jobs:
        if job.state == "RUNNING" and job.started_at is not None:
            elapsed = now - job.started_at
        elif job.started_at is not None and job.ended_at is not None:
            elapsed = job.ended_at - job.started_at
        else:
            elapsed = 0.0
        for k, comp in enumerate(job.components):
            jobid = f"{job.id}+{k}" if job.het_size > 1 else str(job.id)
            if job.state == "PENDING":
                where = f"({job.reason or 'None'})"
            elif job.nodes and k < len(job.nodes):
                where = compress(list(job.nodes[k]))
            else:
                where = f"({job.reason})" if job.reason else ""
            row: tuple[str, ...] = (
                jobid,
                job.name,
                job.user,
                ST.get(job.state, job.state),
                squeue_time(elapsed),
                str(comp.nodes),
                where,
            )
            if systems:
                row += (",".join(job.systems) if k == 0 and job.systems else "-",)
            rows.append(row)
    return rows


DEFAULT_LIMIT = 200  # rows of `jobs show` for a script; JSON and the console's pager: every job


def _limit(ctx: Context, inv: Invocation, json_out: bool) -> int | None:
    raw = inv.option("limit")
    if raw is None:
        return None if json_out or ctx.interactive else DEFAULT_LIMIT
    if not (str(raw).isascii() and str(raw).isdigit()):
        raise UsageError(
            f"--limit {raw} is not a number of jobs; give one, e.g. --limit 50 (0 shows every job)."
        )
    return min(int(raw), 2**63 - 1) or None  # SQLite's largest LIMIT: more means "all"


def not_shown(listing: Listing, all_states: bool) -> str | None:
    """The line that says what `jobs show` left out, and how to see it (None: nothing)."""
    if not listing.hidden:
        return None
    parts = []
    if listing.hidden_pending:
        parts.append(f"{listing.hidden_pending} more pending")
    if listing.hidden_ended:
        parts.append(f"{listing.hidden_ended} older ended")
    return (
        f"... and {' and '.join(parts)} job(s) not shown; `jobs show"
        f"{' --all' if all_states else ''} --limit 0` lists them all."
    )


WATCH_S = 2.0  # `jobs show --watch` redraws this often, as `watch` does by default
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear the screen


def jobs_show(ctx: Context, inv: Invocation) -> None:
    """The queue, or one job in detail (`jobs show N`); `--watch` redraws the queue every
    2 s until Ctrl-C."""
    from cs2sim.csshell.commands.jobinfo import component_of, job_detail, job_id

    json_out = inv.option("output_format") == "json"
    if inv.args.get("id") is not None:
        if inv.option("watch") or inv.option("all") or inv.option("limit") is not None:
            raise UsageError(
                "`jobs show N` shows one job; --all, --limit and --watch are for "
                "the queue (`jobs show --watch`)."
            )
        raw = inv.args["id"]
        job_detail(ctx, job_id(raw), json_out, component_of(raw))
        return
    if not inv.option("watch"):
        _queue_show(ctx, inv)
        return
    if json_out:
        raise UsageError(
            "--watch redraws a table; for JSON, run `jobs show "
            "--output-format=json` when you need it."
        )
    try:
        while True:
            if ctx.is_terminal:
                ctx.out.write(CLEAR)
            ctx.echo(
                f"Every {WATCH_S:g} s: jobs show{' --all' if inv.option('all') else ''}"
                f"    {time.strftime('%H:%M:%S')}  (Ctrl-C stops)"
            )
            _queue_show(ctx, inv)
            ctx.flush()
            time.sleep(WATCH_S)
    except KeyboardInterrupt:
        # Ctrl-C is how --watch ends: said in words, and 130 to a script, as every interrupted
        # command (`system activate`) exits
        raise Cancelled("Stopped watching.") from None


def _queue_show(ctx: Context, inv: Invocation) -> None:
    """The queue: running launches, then pending ones in queue order (with --all, then ended
    ones, most recent first); a last line says how many were left out."""
    from cs2sim.system.sched.queue import arrange, listing

    all_states = bool(inv.option("all"))
    json_out = inv.option("output_format") == "json"
    limit = _limit(ctx, inv, json_out)
    slurm = slurm_backend(ctx)
    if slurm is not None:
        shown = arrange(slurm.queue(all_states=all_states), all_states=all_states, limit=limit)
    else:
        shown = listing(ctx.store, all_states=all_states, limit=limit)
    note = not_shown(shown, all_states)
    if json_out:
        import json

        from cs2sim.csshell.commands.jobinfo import job_data

        ctx.echo(json.dumps([job_data(j) for j in shown.jobs]), wrap=False)
        if note:
            ctx.warn(note)  # stdout stays one JSON document
        return
    if not shown.jobs and not note:
        ctx.echo("No jobs in the queue." if not all_states else "No jobs yet.")
        return
    if shown.jobs:  # a cluster of several CS-2s: which systems each job holds
        several = ctx.machine.several
        columns = JOBS_COLUMNS + (("SYSTEMS",) if several else ())
        ctx.table_out(columns, queue_rows(list(shown.jobs), time.time(), several))
    if note:
        ctx.echo(note)


def jobs_cancel(ctx: Context, inv: Invocation) -> None:
    """Cancel a queued or running launch by its id (the base id of a heterogeneous job)."""
    from cs2sim.csshell.commands.jobinfo import job_id
    from cs2sim.system.sched.queue import NotQueued, cancel
    from cs2sim.system.users import Role

    base = str(job_id(inv.args["id"]))
    slurm = slurm_backend(ctx)
    if slurm is not None:
        slurm.cancel(int(base), user=ctx.identity.name, admin=ctx.identity.role == Role.ADMIN)
        ctx.echo(f"Cancelled Slurm job {base} (scancel {base}: every component).")
        return
    admin = ctx.identity.role == Role.ADMIN
    try:
        job = cancel(ctx.store, int(base), user=ctx.identity.name, admin=admin)
    except NotQueued:
        # a job started without a launcher (run.py --cs_ip by hand): it has a system job id
        stopped = ctx.machine.cancel_job(ctx.identity, int(base))
        ctx.echo(
            f"Stopping job {stopped.id} ({stopped.user}: {stopped.command}) on "
            f"{stopped.system}: it stops as after Ctrl-C and records itself CANCELLED."
        )
        return
    if job.state == "PENDING":  # it held no nodes: say so, not "its nodes are free"
        ctx.echo(
            f"Cancelled job {job.id} (queued, {job.name}, {job.user}); it had not "
            "started, so no nodes were held."
        )
    else:
        ctx.echo(f"Cancelled job {job.id} (running, {job.name}, {job.user}); its nodes are free.")
