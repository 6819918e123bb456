"""The Executor plug-in: what the trainer drives, whatever runs the steps.

An executor is loaded once, then runs a range of steps and streams one `StepOutput` per step into
a BOUNDED queue from a producer thread; the trainer (the "user node") consumes them, logs, writes
summaries and checkpoints. The two sides are decoupled as on a CS-2 (Cerebras' "Measure throughput
of your model"): while the user node writes a checkpoint the executor keeps computing until the
queue is full, and the user node then finds a burst of ready outputs, which is why Rate spikes after
a checkpoint.

A checkpoint step is a synchronisation point: after that step's update the producer hands over a
consistent `TrainState` (weights, optimizer, loss scaler, data position, RNG states), copied
before it computes the next step. No other step copies anything.

`QueuedExecutor` implements the thread, the queue, the snapshots and one training step's shape
(`execute_step`: the micro-batches of gradient accumulation, runtime/executors/accumulate.py,
each through `compute_gradients`, then one `apply_update`); an executor supplies `load` and those
parts (runtime/executors/cpu.py, pipelined.py, weight_streaming.py).
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Collection, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cs2sim.runtime.artifacts.checkpoint import TrainState
from cs2sim.runtime.executors.accumulate import NONE, Accumulation
from cs2sim.system.errors import RuntimeFailure

if TYPE_CHECKING:  # runtime.data is imported by the runs that build a stream
    from cs2sim.runtime.data.stream import Stream
    from cs2sim.runtime.nn.model import Model
    from cs2sim.runtime.numerics.loss_scale import StaticLossScaler
    from cs2sim.runtime.numerics.optim import Optimizer

__all__ = [
    "LoadReport",
    "StepOutput",
    "EvalOutput",
    "StepResult",
    "Executor",
    "QueuedExecutor",
    "rng_states",
    "set_rng_states",
    "capture_state",
    "restore_state",
]


@dataclass(frozen=True)
class LoadReport:
    """What loading the executable cost; None where only the CS-2 path knows."""

    compile_time: float | None = None
    programming_time: float | None = None
    est_samples_per_sec: float | None = None


@dataclass(frozen=True)
class StepResult:
    """What one executed training step produced."""

    loss: float
    lr: float
    loss_scale: float
    isfinite: bool
    grad_norm: float | None = None


@dataclass
class StepOutput:
    """One step's output as the user node receives it."""

    step: int  # global step after this step's update (1 for the first step of a fresh run)
    loss: float
    lr: float
    loss_scale: float
    isfinite: bool  # False: gradients overflowed, the update was skipped (dynamic loss scaling)
    samples: int
    grad_norm: float | None = None
    input_wait: float = 0.0  # seconds the executor waited for this step's batch
    step_time: float = 0.0  # seconds the executor spent on this step, input wait included
    snapshot: TrainState | None = None  # set on checkpoint steps
    # optimizer.log_summaries: L2 norms per layer group on summary steps, after the update:
    # "grad_norm/<group>" (unscaled, clipped gradients) and "weight_norm/<group>"
    norms: dict[str, float] | None = None


@dataclass
class EvalOutput:
    """One eval batch: the model's metric sums (e.g. loss_sum, count, correct)."""

    batch: int
    sums: dict[str, float]
    samples: int


class Executor(Protocol):
    """The plug-in protocol the trainer knows."""

    device: str
    run_info: dict[str, Any] | None  # what ran the steps, for performance.json

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict[str, Any]) -> LoadReport:
        """Prepare to run `model` (compile and program on a CS-2); nothing runs yet."""
        ...

    def run(
        self, stream: Stream, start_step: int, stop_step: int, checkpoint_steps: Collection[int]
    ) -> Generator[StepOutput, None, None]:
        """Train steps start_step+1 .. stop_step; snapshots at `checkpoint_steps`; closing the
        generator stops the steps (the trainer closes it when it stops consuming)."""
        ...

    def evaluate(self, stream: Stream, num_batches: int) -> Iterator[EvalOutput]:
        """Evaluate `num_batches` batches of `stream` with the current weights."""
        ...


# RNG states: the model's own (runtime/nn/model.py: the dropout generator); a model without
# randomness in its steps has none to save.


def rng_states(model: Model) -> dict[str, Any]:
    """The model's RNG states for a checkpoint ({} when it keeps none)."""
    return {"rng_state": model.rng_state()} if hasattr(model, "rng_state") else {}


