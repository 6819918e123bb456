"""Which execution flow a run.py was started in: the wrapper word (`python`, `python-pt`,
`python-ws`) of Cerebras' reference implementations and Model Zoo, docs/sources.md.

On a CS-2 support cluster the first word of the command decides the flow: `python run.py` is the
pipelined (TF CerebrasEstimator) flow, `python-ws run.py` weight streaming, `python-pt run.py`
the PyTorch flow (pipelined). Cerebras does not publish what the wrappers contain (not published,
docs/sources.md item 2). Ours (`scripts/wrappers.py`, installed as the console scripts `python-ws`
and `python-pt`) set one environment variable and exec this interpreter with the same arguments, so
run.py, the compiler and the executors ask `execution_mode()` and never parse argv[0]:

    CS2SIM_FLOW=ws   weight streaming  (python-ws)
    CS2SIM_FLOW=pt   PyTorch, pipelined (python-pt)
    unset            pipelined          (python)

The variable is inherited, so tasks a launcher starts under `python-ws` see the same flow.
"""

from __future__ import annotations

from cs2sim.system import knobs
from cs2sim.system.errors import UsageError
from cs2sim.system.state import ExecMode

__all__ = ["FLOW_ENV", "FLOWS", "flow", "execution_mode", "launcher_word"]

FLOW_ENV = "CS2SIM_FLOW"
# flow -> (the wrapper word a user types, execution mode, framework)
FLOWS: dict[str, tuple[str, ExecMode, str]] = {
    "tf": ("python", ExecMode.PIPELINED, "tf"),
    "ws": ("python-ws", ExecMode.WEIGHT_STREAMING, "tf"),
    "pt": ("python-pt", ExecMode.PIPELINED, "pytorch"),
}


def flow() -> str:
    """The current flow's key in FLOWS ("tf" when no wrapper set one)."""
    value = knobs.text(FLOW_ENV).lower() or "tf"
    if value not in FLOWS:
        raise UsageError(
            f"{FLOW_ENV}={value!r} is not a flow cs2sim knows ({', '.join(FLOWS)}); start the "
            "run with python, python-ws or python-pt instead of setting it by hand."
        )
    return value


def execution_mode() -> ExecMode:
    """PIPELINED or WEIGHT_STREAMING, from the wrapper the run was started with."""
    return FLOWS[flow()][1]


def launcher_word() -> str:
    """The word the user typed to start this flow: python, python-ws or python-pt."""
    return FLOWS[flow()][0]
