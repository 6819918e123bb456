"""What csrun_wse and csrun_cpu share: signals, the store, printing a CsError, running a step."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

from cs2sim.system import knobs
from cs2sim.system.errors import CsError, one_line_warnings

__all__ = ["Signals", "fail", "write_out", "write_err"]


class Signals:
    """Records SIGINT / SIGTERM / SIGHUP instead of dying, so the launcher can stop its job and
    free its nodes first (Ctrl-C in the terminal, `jobs cancel`, a closed terminal)."""

    def __init__(self, ignore_int: bool = False) -> None:
        self.got: int | None = None
        self.ignore_int = ignore_int  # set once the interactive task runs (not while queued)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._handler)

    def _handler(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGINT and self.ignore_int:
            return  # srun --pty: the interactive task has the terminal's Ctrl-C
        self.got = sig

    def __call__(self) -> int | None:
        return self.got


def write_out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def write_err(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


def fail(e: CsError, prefix: str = "error: ") -> int:
    """Print a CsError as one line and return its exit code."""
    write_err(f"{prefix}{e}\n")
    return e.exit_code


one_line_warnings(write_err)  # a private directory moved, a damaged row skipped: one line


def preload_for(argv: tuple[str, ...]) -> tuple[str, ...]:
    """Modules to import before forking Python tasks: a Model Zoo run.py needs the runtime."""
    from cs2sim.system.sched.pycmd import classify

    cmd = classify(argv)
    if cmd is None:
        return ()
    mods: tuple[str, ...] = ()  # a generic script or -c imports what it needs itself
    if cmd.kind == "script" and os.path.basename(cmd.target) == "run.py":
        # what every task of a Model Zoo run imports (chief and streamers alike): imported once
        # here and shared copy-on-write, instead of 98 times over on 2 cores (measured on the
        # Weight Streaming Quickstart's job: 48 s -> 12 s end to end). Modules a checkout lacks
        # are skipped.
        mods += (
            "numpy",
            "yaml",
            "cs2sim.runtime.cli.main",
            "cs2sim.runtime.params",
            "cs2sim.runtime.training.trainer",
            "cs2sim.runtime.job.roles",
            "cs2sim.runtime.job.streamers",
            "cs2sim.runtime.job.cs_run",
        )
    extra = knobs.text("CS2SIM_PRELOAD")
    return mods + tuple(m for m in extra.split(",") if m)


def stop_fn(signals: Signals) -> Callable[[], int | None]:
    return signals
