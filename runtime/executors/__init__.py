"""Executors: what runs the training steps, plugged into the trainer (runtime/training/trainer.py).

`base.py` holds the protocol (`Executor`, `LoadReport`, `StepOutput`) and `QueuedExecutor`, the
producer thread + bounded output queue every executor reuses; `cpu.py` runs the steps on the
host; `pipelined.py` and `weight_streaming.py` (with `memoryx.py`, `swarmx.py` and the shard
replicas of `replicas.py`) run them on the simulated CS-2; runtime/job/cs_run.py picks one by the
system's execution mode.
"""

from __future__ import annotations

from cs2sim.runtime.executors.base import (
    EvalOutput,
    Executor,
    LoadReport,
    QueuedExecutor,
    StepOutput,
    StepResult,
)
from cs2sim.runtime.executors.cpu import CpuExecutor
from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

__all__ = [
    "EXECUTORS",
    "CpuExecutor",
    "PipelinedExecutor",
    "WeightStreamingExecutor",
    "EvalOutput",
    "Executor",
    "LoadReport",
    "QueuedExecutor",
    "StepOutput",
    "StepResult",
]

# name -> executor class ("cpu" is what `| Train Device=...` prints on the host; both CS-2
# executors print "CSX")
EXECUTORS: dict[str, type[QueuedExecutor]] = {
    "cpu": CpuExecutor,
    "pipelined": PipelinedExecutor,
    "weight_streaming": WeightStreamingExecutor,
}
