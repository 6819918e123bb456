"""What a run reports while it runs: the callback events and their payloads (minGPT style).

The trainer never prints. It fires an event with a small frozen record, and whoever registered
for it (runtime/cli/runlog.py for run.py, a test, a launcher) renders or stores it:

    on_load          LoadInfo     the executable is loaded; the run is about to start
    on_step          StepOutput   every step's output, as the user node receives it
    on_step_logged   StepLog      a log step's figures (printed and written to TensorBoard)
    on_checkpoint    Path         a checkpoint was written
    on_eval          EvalResult   an evaluation finished
    on_end           TrainResult  a training run finished
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.perf import RunPerf
from cs2sim.runtime.executors.base import LoadReport

__all__ = ["EVENTS", "Callbacks", "LoadInfo", "StepLog", "TrainResult", "EvalResult"]

EVENTS = ("on_load", "on_step", "on_step_logged", "on_checkpoint", "on_eval", "on_end")


class Callbacks:
    """Event name -> the functions to call with its payload, in registration order."""

    def __init__(self) -> None:
        self._fns: dict[str, list[Callable[[Any], None]]] = {e: [] for e in EVENTS}

    def add(self, event: str, fn: Callable[[Any], None]) -> None:
        """Call `fn(payload)` on `event` (one of EVENTS)."""
        if event not in self._fns:
            raise ValueError(f"unknown event {event!r}; events: {', '.join(EVENTS)}")
        self._fns[event].append(fn)

    def fire(self, event: str, payload: Any) -> None:
        """Call every function registered for `event`."""
        for fn in self._fns[event]:
            fn(payload)


@dataclass(frozen=True)
class LoadInfo:
    """Sent on_load: the executable is loaded and the run is about to start."""

    device: str
    start_step: int
    stop_step: int
    report: LoadReport
    num_params: int
    source: str  # the input data, described
    mode: str = "train"


@dataclass(frozen=True)
class StepLog:
    """Sent on_step_logged: one log step's figures (as printed and written to TensorBoard)."""

    device: str
    step: int
    loss: float
    rate: float
    global_rate: float
    lr: float
    loss_scale: float
    wall_time: float


@dataclass
class TrainResult:
    """What a training run did."""

    start_step: int
    end_step: int
    total_samples: int
    total_time: float
    final_loss: float | None
    perf: RunPerf | None = None
    checkpoints: list[Path] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)  # every step's loss

    @property
    def samples_per_sec(self) -> float:
        """GlobalRate of the whole run."""
        return self.total_samples / self.total_time if self.total_time > 0 else 0.0


@dataclass
class EvalResult:
    """What an evaluation measured, on the weights of global step `step`."""

    step: int
    avg_loss: float
    metrics: dict[str, float]
    samples: int
    checkpoint: Path | None
