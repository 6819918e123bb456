"""`python-ws` and `python-pt`: the Cerebras container's flow wrappers (docs/sources.md).

Each sets CS2SIM_FLOW (runtime/job/flow.py) and replaces itself with this interpreter running the
same arguments, so `python-ws run.py --mode train ...` is `python run.py ...` in the
weight-streaming flow, and `python-ws` alone is an interactive interpreter in that flow, as in the
container.
"""

from __future__ import annotations

import os
import sys

from cs2sim.runtime.job.flow import FLOW_ENV

__all__ = ["python_ws", "python_pt"]


def _exec(flow: str) -> None:
    os.environ[FLOW_ENV] = flow
    argv = [sys.executable, *sys.argv[1:]]
    try:
        os.execv(sys.executable, argv)
    except OSError as e:
        print(
            f"error: cannot start {sys.executable}: {e.strerror}; check the Python installation.",
            file=sys.stderr,
        )
        raise SystemExit(127) from None


def python_ws() -> None:
    """The weight-streaming flow."""
    _exec("ws")


def python_pt() -> None:
    """The PyTorch flow (pipelined)."""
    _exec("pt")