def set_rng_states(model: Model, states: dict[str, Any]) -> None:
    """Restore what `rng_states` returned."""
    if hasattr(model, "set_rng_state") and "rng_state" in states:
        model.set_rng_state(states["rng_state"])


def capture_state(
    step: int, model: Model, optimizer: Optimizer, scaler: StaticLossScaler, stream: Stream | None
) -> TrainState:
    """A consistent deep copy of the training state after `step` (checkpoint steps only)."""
    return TrainState(
        step=step,
        model={k: v.copy() for k, v in model.parameters().items()},
        optimizer=copy.deepcopy(optimizer.state_dict()),
        loss_scaler=copy.deepcopy(scaler.state_dict()),
        data=copy.deepcopy(stream.state_dict()) if stream is not None else None,
        rng=rng_states(model),
    )


def restore_state(
    state: TrainState,
    model: Model,
    optimizer: Optimizer | None,
    scaler: StaticLossScaler | None,
    stream: Stream | None,
) -> None:
    """Load `state` into the live objects (None: leave that part as it is)."""
    params = model.parameters()
    missing = sorted(set(params) - set(state.model))
    if missing:
        raise RuntimeFailure(
            f"Checkpoint {state.path} lacks {len(missing)} weights of this model (e.g. "
            f"{missing[0]}); it was written for another model or config."
        )
    for name, p in params.items():
        src = state.model[name]
        if src.shape != p.shape:
            raise RuntimeFailure(
                f"Checkpoint {state.path} has {name} of shape {src.shape}, this model needs "
                f"{p.shape}; use a checkpoint of the same config."
            )
        p[...] = src  # in place: the optimizer holds references to these arrays
    if optimizer is not None:
        optimizer.load_state_dict(state.optimizer)
    if scaler is not None:
        scaler.load_state_dict(state.loss_scaler)
    if stream is not None and state.data is not None:
        stream.load_state_dict(state.data)
    set_rng_states(model, state.rng)


# The producer thread and the bounded queue ---------------------------------------------------


class _End:
    pass


@dataclass
class _Failure:
    exc: BaseException


