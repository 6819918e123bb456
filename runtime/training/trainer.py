"""The training loop: train / eval / eval_all / train_and_eval, in nanoGPT's shape.

The trainer is the "user node": it builds the model, optimizer, loss scaler and input stream
(runtime/training/runconfig.py), restores a checkpoint, hands everything to an executor (the
plug-in of runtime/executors/) and consumes the executor's step outputs: Rate/GlobalRate,
TensorBoard summaries, checkpoints, the NaN guard, performance.json. It never prints; it logs to
`cs2sim.run` and fires callbacks (runtime/training/callbacks.py).

One training run:
  1. restore, as Model Zoo's PyTorch flow: `--checkpoint_path` RESUMES from that checkpoint
     (weights, optimizer, loss scale, data position, global step); with
     `--is_pretrained_checkpoint` it is a WARM START instead (weights only; global step 0, fresh
     optimizer, loss scale and data order) -- what the TF run.py's "Checkpoint to initialize
     weights from" always means. Otherwise, unless `runconfig.autoload_last_checkpoint` is
     False, the latest VALID checkpoint in model_dir is restored in full (a damaged one is
     skipped for the previous);
  2. load the executable, start the input pipeline, open the event file: none of it counts in
     GlobalRate, which starts now (cerebras.pytorch's RateTracker, docs/sources.md: compile and load
     are excluded);
  3. consume one output per step: NaN guard, log steps (Rate, GlobalRate, TensorBoard),
     checkpoints (the executor runs ahead into its bounded queue meanwhile, which is why Rate
     spikes after a checkpoint, as on a CS-2);
  4. performance.json and the closing lines.
Resume restores weights, optimizer, loss scaler, data position and RNG states, so training 20
steps equals training 10 and resuming for 10, bit for bit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.artifacts.perf import RunPerf, write_performance
from cs2sim.runtime.artifacts.summaries import EVAL_DIR, Summaries
from cs2sim.runtime.executors.accumulate import Accumulation
from cs2sim.runtime.executors.base import Executor, StepOutput, capture_state, restore_state
from cs2sim.runtime.executors.cpu import CpuExecutor
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.numerics.loss_scale import StaticLossScaler
from cs2sim.runtime.numerics.optim import Optimizer
from cs2sim.runtime.training.callbacks import (
    EVENTS,
    Callbacks,
    EvalResult,
    LoadInfo,
    StepLog,
    TrainResult,
)
from cs2sim.runtime.training.host_memory import check_host_memory, host_memory_bytes
from cs2sim.runtime.training.metrics import RateTracker, format_rate
from cs2sim.runtime.training.runconfig import Components, LoopConfig
from cs2sim.system.errors import ConfigError, RuntimeFailure

if TYPE_CHECKING:
    from cs2sim.runtime.data.stream import Stream

__all__ = [
    "EVENTS",
    "LoopConfig",
    "Components",
    "Trainer",
    "LoadInfo",
    "StepLog",
    "TrainResult",
    "EvalResult",
    "NAN_MESSAGE",
    "host_memory_bytes",
]

log = logging.getLogger("cs2sim.run")

# Model Zoo's NaN/inf guard, verbatim (docs/sources.md) ({} is "NaN" or "inf")
NAN_MESSAGE = (
    "{} loss detected. This could potentially be due to selected hyperparameters such as the "
    "learning rate, batch size, etc. or it could due an internal error. Please try with different "
    "set of hyperparameters and contact Cerebras Support if the issue persists."
)
TRAIN_MODES = ("train", "train_and_eval")
EVAL_MODES = ("eval", "eval_all", "train_and_eval")


def _batches_per_epoch(stream: Any) -> int:
    """Batches in one pass over a stream's data."""
    n = getattr(stream, "batches_per_epoch", None)
    return int(n) if n else max(1, int(stream.samples_per_epoch) // int(stream.batch_size))


def _start(stream: Any) -> None:
    """Bring up the input pipeline (workers started, first batch ready) before the clock runs."""
    start = getattr(stream, "start", None)
    if start is not None:
        start()


class Trainer:
    """Runs one mode of a model against an executor, writing artifacts into model_dir."""

    def __init__(
        self,
        model_name: str,
        params: dict[str, Any],
        model_dir: Path,
        *,
        half: str = "float32",
        executor: Executor | None = None,
        components: Components | None = None,
        clock: Callable[[], float] = time.time,
        memory_capacity: int | None = None,
    ) -> None:
        self.model_name = model_name
        self.params = params  # validated (runtime/params.py): canonical keys, defaults filled
        self.model_dir = Path(model_dir)
        self.config = LoopConfig.from_params(params)
        self.executor = executor or CpuExecutor()
        self.components = components or Components(model_name, params, half)
        self.half = half
        self.final_step = 0  # the stop step of the last train() (train_and_eval's rounds)
        self.clock = clock
        self.memory_capacity = memory_capacity
        self.callbacks = Callbacks()
        self._nonfinite_warned = False  # check_loss_values off: say it once per run

    def add_callback(self, event: str, fn: Callable[[Any], None]) -> None:
        """Call `fn(payload)` on `event` (one of EVENTS)."""
        self.callbacks.add(event, fn)

    def _fire(self, event: str, payload: Any) -> None:
        self.callbacks.fire(event, payload)

    # -- shared steps ----------------------------------------------------------------------------
    def check_host_memory(self, mode: str = "train", cs2: bool | None = None) -> None:
        """Refuse up front a model the host cannot hold in `mode` (ResourceError, one sentence);
        `cs2`: the run is on the simulated CS-2 (default: the executor is not the host's)."""
        cls = self.components.model_class()
        if cs2 is None:
            cs2 = getattr(self.executor, "device", "cpu") != "cpu"
        for training in (True, False):
            if mode in (TRAIN_MODES if training else EVAL_MODES):
                check_host_memory(
                    self.model_name,
                    cls,
                    self.params,
                    training=training,
                    capacity=self.memory_capacity,
                    cs2=cs2,
                )

    def _new_model(self) -> Model:
        """A freshly initialised model; weight streaming says how long its CPU initialisation
        took (the Weight Streaming Quickstart), for an eval as for training: the weights go to
        MemoryX either way."""
        t0 = time.perf_counter()
        model = self.components.model(self.config.seed)
        if getattr(self.executor, "announce_weight_init", False):
            log.info(
                f"Completed weight initialization on CPU in: {time.perf_counter() - t0:.3f} seconds"
            )
        return model

    def _latest(self, model: Model) -> ckpt.TrainState | None:
        """The latest valid checkpoint in model_dir, announced as Model Zoo does (a file
        declaring more than `model`'s checkpoint can hold is skipped before it is read)."""
        state = ckpt.load_latest(self.model_dir, ckpt.model_budget(model.num_params()))
        if state is None:
            log.info(f'No checkpoints were found in "{self.model_dir}".')
        else:
            log.info(f'Found latest checkpoint at "{state.path}".')
        return state

    def _restore_for_train(
        self, model: Model, opt: Optimizer, scaler: StaticLossScaler, stream: Stream
    ) -> int:
        """Warm start or resume; returns the global step training starts from."""
        cfg = self.config
        if cfg.checkpoint_path:
            given = ckpt.load_checkpoint(
                ckpt.resolve_checkpoint_path(cfg.checkpoint_path),
                ckpt.model_budget(model.num_params()),
            )
            if cfg.is_pretrained_checkpoint:
                restore_state(given, model, None, None, None)
                log.info(
                    f'Initialized weights from checkpoint "{given.path}" (its global step '
                    f"{given.step}; --is_pretrained_checkpoint); training starts at global "
                    "step 0."
                )
                return 0
            restore_state(given, model, opt, scaler, stream)
            log.info(
                f'Resuming from checkpoint "{given.path}" at global step {given.step} '
                "(--checkpoint_path; add --is_pretrained_checkpoint to load only its "
                "weights and start at step 0)."
            )
            return given.step
        if not cfg.autoload_last_checkpoint:
            return 0
        state = self._latest(model)
        if state is None:
            return 0
        restore_state(state, model, opt, scaler, stream)
        return state.step

    def resume_text(self) -> str:
        """What running the same command again does, from the checkpoints that exist now and as
        `_restore_for_train` decides it (nothing is loaded): the end of a stopped run's message,
        computed, never assumed ("... resumes from the last one" when there is none)."""
        cfg = self.config
        again = "running the same command again"
        if cfg.checkpoint_path:
            path = ckpt.resolve_checkpoint_path(cfg.checkpoint_path)
            if cfg.is_pretrained_checkpoint:
                return (
                    f'{again} starts from global step 0 with the weights of "{path}" '
                    "(--is_pretrained_checkpoint)"
                )
            return (
                f'{again} resumes from "{path}" again (--checkpoint_path), not from the '
                "checkpoints written since"
            )
        found = ckpt.list_checkpoints(self.model_dir)
        if not cfg.autoload_last_checkpoint:
            kept = f" ({len(found)} checkpoint(s) are kept)" if found else ""
            return f"{again} starts from global step 0 (autoload_last_checkpoint is off){kept}"
        if not found:
            return f"no checkpoint had been written yet, so {again} starts from global step 0"
        step = ckpt.step_of(found[-1])
        at = f" (global step {step})" if step is not None else ""
        return f'its last checkpoint is "{found[-1]}"{at}, and {again} resumes from it'

    def _checkpoint(self, state: ckpt.TrainState) -> Path:
        """Write `state` as the step's checkpoint, with Model Zoo's two lines around it."""
        log.info(f"Saving checkpoint at global step {state.step}")
        state.meta = {"model": self.model_name, "half": self.half}
        path = ckpt.save_checkpoint(self.model_dir, state, self.config.keep_checkpoint_max)
        log.info(f'Saved checkpoint "{path}"')
        return path

    # -- train -------------------------------------------------------------------------------------
    def train(self, every: int | None = None, final: int | None = None) -> TrainResult:
        """Train from the restored step to the configured stop step; write all artifacts.
        `every`: stop at the next multiple of it at the latest (a round of train_and_eval's
        eval_frequency); `final`: the stop step an earlier round computed (steps/num_steps
        count from the first round's start). The stop step is kept in `final_step`."""
        cfg, comp = self.config, self.components
        self.check_host_memory("train")
        self.model_dir.mkdir(parents=True, exist_ok=True)
        model = self._new_model()
        opt, scaler = comp.optimizer(model), comp.scaler()
        stream = comp.stream("train", cfg.seed)
        try:
            start = self._restore_for_train(model, opt, scaler, stream)
            accumulation = Accumulation.from_params(self.params)
            if accumulation.active:
                log.info(accumulation.describe(int(self.params["train_input"]["batch_size"])) + ".")
            # an update takes `batches` input batches (optimizer.grad_accum_steps)
            if final is None:
                epoch = max(1, _batches_per_epoch(stream) // accumulation.batches)
                final = cfg.stop_step(start, epoch)
            self.final_step = final
            stop = final if not every else min(final, (start // every + 1) * every)
            if stop <= start:
                log.info(
                    f"Global step {start} already reaches the requested {stop}; "
                    "nothing to train (raise --max_steps or use --steps)."
                )
                result = TrainResult(start, start, 0, 0.0, None)
                self._fire("on_end", result)
                return result
            return self._train_loop(model, opt, scaler, stream, start, stop)
        finally:
            stream.close()

    def _train_loop(
        self,
        model: Model,
        opt: Optimizer,
        scaler: StaticLossScaler,
        stream: Stream,
        start: int,
        stop: int,
    ) -> TrainResult:
        cfg, ex = self.config, self.executor
        every = cfg.checkpoint_steps
        ckpt_steps = {s for s in range(start + 1, stop + 1) if every and s % every == 0} | {stop}
        result = TrainResult(start, stop, 0, 0.0, None)
        source = str(getattr(stream, "source", ""))
        if source:
            log.info(f"Training data: {source}.")
        # pipelined CS-2 (the PSC Neocortex run transcript, docs/sources.md) saves checkpoint 0,
        # then programs the fabric; weight streaming (the Weight Streaming Quickstart) loads the
        # weights into MemoryX first
        before = getattr(ex, "checkpoint_before_load", True)
        self._want_summary_norms()
        if not before:
            report = ex.load(model, opt, scaler, self.params)
        if start == 0 and cfg.save_initial_checkpoint:
            initial = capture_state(0, model, opt, scaler, stream)
            result.checkpoints.append(self._checkpoint(initial))
        # 2) load, input pipeline, event file: all before GlobalRate's clock starts
        if before:
            report = ex.load(model, opt, scaler, self.params)
        _start(stream)
        perf = RunPerf(
            ex.device,
            0,
            0.0,
            start,
            stop,
            compile_time=report.compile_time,
            programming_time=report.programming_time,
            est_samples_per_sec=report.est_samples_per_sec,
            run_info=ex.run_info,
            data_source=source or None,
        )
        self._nonfinite_warned = False
        ckpt_time = 0.0
        with Summaries(self.model_dir, purge_step=start + 1 if start else None) as tb:
            self._fire(
                "on_load",
                LoadInfo(ex.device, start, stop, report, model.num_params(), source, "train"),
            )
            tracker = RateTracker(clock=self.clock)
            tracker.reset()  # GlobalRate counts from here: compile and load are excluded
            # 3) one output per step, in step order, from the executor's bounded queue
            with contextlib.closing(ex.run(stream, start, stop, ckpt_steps)) as steps:
                for out in steps:
                    tracker.add(out.samples)
                    perf.input_wait_time += out.input_wait
                    perf.step_time += out.step_time
                    result.losses[out.step] = out.loss
                    self._check_loss(out)
                    self._fire("on_step", out)
                    console = out.step % cfg.log_steps == 0 or out.step == stop
                    summary = out.step % cfg.summary_steps == 0 or out.step == stop
                    if console or summary:
                        now = self.clock()
                        self._log_step(tb, out, tracker, now, console, summary)
                        if out.step == stop:
                            perf.total_time = tracker.elapsed(now)
                    if out.snapshot is not None:
                        ckpt_time += self._save_checkpoint(out.snapshot, tb, result)
        return self._finish(result, perf, tracker, ckpt_time, stop)

    def _want_summary_norms(self) -> None:
        """optimizer.log_summaries: the executor reports per-layer norms on the summary steps
        (ConfigError if it cannot)."""
        cfg, ex = self.config, self.executor
        if (self.params.get("optimizer") or {}).get("log_summaries"):
            if not hasattr(ex, "summary_steps"):
                raise ConfigError(
                    f"optimizer.log_summaries needs per-layer norms, which the "
                    f"{ex.device} executor does not report; set it to false."
                )
            ex.summary_steps = cfg.summary_steps  # norms on the steps summaries are written

    def _save_checkpoint(self, state: ckpt.TrainState, tb: Summaries, result: TrainResult) -> float:
        """Write a step's checkpoint, flush the summaries up to it, tell the callbacks; the
        seconds it took."""
        t0 = time.perf_counter()
        path = self._checkpoint(state)
        tb.flush()  # a kill -9 keeps the curve up to the checkpoint it resumes from
        took = time.perf_counter() - t0
        result.checkpoints.append(path)
        self._fire("on_checkpoint", path)
        return took

    def _finish(
        self,
        result: TrainResult,
        perf: RunPerf,
        tracker: RateTracker,
        ckpt_time: float,
        stop: int,
    ) -> TrainResult:
        """The run's figures: performance.json, the closing log lines, the on_end callbacks."""
        perf.total_samples = int(tracker.total_count)
        perf.checkpoint_time = ckpt_time
        result.total_samples, result.total_time = perf.total_samples, perf.total_time
        result.final_loss = result.losses.get(stop)
        result.perf = perf
        write_performance(self.model_dir, perf)
        log.info(
            f"Training finished with {result.total_samples} samples in "
            f"{result.total_time:.3f} seconds, {result.samples_per_sec:.2f} samples/second."
        )
        log.info(f"Loss for final step: {np.float32(result.final_loss)!s}.")
        self._fire("on_end", result)
        return result

    def _check_loss(self, out: StepOutput) -> None:
        """Model Zoo's NaN/inf guard (runconfig.check_loss_values; docs/sources.md)."""
        if math.isfinite(out.loss):
            return
        if self.config.check_loss_values:
            log.error(f"The loss at global step {out.step} is {out.loss}.")
            raise RuntimeFailure(NAN_MESSAGE.format("NaN" if math.isnan(out.loss) else "inf"))
        if not self._nonfinite_warned:
            self._nonfinite_warned = True
            log.warning(
                f"The loss at global step {out.step} is {out.loss}; training continues "
                "because runconfig.check_loss_values is false."
            )

    def _log_step(
        self,
        tb: Summaries,
        out: StepOutput,
        tracker: RateTracker,
        now: float,
        console: bool = True,
        summary: bool = True,
    ) -> None:
        """A log step: console lines every log_steps, summaries every summary_steps (TF flow:
        two intervals; PyTorch: one). Rate is queried once for either, so both see one EMA."""
        rate, global_rate = tracker.rate(now), tracker.global_rate(now)
        if summary:
            self._summaries(tb, out, rate, global_rate, now)
        if not console:
            return
        device = self.executor.device
        if self.config.standard_logs:
            log.info(
                f"| Train Device={device}, Step={out.step}, Loss={out.loss:.5f}, "
                f"Rate={format_rate(rate)}, GlobalRate={format_rate(global_rate)}"
            )
            log.info(f"global_step = {out.step}, loss = {np.float32(out.loss)!s}")
        self._fire(
            "on_step_logged",
            StepLog(device, out.step, out.loss, rate, global_rate, out.lr, out.loss_scale, now),
        )

    def _summaries(
        self, tb: Summaries, out: StepOutput, rate: float, global_rate: float, now: float
    ) -> None:
        tb.scalars(
            out.step,
            {
                "loss": out.loss,
                "local_samples_per_sec": rate,
                "avg_samples_per_sec": global_rate,
                "avg_steps_per_sec": global_rate / out.samples if out.samples else 0.0,
                "lr": out.lr,
                "loss_scale": out.loss_scale,
                # optimizer.log_summaries: the global and per-group norms
                # (runtime/executors/base.py)
                **({"grad_norm": out.grad_norm} if out.norms and out.grad_norm is not None else {}),
                **(out.norms or {}),
            },
            walltime=now,
        )

    # -- eval --------------------------------------------------------------------------------------
    def eval(self, checkpoint_path: str | Path | None = None) -> EvalResult:
        """Evaluate the given checkpoint, else --checkpoint_path, else the latest in model_dir."""
        self.check_host_memory("eval")
        model = self._new_model()
        path = checkpoint_path or self.config.checkpoint_path
        if path:
            state: ckpt.TrainState | None = ckpt.load_checkpoint(
                ckpt.resolve_checkpoint_path(path), ckpt.model_budget(model.num_params())
            )
        else:
            state = self._latest(model)
            if state is None:
                if not self.config.eval_random_weights:
                    raise RuntimeFailure(
                        f'No checkpoint to evaluate in "{self.model_dir}"; train first, pass '
                        "--checkpoint_path, or add --eval_random_weights to evaluate randomly "
                        "initialized weights on purpose."
                    )
                log.warning(
                    "No checkpoint to evaluate; evaluating randomly initialized weights "
                    "(--eval_random_weights)."
                )
        with Summaries(self.model_dir / EVAL_DIR, within=self.model_dir) as tb:
            return self._evaluate(model, state, tb)

    def eval_all(self) -> list[EvalResult]:
        """Evaluate every checkpoint in model_dir in global-step order, as Model Zoo's
        get_checkpoints sorts them (damaged ones are skipped)."""
        self.check_host_memory("eval_all")
        paths = sorted(ckpt.list_checkpoints(self.model_dir), key=lambda p: ckpt.step_of(p) or 0)
        if not paths:
            raise RuntimeFailure(
                f'No checkpoints were found in "{self.model_dir}"; train first (--mode train) '
                "or point --model_dir at a trained run."
            )
        model = self._new_model()
        results: list[EvalResult] = []
        with Summaries(self.model_dir / EVAL_DIR, within=self.model_dir) as tb:
            for path in paths:
                try:
                    state = ckpt.load_checkpoint(path, ckpt.model_budget(model.num_params()))
                except ckpt.CorruptCheckpoint as exc:
                    log.warning(f'Checkpoint "{path}" is damaged ({exc.reason}); skipping it.')
                    continue
                log.info(f'Evaluating checkpoint "{path}" (global step {state.step}).')
                results.append(self._evaluate(model, state, tb, describe_input=not results))
        return results

    def train_and_eval(self) -> tuple[TrainResult, EvalResult]:
        """Train, then evaluate the final weights (eval time is outside the training rate)."""
        self.check_host_memory("train_and_eval")
        self.components.stream("eval", self.config.seed).close()  # eval input errors now
        every = self.config.eval_frequency
        if every:  # rounds: train to the next multiple of eval_frequency, evaluate, resume
            result = self.train(every)
            while result.end_step < self.final_step:
                self.eval(result.checkpoints[-1] if result.checkpoints else None)
                result = self.train(every, final=self.final_step)
        else:
            result = self.train()
        t0 = time.perf_counter()
        ev = self.eval(result.checkpoints[-1] if result.checkpoints else None)
        if result.perf is not None:
            result.perf.eval_time = time.perf_counter() - t0
            write_performance(self.model_dir, result.perf)
        return result, ev

    def _evaluate(
        self,
        model: Model,
        state: ckpt.TrainState | None,
        tb: Summaries,
        describe_input: bool = True,
    ) -> EvalResult:
        cfg, ex = self.config, self.executor
        step = 0
        if state is not None:
            restore_state(state, model, None, None, None)
            step = state.step
        stream = self.components.stream("eval", cfg.seed)
        try:
            source = str(getattr(stream, "source", ""))
            if source and describe_input:
                log.info(f"Evaluation data: {source}.")
            batches = cfg.eval_steps or _batches_per_epoch(stream)
            ex.load(model, None, None, self.params)
            _start(stream)
            tracker = RateTracker(clock=self.clock)
            tracker.reset()
            sums: dict[str, float] = {}
            samples = 0
            for out in ex.evaluate(stream, batches):
                for k, v in out.sums.items():
                    sums[k] = sums.get(k, 0.0) + v
                samples += out.samples
                tracker.add(out.samples)
                if out.batch % cfg.log_steps == 0 or out.batch == batches:
                    now = self.clock()
                    loss = out.sums.get("loss_sum", 0.0) / max(out.sums.get("count", 1.0), 1.0)
                    log.info(
                        f"| Eval Device={ex.device}, Step={out.batch}, Loss={loss:.5f}, "
                        f"Rate={format_rate(tracker.rate(now))}, "
                        f"GlobalRate={format_rate(tracker.global_rate(now))}"
                    )
        finally:
            stream.close()
        avg_loss, metrics = self._metrics(sums)
        tb.scalars(step, {"loss": avg_loss, **metrics})
        tb.flush()
        for name, value in metrics.items():
            log.info(f"Metric: {name} = {value}")
        log.info(f"Avg Eval Loss: {avg_loss}")
        log.info("Evaluation completed successfully!")
        result = EvalResult(step, avg_loss, metrics, samples, state.path if state else None)
        self._fire("on_eval", result)
        return result

    def _metrics(self, sums: dict[str, float]) -> tuple[float, dict[str, float]]:
        """Average loss and the derived metrics (accuracy, perplexity) from the summed counts."""
        summarize = getattr(self.components.model_class(), "summarize_metrics", None)
        if summarize is not None:  # the model's own (runtime/nn/model.py)
            metrics = dict(summarize(sums))
        else:
            count = max(sums.get("count", 0.0), 1.0)
            metrics = {"loss": sums.get("loss_sum", 0.0) / count}
            if "correct" in sums:
                metrics["accuracy"] = sums["correct"] / count
        return float(metrics.pop("loss")), metrics
