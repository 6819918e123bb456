"""Every environment variable cs2sim reads: one table, and the readers the code uses.

Two prefixes: `CS2_` for what a user or an administrator of the simulated installation sets
(where the store lives, the cluster file, how long a reboot takes), `CS2SIM_` for the
simulator's own mechanics (set by its launchers for their tasks, or knobs for tests and
benchmarks). Code reads them only through `raw`, `text`, `number` and `integer` below, which
refuse a name the table does not list, so the table (and docs/environment.md, generated from it
by `markdown_table` and compared by a test) cannot miss one. The one exception is
runtime/job/bootstrap.py, which runs before cs2sim can be imported and reads its two entries
with the standard library.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["Knob", "KNOBS", "PREFIXES", "raw", "text", "number", "integer", "markdown_table"]

PREFIXES = ("CS2_", "CS2SIM_")


@dataclass(frozen=True)
class Knob:
    """One environment variable: who sets it, what it does, and its default."""

    name: str
    who: str  # "user", "admin", "cs2sim" (set by cs2sim for the processes it starts), "test"
    default: str  # what holds when it is unset, in words
    doc: str


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "CS2_HOME",
            "user",
            "`~/.cs2sim`",
            "Where the system store, the cluster file and the built-data cache live.",
        ),
        Knob(
            "CS2_CLUSTER",
            "admin",
            "`$CS2_HOME/cluster.yaml`, else the built-in description",
            "The cluster description (YAML) to use instead.",
        ),
        Knob(
            "CS2_BOOT_SECONDS",
            "admin",
            "5",
            "Seconds a `system activate` reboot takes (ACTIVATING); 0 for instant.",
        ),
        Knob(
            "CS2_SCHEDULER",
            "user",
            "the cluster file's `site.scheduler`",
            "`embedded` or `slurm`: the scheduler backend of one launch.",
        ),
        Knob(
            "CS2_ANALYZER_SECONDS",
            "user",
            "1.0",
            "Length of each of `cs_input_analyzer`'s input measurements when "
            "`--measure-seconds` is not given (shorter: a quicker, noisier analysis).",
        ),
        Knob(
            "CS2SIM_VENV",
            "user",
            "the checkout's `.venv`, or the running interpreter",
            "The venv a Model Zoo `run.py` copied out of the checkout re-executes itself with.",
        ),
        Knob(
            "CS2SIM_REEXEC",
            "cs2sim",
            "unset",
            "Set on a `run.py` re-executed in its venv, so that it happens at most once.",
        ),
        Knob(
            "CS2SIM_FLOW",
            "cs2sim",
            "`tf` (plain `python`)",
            "Which wrapper started the run: `ws` (`python-ws`) or `pt` (`python-pt`).",
        ),
        Knob(
            "CS2SIM_JOB_SECRET",
            "cs2sim",
            "a secret the chief writes to its rendezvous directory",
            "The job's secret (hex) every task proves to the chief's channel.",
        ),
        Knob(
            "CS2SIM_JOB_ID",
            "cs2sim",
            "unset (the run registers its own job)",
            "The job a launcher registered for this run (the launcher also finishes it).",
        ),
        Knob(
            "CS2SIM_WSJOB",
            "cs2sim",
            "unset (not started by the cluster server)",
            "The wsjob a cluster server's execute job runs for: the launch and its job record "
            "are named after it.",
        ),
        Knob(
            "CS2SIM_WS_SERVERS",
            "cs2sim",
            "unset (single-task components are coordinators)",
            "`W,A`: the cluster server's execute job has W weight-server then A activation-server "
            "components after its coordinator.",
        ),
        Knob(
            "CS2SIM_COMPILE_FROM",
            "cs2sim",
            "unset (the run compiles, or reuses its own)",
            "The compile directory a cluster server's execute job loads instead of compiling.",
        ),
        Knob(
            "CS2SIM_TOKEN_FILE",
            "user",
            "`~/.cs/token`",
            "The token file `run.py CSX` and `csctl` present to a cluster server over TCP.",
        ),
        Knob(
            "CS2SIM_CHIEF_HOST",
            "user",
            "this host's address, then 127.0.0.1",
            "The address the streamers reach the chief at.",
        ),
        Knob(
            "CS2SIM_INFLATE",
            "user",
            "libdeflate when the system has it",
            "The gzip HDF5 reader's inflater: libdeflate, or any other value for ISA-L "
            "(python-isal) or the standard library's zlib.",
        ),
        Knob(
            "CS2SIM_STREAMER_TIMEOUT",
            "user",
            "120",
            "Seconds without a batch (or a connection at start-up) before a streamer is named "
            "dead.",
        ),
        Knob(
            "CS2SIM_RENDEZVOUS_TIMEOUT",
            "user",
            "600",
            "Seconds a streamer or coordinator waits for the chief's address.",
        ),
        Knob(
            "CS2SIM_BLAS_THREADS",
            "user",
            "the cores this process may use",
            "Threads of the runtime's own kernels (before OPENBLAS_NUM_THREADS and "
            "OMP_NUM_THREADS).",
        ),
        Knob(
            "CS2SIM_PRELOAD",
            "user",
            "unset",
            "Comma-separated modules the embedded launcher imports once before it forks the tasks.",
        ),
        Knob(
            "CS2SIM_LAUNCH_TIMING",
            "test",
            "unset",
            "When set, `csrun_wse` prints how long its tasks took to start (a host measurement).",
        ),
        Knob(
            "CS2SIM_INPUT_EXTRA_WORK",
            "test",
            "0",
            "Rounds of SHA-256 work added to every sample a streamer makes (an input-bound job).",
        ),
        Knob(
            "CS2SIM_FAULT_AT_STEP",
            "test",
            "unset",
            "A `--cs_ip` run puts its system in FAULT just before this global step.",
        ),
        Knob(
            "CS2SIM_FAULT_REASON",
            "test",
            "`injected fault before global step N`",
            "The reason recorded with that fault.",
        ),
        Knob(
            "CS2_HEARTBEAT_SECONDS",
            "admin",
            "5",
            "Seconds between the cluster server's heartbeats on every watch (a queued or quiet "
            "job included); the server announces it to the client, which reports the server "
            "frozen after 6 missed ones and keeps waiting.",
        ),
        Knob(
            "CS2_SERVER_IDLE_SECONDS",
            "admin",
            "3600",
            "An auto-started cluster server exits after this many seconds with no job queued or "
            "running and no connection; 0: never (a server started by hand never idles out).",
        ),
        Knob(
            "CS2SIM_QUEUE_RECHECK_S",
            "test",
            "5",
            "Seconds between a queued launcher's safety re-checks (wake-ups come first).",
        ),
    )
}


def _known(name: str) -> str:
    if name.startswith(PREFIXES) and name not in KNOBS:
        raise KeyError(
            f"{name} is not in system/knobs.py's table; add it there (and to "
            "docs/environment.md) before reading it"
        )
    return name


def raw(name: str) -> str | None:
    """The variable's value as set (None when unset). Names with our prefixes must be in
    KNOBS; others (OPENBLAS_NUM_THREADS, ...) pass through."""
    return os.environ.get(_known(name))


def text(name: str) -> str:
    """The value stripped, "" when unset."""
    return (raw(name) or "").strip()


def number(name: str, default: float) -> float:
    """The value as a float; `default` when unset or not a number."""
    try:
        return float(text(name) or default)
    except ValueError:
        return default


def integer(name: str, default: int) -> int:
    """The value as an int; `default` when unset or not an integer."""
    try:
        return int(text(name) or default)
    except ValueError:
        return default


def markdown_table() -> str:
    """The table of docs/environment.md."""
    rows = ["| variable | set by | default | what it does |", "|---|---|---|---|"]
    rows += [f"| `{k.name}` | {k.who} | {k.default} | {k.doc} |" for k in KNOBS.values()]
    return "\n".join(rows) + "\n"
