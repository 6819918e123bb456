"""One job in detail (`jobs show N`) and its task logs (`jobs log N`).

A launched job's tasks write `$CS2_HOME/slurm/<job>/task-<procid>.log` (a member of a shared
store: under its own temporary directory, as the launcher writes them); `jobs log` reads them,
the last lines only with `--tail`, and with `--follow` keeps printing what is appended until the
job ends (or Ctrl-C). Several tasks' lines carry the task id first, as `srun --label` does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs2sim.csshell.render import clock, kv_lines, seconds
from cs2sim.system.errors import NoSuchJob, UsageError
from cs2sim.system.paths import user_tmp_dirs
from cs2sim.system.safeopen import open_regular

if TYPE_CHECKING:
    from cs2sim.csshell.context import Context
    from cs2sim.csshell.table import Invocation
    from cs2sim.system.sched.queue import QueueJob
    from cs2sim.system.sched.slurm import SlurmBackend

__all__ = [
    "slurm_backend",
    "find_job",
    "job_data",
    "job_detail",
    "jobs_log",
    "job_id",
    "log_dir",
    "component_roles",
]

FOLLOW_POLL_S = 0.2
MAX_LOG_BYTES = 8 * 2**20  # a whole log shown at most this much (its end); --tail reads less


def job_id(raw: str) -> int:
    """The base id of `12` or `12+0`; a usage error for anything else."""
    base = raw.split("+", 1)[0]
    if not (base.isascii() and base.isdigit()):
        raise UsageError(f"`{raw}` is not a job id; take one from `jobs show` (e.g. 12 or 12+0).")
    if int(base) >= 2**63:  # beyond SQLite's integers: no such job can exist
        raise NoSuchJob(f"No job {base}; see the queue with `jobs show`.")
    return int(base)


def slurm_backend(ctx: Context) -> SlurmBackend | None:
    """The Slurm backend when the site (or $CS2_SCHEDULER) runs launches on Slurm, else None:
    then the queue is squeue's and cancelling is scancel's, shown with the same columns."""
    from cs2sim.system.cluster import cluster_source, load_cluster
    from cs2sim.system.sched.backend import scheduler_name

    if scheduler_name(load_cluster(cluster_source(ctx.store.home)).site) != "slurm":
        return None
    from cs2sim.system.sched.slurm import SlurmBackend

    return SlurmBackend(ctx.store)


def find_job(ctx: Context, number: int) -> QueueJob:
    """The launch `number`: from squeue with the Slurm backend, else from the embedded queue."""
    from cs2sim.system.sched import queue

    slurm = slurm_backend(ctx)
    if slurm is None:
        return queue.state(ctx.store, number)
    for job in slurm.queue(all_states=True):
        if job.id == number:
            return job
    raise NoSuchJob(f"No job {number} in Slurm's queue; see `jobs show --all`.")


def job_data(job: QueueJob) -> dict[str, Any]:
    """A queue job as JSON-ready data (`jobs show --output-format=json`, `jobs show N`)."""
    return {
        "id": job.id,
        "components": job.het_size,
        "name": job.name,
        "user": job.user,
        "state": job.state,
        # the queue keeps Slurm's word "None" for "no reason"; JSON says null
        "reason": job.reason if job.reason not in ("", "None") else None,
        "nodes": [list(p) for p in job.nodes],
        "node_count": job.node_count,
        "command": job.command,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "exit_code": job.exit_code,
        "launcher_pid": job.pid,
        "host": job.host,
        "systems": list(job.systems),
    }


def component_roles(job: QueueJob) -> list[str]:
    """What each component of a csrun_wse job runs, from its task counts (as the tasks find
    their roles): task 0 is the chief; the tasks of a component of several tasks are input
    streamers; a one-task component after the first is a coordinator."""
    roles = []
    for k, comp in enumerate(job.components):
        if k == 0:
            roles.append("chief" + (" + streamers" if comp.ntasks > 1 else ""))
        else:
            roles.append("streamers" if comp.ntasks > 1 else "coordinator")
    return roles


def component_of(raw: str) -> int | None:
    """K of a component id `12+K` (as squeue shows a heterogeneous job's rows); None for `12`.
    The base has been checked by job_id."""
    if "+" not in raw:
        return None
    k = raw.split("+", 1)[1]
    if not (k.isascii() and k.isdigit() and len(k) < 10):
        raise UsageError(f"`{raw}` is not a job id; take one from `jobs show` (e.g. 12 or 12+0).")
    return int(k)


def job_detail(ctx: Context, number: int, json_out: bool, component: int | None = None) -> None:
    """Everything about one job: command, user, systems, nodes per component, times, exit.
    A component id (`12+1`) must name one of the job's components; the whole job is shown."""
    from cs2sim.system.sched.hostlist import compress

    job = find_job(ctx, number)
    if component is not None and component >= job.het_size:
        have = ", ".join(f"{number}+{k}" for k in range(job.het_size))
        raise NoSuchJob(
            f"No job {number}+{component}: job {number} has {job.het_size} component(s)"
            f" ({have}); see `jobs show {number}`."
        )
    folder = log_dir(ctx, number)
    logs = sorted(folder.glob("task-*.log")) if folder is not None else []
    if json_out:
        import json

        data = job_data(job)
        data["roles"] = component_roles(job)
        data["logs"] = [str(p) for p in logs]
        ctx.echo(json.dumps(data), wrap=False)
        return
    now = time.time()
    state = job.state
    if job.state == "RUNNING" and job.started_at is not None:
        state += f" for {seconds(now - job.started_at)}"
    elif job.started_at is not None and job.ended_at is not None:
        state += f" after {seconds(job.ended_at - job.started_at)}"
    pairs = [
        ("Job", f"{job.id} ({job.name})"),
        ("State", state),
        ("Reason", job.reason if job.reason not in ("", "None") else "-"),
        ("User", job.user),
        ("Command", job.command),
        ("Systems", ", ".join(job.systems) or "-"),
        ("Submitted", clock(job.submitted_at)),
        ("Started", clock(job.started_at)),
        ("Ended", clock(job.ended_at)),
        ("Exit code", "-" if job.exit_code is None else str(job.exit_code)),
        ("Launcher", f"pid {job.pid} on {job.host}"),
    ]
    for k, (comp, role) in enumerate(zip(job.components, component_roles(job), strict=True)):
        where = compress(list(job.nodes[k])) if k < len(job.nodes) and job.nodes[k] else "-"
        label = f"Nodes {job.id}+{k}" if job.het_size > 1 else "Nodes"
        pairs.append(
            (label, f"{where} ({comp.nodes} node(s) x {comp.tasks_per_node} task(s): {role})")
        )
    pairs.append(
        (
            "Logs",
            f"{folder}/ ({len(logs)} task log(s): `jobs log {job.id}`)" if logs else "none yet",
        )
    )
    for line in kv_lines(pairs):
        ctx.echo(line)


def log_dir(ctx: Context, number: int) -> Path | None:
    """Where job `number`'s task logs are, if anywhere."""
    roots = [Path(ctx.store.home) / "slurm"]
    if getattr(ctx.store, "remote", None) is not None:  # only this user's own places
        roots += [d / "slurm" for d in user_tmp_dirs("cs2sim")]
    for root in roots:
        if (root / str(number)).is_dir():
            return root / str(number)
    return None


def _tail(path: Path, lines: int | None) -> tuple[list[str], int]:
    """The last `lines` lines of `path` (all, up to MAX_LOG_BYTES, for None), and the offset
    its end was at."""
    with open_regular(path, [path.parent.stat().st_uid]) as f:  # never a FIFO or another's
        end = f.seek(0, os.SEEK_END)
        want = MAX_LOG_BYTES if lines is None else min(MAX_LOG_BYTES, 4096)
        while True:
            start = max(0, end - want)
            f.seek(start)
            data = f.read(end - start)
            if lines is None or start == 0 or data.count(b"\n") > lines:
                break
            want *= 4
    text = data.decode("utf-8", "replace").splitlines()
    if start > 0:
        text = text[1:]  # a line cut by the start of what was read
    return (text if lines is None else text[-lines:] if lines else []), end


def jobs_log(ctx: Context, inv: Invocation) -> None:
    """Print a job's task logs (every task, or --task K), --tail N lines, --follow."""
    number = job_id(inv.args["id"])
    job = find_job(ctx, number)
    folder = log_dir(ctx, number)
    logs = (
        {int(p.stem.split("-", 1)[1]): p for p in folder.glob("task-*.log")}
        if folder is not None
        else {}
    )
    task = inv.option("task")
    if task is not None:
        if not (task.isascii() and task.isdigit()):
            raise UsageError(f"--task {task} is not a task id; give one, e.g. --task 0.")
        if int(task) not in logs:
            have = ", ".join(map(str, sorted(logs))) or "none"
            raise NoSuchJob(f"Job {number} has no log of task {task} (task logs: {have}).")
        logs = {int(task): logs[int(task)]}
    tail = inv.option("tail")
    if tail is not None and not (tail.isascii() and tail.isdigit()):
        raise UsageError(f"--tail {tail} is not a number of lines; e.g. --tail 20.")
    if not logs:
        ctx.echo(f"Job {number} has no task logs yet ({job.state}).")
        if not inv.option("follow"):
            return
    label = len(logs) > 1
    ends: dict[int, int] = {}
    for k, path in sorted(logs.items()):
        lines, ends[k] = _tail(path, None if tail is None else int(tail))
        for line in lines:
            ctx.echo(f"{k}: {line}" if label else line, wrap=False)
    if inv.option("follow"):
        _follow(ctx, number, folder, ends, task, label)


def _follow(
    ctx: Context,
    number: int,
    folder: Path | None,
    ends: dict[int, int],
    task: str | None,
    label: bool,
) -> None:
    """Print what the tasks append until the job has ended and nothing more comes; Ctrl-C
    stops following (the job goes on)."""
    from cs2sim.system.sched import queue

    partial: dict[int, bytes] = {}
    try:
        while True:
            ended = queue.state(ctx.store, number).state not in ("PENDING", "RUNNING")
            folder = folder or log_dir(ctx, number)
            paths = (
                {int(p.stem.split("-", 1)[1]): p for p in folder.glob("task-*.log")}
                if folder is not None
                else {}
            )
            if task is not None:
                paths = {k: p for k, p in paths.items() if str(k) == task}
            for k, path in sorted(paths.items()):
                with open_regular(path, [path.parent.stat().st_uid]) as f:
                    f.seek(ends.get(k, 0))
                    data = partial.pop(k, b"") + f.read()
                    ends[k] = f.tell()
                *complete, rest = data.split(b"\n")
                if rest:
                    partial[k] = rest
                for raw in complete:
                    line = raw.decode("utf-8", "replace")
                    ctx.echo(f"{k}: {line}" if label or len(paths) > 1 else line, wrap=False)
            if ended:
                break
            time.sleep(FOLLOW_POLL_S)
    except KeyboardInterrupt:
        ctx.echo(f"Stopped following; job {number} goes on (`jobs show {number}`).")
