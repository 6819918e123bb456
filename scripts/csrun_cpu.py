"""`csrun_cpu`: run a command on one CPU node of the support cluster, never on the CS-2.

Model Zoo's csrun_cpu, docs/sources.md. `--alloc-node=True` (default) allocates one whole node (not
the node wired to the CS-2, unless `--exclude_gres=False`) through the same scheduler as csrun_wse
and runs the command there with the terminal attached (`srun --pty`); `--alloc-node=False` runs it
right here. The query flags (`--def_nodes`, `--def_tasks`, `--def_cpus`, `--singularity`,
`--def_mount_dirs`, `--def_gres`, `--def_gres_node`) print the site's value from the cluster
configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys

from cs2sim.scripts.launch_common import fail, write_err, write_out
from cs2sim.system.errors import CsError

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The csrun_cpu command line."""
    from cs2sim.system.cluster import cluster_source, load_cluster
    from cs2sim.system.sched.flags import LaunchError, cpu_help, parse_cpu

    argv = sys.argv[1:] if argv is None else argv
    messages: list[tuple[str, str]] = []
    try:
        site = load_cluster(cluster_source()).site
        launch = parse_cpu(argv, site, dict(os.environ), messages)
    except LaunchError as e:
        for stream, line in messages:
            (write_out if stream == "out" else write_err)(line + "\n")
        write_err(f"{e}\n")
        return e.exit_code
    except CsError as e:
        return fail(e)
    if launch.help:
        write_out(cpu_help() + "\n")
        return 0
    if launch.query is not None:
        write_out(launch.query + "\n")
        return 0
    for stream, line in launch.messages:
        (write_out if stream == "out" else write_err)(line + "\n")
    assert launch.srun is not None and launch.request is not None
    for var in launch.unset:
        os.environ.pop(var, None)
    if launch.logging:
        write_out(f"Running: {launch.srun.text}\n")
    if not launch.alloc_node:
        return _run_here(launch.request.command)
    from cs2sim.scripts.csrun_wse import run_job
    from cs2sim.system.sched.backend import select_backend
    from cs2sim.system.store import Store

    try:
        store = Store.open()
        backend = select_backend(store, site, launch.srun, launch.run_args)
    except CsError as e:
        return fail(e)
    return run_job(backend, launch.request, ignore_int=True)


def _run_here(command: tuple[str, ...]) -> int:
    """`--alloc-node=False`: run on this node, no allocation (`singularity exec ...` alone)."""
    from cs2sim.system.sched.pycmd import exec_argv

    exe, extra = exec_argv(command)
    try:
        proc = subprocess.run(exe, env={**os.environ, **extra}, check=False)
    except OSError as e:
        write_err(f"csrun_cpu: cannot run {exe[0]}: {e.strerror}; check the command.\n")
        return 127
    except KeyboardInterrupt:
        return 130
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def entry() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