class QueuedExecutor:
    """Base of executors: steps run in a producer thread that fills a bounded output queue."""

    device = "base"

    def __init__(self, queue_depth: int = 16, clock: Callable[[], float] = time.perf_counter):
        self.queue_depth = queue_depth
        self.clock = clock
        self.model: Any = None
        self.optimizer: Any = None
        self.scaler: Any = None
        self.params: dict[str, Any] = {}
        self.accumulation: Accumulation = NONE
        # Called with the global step before each step runs (the CS-2 path checks the system is
        # still ACTIVE); raising stops the run after the outputs already queued.
        self.before_step: Callable[[int], None] | None = None
        # What ran the steps, for performance.json (the CS-2 path fills it: systems, estimate).
        self.run_info: dict[str, Any] | None = None
        # Set by the trainer for optimizer.log_summaries: every this many steps (and on the
        # last) the step's output carries the per-group norms (None: never).
        self.summary_steps: int | None = None

    # -- optimizer.log_summaries ------------------------------------------------------------------
    def summary_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(weights, gradients) by dotted name, where this executor keeps them."""
        return self.model.parameters(), self.model.grads()

    def group_norms(self) -> dict[str, float]:
        """L2 norms per layer group (a name's first component: embed, h0, h1, ...)."""
        weights, grads = self.summary_arrays()
        sums: dict[str, list[float]] = {}
        for name, w in weights.items():
            group = name.split(".", 1)[0]
            acc = sums.setdefault(group, [0.0, 0.0])
            w64 = w.astype(np.float64, copy=False).ravel()  # (n,)
            g64 = grads[name].astype(np.float64, copy=False).ravel()  # (n,)
            acc[0] += float(w64 @ w64)
            acc[1] += float(g64 @ g64)
        out: dict[str, float] = {}
        for group, (w2, g2) in sums.items():
            out[f"weight_norm/{group}"] = float(np.sqrt(w2))
            out[f"grad_norm/{group}"] = float(np.sqrt(g2))
        return out

    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict[str, Any]) -> LoadReport:
        """Keep references to the objects the steps use, and the gradient accumulation."""
        self.model, self.optimizer, self.scaler, self.params = model, optimizer, scaler, params
        self.accumulation = (
            Accumulation.from_params(params, getattr(self, "plan", None)) if params else NONE
        )
        return LoadReport()

    # -- one training step: the executor supplies these three parts ------------------------------
    def begin_gradients(self) -> None:
        """Clear the gradients a step accumulates into."""
        raise NotImplementedError

    def compute_gradients(self, batch: dict[str, np.ndarray], step: int, scale: float) -> float:
        """Forward and backward of `batch` (a micro-batch of the step), ADDING the gradients of
        scale * loss(batch) to the step's; returns loss(batch), the mean over its rows."""
        raise NotImplementedError

    def apply_update(self, step: int, loss: float, scale: float) -> StepResult:
        """Unscale and check, clip, update (skipped when not finite), update the loss scale."""
        raise NotImplementedError

    def end_gradients(self) -> None:
        """After the step's last micro-batch, before the update (nothing by default)."""

    def execute_step(self, batch: dict[str, np.ndarray], step: int) -> StepResult:
        """Run global step `step` (1-based) on `batch`: its micro-batches' forward and backward
        (one without accumulation), then one update (accumulate.py: the same update as the
        whole batch in one go)."""
        scale = float(self.scaler.scale)
        self.begin_gradients()
        parts = self.accumulation.split(batch)
        if len(parts) == 1:  # exactly the whole batch's numbers
            loss = self.compute_gradients(batch, step, scale)
        else:
            loss = 0.0
            for part, rows in parts:
                loss += self.compute_gradients(part, step, scale * rows.weight) * rows.weight
            loss = float(np.float32(loss))
        self.end_gradients()
        return self.apply_update(step, loss, scale)

    def run(
        self, stream: Stream, start_step: int, stop_step: int, checkpoint_steps: Collection[int]
    ) -> Generator[StepOutput, None, None]:
        """Start the producer thread and yield its outputs in step order."""
        q: queue.Queue[Any] = queue.Queue(maxsize=self.queue_depth)
        stop = threading.Event()

        def put(item: Any) -> None:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return
                except queue.Full:
                    continue

        def produce() -> None:
            try:
                self.model.train()
                # Overflow to inf/NaN is what loss scaling and the NaN guard detect and report;
                # numpy's RuntimeWarnings (with source lines) would only reach the user's console.
                np.seterr(all="ignore")  # this thread's own setting
                for step in range(start_step + 1, stop_step + 1):
                    if stop.is_set():
                        return
                    if self.before_step is not None:
                        self.before_step(step)
                    t0 = self.clock()
                    try:
                        batch = self.accumulation.next_batch(stream)
                    except StopIteration:
                        raise RuntimeFailure(
                            f"The training data ran out before global step {step} (its input "
                            "does not repeat); set train_input.repeat: true or train fewer steps."
                        ) from None
                    t1 = self.clock()
                    r = self.execute_step(batch, step)
                    snap = None
                    if step in checkpoint_steps:
                        snap = self.snapshot(step, stream)
                    samples = len(next(iter(batch.values())))
                    every = self.summary_steps
                    norms = (
                        self.group_norms()
                        if every and (step % every == 0 or step == stop_step)
                        else None
                    )
                    put(
                        StepOutput(
                            step,
                            r.loss,
                            r.lr,
                            r.loss_scale,
                            r.isfinite,
                            samples,
                            r.grad_norm,
                            t1 - t0,
                            self.clock() - t0,
                            snap,
                            norms,
                        )
                    )
                put(_End())
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
                put(_Failure(exc))

        worker = threading.Thread(target=produce, name=f"{self.device}-executor", daemon=True)
        worker.start()
        try:
            while True:
                item = q.get()
                if isinstance(item, _End):
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            stop.set()
            worker.join()

    def snapshot(self, step: int, stream: Stream) -> TrainState:
        """A consistent copy of the training state after `step` (a CS-2 executor downloads it
        from where it lives: the wafer's stages, MemoryX)."""
        return capture_state(step, self.model, self.optimizer, self.scaler, stream)

    def evaluate(self, stream: Stream, num_batches: int) -> Iterator[EvalOutput]:
        """Evaluate synchronously (no updates, so nothing to overlap)."""
        self.model.eval()
        try:
            for i in range(num_batches):
                try:
                    batch = next(stream)
                except StopIteration:  # a single-pass eval set shorter than eval_steps
                    return
                with np.errstate(all="ignore"):  # a diverged model's NaN is reported as a loss
                    sums = self.model.eval_metrics(batch)
                yield EvalOutput(
                    i + 1, {k: float(v) for k, v in sums.items()}, len(next(iter(batch.values())))
                )
        finally:
            self.model.train()
