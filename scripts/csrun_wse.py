"""`csrun_wse`: run a command on the CS-2 through a heterogeneous job on the support cluster.

Thin: the flags, texts and the srun line are system/sched/flags.py's; allocation and the tasks
are the backend's (system/sched/backend.py). This file prints, in the real script's order: the
WARN / INFO lines, `Launching: <srun line>`, srun's queue lines, then the tasks' output.

Exit codes: the worst task's (128 + signal for a task killed by one), 130 after Ctrl-C while the
job runs, 1 for a command-line error, a job that can never fit, or a job that never started
(cancelled with `jobs cancel`, or Ctrl-C / SIGTERM while queued: srun exits 1 then too), 69 when
the target CS-2 refuses the job (not ACTIVE or in the other execution mode; nothing is
allocated then). A job naming a CS-2 (`--cs_ip`) reserves it, and a weight-streaming one its
num_csx systems: it is queued until they are free, and refused (69) when one is not ACTIVE in
its mode or the cluster has fewer.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING

from cs2sim.scripts.launch_common import Signals, fail, preload_for, write_err, write_out
from cs2sim.system import knobs
from cs2sim.system.errors import CsError

if TYPE_CHECKING:
    from cs2sim.system.sched.backend import Backend
    from cs2sim.system.sched.fit import NodeInfo
    from cs2sim.system.sched.request import JobRequest

__all__ = ["main"]


def _print(messages: list[tuple[str, str]]) -> None:
    for stream, line in messages:
        (write_out if stream == "out" else write_err)(line + "\n")


def _dry_run(request: JobRequest, infos: list[NodeInfo]) -> int:
    """Where every task would go on an idle cluster (nothing is allocated); the exit code the
    real launch would have for a job that can never fit (1, with srun's words)."""
    from cs2sim.system.sched.fit import never_fits, place
    from cs2sim.system.sched.layout import layout

    why = never_fits(request.components, infos, frozenset(request.exclude))
    placed = place(request.components, infos, frozenset(request.exclude)) if why is None else None
    if placed is None:
        why = why or "Requested node configuration is not available"
        write_err(f"srun: error: Unable to allocate resources: {why}\n")
        write_err(
            "csrun_wse: dry run: this job does not fit the cluster even when idle; the "
            "launch would be refused the same way.\n"
        )
        return 1
    tasks = layout(request, 0, placed, {n.name: n.cpus for n in infos})
    write_out(
        f"csrun_wse: dry run: {len(tasks)} task(s) on {request.nodes} node(s) of an idle "
        "cluster; nothing was allocated.\n"
    )
    by_node: dict[str, list[int]] = {}
    for t in tasks:
        by_node.setdefault(t.node, []).append(t.procid)
    for t_node, ids in by_node.items():
        comp = next(t.component for t in tasks if t.node == t_node)
        write_out(f"  component {comp}  {t_node:<12} tasks {','.join(map(str, ids))}\n")
    return 0


def _num_csx_text(run_args: tuple[str, ...]) -> str | None:
    """The value of an explicit `--num_csx` on the run's command line, if any."""
    for i, word in enumerate(run_args):
        if word == "--num_csx" and i + 1 < len(run_args):
            return run_args[i + 1]
        if word.startswith("--num_csx="):
            return word.partition("=")[2]
    return None


def _check_num_csx(run_args: tuple[str, ...], pipelined: bool) -> None:
    """Refuse (69, before anything is allocated) a number of CS-2 systems the run would refuse
    once started: fewer than one, or several for a pipelined run (one system runs it)."""
    from cs2sim.system.errors import JobRefused

    raw = _num_csx_text(run_args)
    if raw is None:
        return
    if not (raw.isascii() and raw.isdigit() and int(raw) >= 1):
        raise JobRefused(
            f"--num_csx {raw}: a run needs at least one CS-2 system (a whole "
            "number, 1 or more); nothing was allocated."
        )
    if pipelined and int(raw) > 1:
        raise JobRefused(
            f"--num_csx {raw}: a pipelined run uses one CS-2 system; weight "
            "streaming spreads over several (`python-ws run.py ... --num_csx "
            f"{raw}`); nothing was allocated."
        )


def main(argv: list[str] | None = None) -> int:
    """The csrun_wse command line."""
    from cs2sim.system.cluster import cluster_source, gres_nodes, load_cluster
    from cs2sim.system.sched.flags import (
        LaunchError,
        cs_ip_of,
        num_csx_of,
        parse_wse,
        with_systems,
        wse_help,
    )
    from cs2sim.system.sched.pycmd import flow_of
    from cs2sim.system.store import Store

    argv = sys.argv[1:] if argv is None else argv
    messages: list[tuple[str, str]] = []
    try:
        cluster = load_cluster(cluster_source())
        site = cluster.site
        worker_cpus = [n.cpus for n in cluster.nodes if n.name not in gres_nodes(site)]
        launch = parse_wse(argv, site, worker_cpus, messages)
    except LaunchError as e:
        _print(messages)
        write_err(f"{e}\n")
        return e.exit_code
    except CsError as e:
        _print(messages)
        return fail(e)
    if launch.help:
        write_out(wse_help(site) + "\n")
        return 0
    _print(launch.messages)
    assert launch.srun is not None and launch.request is not None
    try:
        store = Store.open()
        cs_ip = cs_ip_of(launch.run_args)
        ws = flow_of(launch.run_args[0]) == "ws"
        _check_num_csx(launch.run_args, pipelined=not ws)
        if cs_ip is not None:  # a dry run is refused as the launch would be (nothing reserved)
            from cs2sim.system.machine import Machine
            from cs2sim.system.state import ExecMode

            mode = ExecMode.WEIGHT_STREAMING if ws else ExecMode.PIPELINED
            # the systems it reserves: its --cs_ip's, and num_csx - 1 more in weight streaming
            count = num_csx_of(launch.run_args) if mode is ExecMode.WEIGHT_STREAMING else 1
            machine = Machine.for_target(store, cs_ip)
            machine.check_job(mode, count)  # JobRefused: nothing allocated
            launch = with_systems(launch, machine.job_systems(count), site)
    except CsError as e:
        return fail(e)
    assert launch.srun is not None and launch.request is not None
    from cs2sim.system.sched.backend import select_backend

    try:
        backend = select_backend(store, site, launch.srun, launch.run_args)
        write_out(f"Launching: {launch.srun.text}\n")
        if launch.dry_run:
            return _dry_run(launch.request, backend.nodes)
    except CsError as e:
        return fail(e)
    return run_job(backend, launch.request)


def run_job(backend: Backend, request: JobRequest, *, ignore_int: bool = False) -> int:
    """Allocate, run and release one job on `backend`; the launcher's exit code."""
    from cs2sim.system.oslogin import login_name
    from cs2sim.system.sched.queue import NeverFits
    from cs2sim.system.sched.request import JobRequest
    from cs2sim.system.sched.runner import preload

    assert isinstance(request, JobRequest)
    wsjob = knobs.raw("CS2SIM_WSJOB")  # started by the cluster server: named after its job
    if wsjob:
        import dataclasses

        request = dataclasses.replace(request, name=wsjob)
    signals = Signals()  # Ctrl-C while queued cancels the wait, even for csrun_cpu
    t0 = time.perf_counter()
    try:
        alloc = backend.allocate(
            request,
            user=login_name(),
            events=lambda line: write_err(line + "\n"),
            stop_requested=signals,
        )
    except NeverFits as e:
        write_err(f"srun: error: Unable to allocate resources: {e.reason}\n")
        write_err(f"csrun: {e.hint[0].upper()}{e.hint[1:]}\n")
        return 1
    except CsError as e:
        return fail(e, "srun: error: ")
    if alloc is None:  # it never ran: cancelled or interrupted while queued, as srun exits
        return 1
    result = None
    signals.ignore_int = ignore_int  # srun --pty: from now on Ctrl-C belongs to the task
    try:
        if getattr(backend, "name", "") == "embedded":  # forked tasks share it; srun's do not
            preload(preload_for(request.command))

        def started(seconds: float) -> None:
            if knobs.raw("CS2SIM_LAUNCH_TIMING"):
                write_err(
                    f"csrun: {request.ntasks} task(s) started {time.perf_counter() - t0:.3f}"
                    f" s after submission (host measurement; fork loop {seconds:.3f} s)\n"
                )

        result = backend.run(
            alloc, out=write_out, err=write_err, stop_requested=signals, on_started=started
        )
    except CsError as e:
        return fail(e)
    finally:
        backend.release(alloc, result)
    return result.exit_code


BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: `csrun_wse --dry-run ... | head -3`, as `cs` exits


def entry() -> None:
    """Console-script entry point."""
    try:
        code = main()
    except BrokenPipeError:  # the reader left: nothing to say, and no second failure at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        code = BROKEN_PIPE_EXIT
    sys.exit(code)


if __name__ == "__main__":
    entry()
