"""The loop's view of a run: `LoopConfig` (how long, how often) and `Components` (the parts).

`LoopConfig` reads the canonical runconfig keys of VALIDATED params: runtime/params.py has
already folded the TF spellings (save_summary_steps, save_checkpoints_steps, tf_random_seed)
into them, in one alias table, and filled the defaults.

Steps: global step N means N updates have been applied (skipped DLS steps count, as in TF).
`max_steps` runs until global step N (incremental); `steps` (TF) or `num_steps` (PyTorch) runs
N more; else `num_epochs` epochs of `steps_per_epoch` (default: one pass over the data).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cs2sim.runtime import registry
from cs2sim.runtime.data import build_input
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.numerics.loss_scale import StaticLossScaler, build_loss_scaler
from cs2sim.runtime.numerics.optim import Optimizer, build_optimizer
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.system.errors import ConfigError

__all__ = ["LoopConfig", "Components"]


@dataclass(frozen=True)
class LoopConfig:
    """How long to run, how often to log and checkpoint: the loop's view of runconfig."""

    max_steps: int | None = None  # run until this global step
    steps: int | None = None  # run this many more steps
    num_steps: int | None = None  # PyTorch spelling of steps
    log_steps: int = 100  # console lines
    summary_steps: int = 100  # TensorBoard summaries (TF: save_summary_steps; PyTorch: log_steps)
    checkpoint_steps: int = 0  # 0: only at the end
    keep_checkpoint_max: int | None = 5  # 0 or None: keep all
    eval_steps: int | None = None  # None: one pass over the eval data
    eval_frequency: int | None = None  # train_and_eval: evaluate every N steps, not only at the end
    check_loss_values: bool = True
    autoload_last_checkpoint: bool = True
    checkpoint_path: str | None = None
    is_pretrained_checkpoint: bool = False  # checkpoint_path: weights only from step 0
    eval_random_weights: bool = False  # eval may run without any checkpoint
    save_initial_checkpoint: bool = False
    seed: int = 1
    num_epochs: int | None = None
    steps_per_epoch: int | None = None
    standard_logs: bool = True  # runconfig.disable_standard_logs turns the per-step lines off

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> LoopConfig:
        """Read runconfig (canonical keys; absent ones take the defaults above)."""
        rc = {k: v for k, v in (params.get("runconfig") or {}).items() if v is not None}
        eval_steps = rc.get("eval_steps")
        return cls(
            max_steps=rc.get("max_steps"),
            steps=rc.get("steps"),
            num_steps=rc.get("num_steps"),
            log_steps=int(rc.get("log_steps", cls.log_steps)),
            summary_steps=int(
                rc.get("save_summary_steps") or rc.get("log_steps") or cls.summary_steps
            ),
            checkpoint_steps=int(rc.get("checkpoint_steps", cls.checkpoint_steps)),
            keep_checkpoint_max=rc.get("keep_checkpoint_max", cls.keep_checkpoint_max),
            eval_steps=eval_steps if eval_steps and eval_steps > 0 else None,
            eval_frequency=rc.get("eval_frequency"),
            check_loss_values=bool(rc.get("check_loss_values", True)),
            autoload_last_checkpoint=bool(rc.get("autoload_last_checkpoint", True)),
            checkpoint_path=rc.get("checkpoint_path"),
            is_pretrained_checkpoint=bool(rc.get("is_pretrained_checkpoint", False)),
            eval_random_weights=bool(rc.get("eval_random_weights", False)),
            save_initial_checkpoint=bool(rc.get("save_initial_checkpoint", False)),
            seed=int(rc.get("seed", cls.seed)),
            num_epochs=rc.get("num_epochs"),
            steps_per_epoch=rc.get("steps_per_epoch"),
            standard_logs=not rc.get("disable_standard_logs", False),
        )

    def stop_step(self, start: int, steps_per_epoch: int) -> int:
        """The global step this run ends at."""
        if self.steps is not None and self.max_steps is not None:
            raise ConfigError(
                "runconfig sets both steps and max_steps; keep one (steps runs N more steps, "
                "max_steps runs until global step N)."
            )
        if self.steps is not None:
            return start + int(self.steps)
        if self.max_steps is not None:
            return int(self.max_steps)
        if self.num_steps is not None:
            return start + int(self.num_steps)
        if self.num_epochs:
            return start + int(self.num_epochs) * int(self.steps_per_epoch or steps_per_epoch)
        raise ConfigError(
            "runconfig sets neither max_steps nor num_epochs; set one, or pass --max_steps N "
            "or --steps N."
        )


class Components:
    """Builds the model, optimizer, loss scaler and input streams from validated params."""

    def __init__(
        self,
        model_name: str,
        params: dict[str, Any],
        half: str,
        stream_fn: Callable[[dict[str, Any], str, str, int], Any] = build_input,
    ) -> None:
        self.model_name, self.params, self.half = model_name, params, half
        self.stream_fn = stream_fn  # (params, split, model_name, seed) -> a batch stream

    def model_class(self) -> type[Model]:
        """The model's class, from the model table."""
        return registry.get(self.model_name)

    def model(self, seed: int) -> Model:
        """A freshly initialised model."""
        return registry.build(self.model_name, self.params["model"], Policy(self.half), seed)

    def optimizer(self, model: Model) -> Optimizer:
        """The optimizer over the model's master weights."""
        return build_optimizer(self.params["optimizer"], model.parameters(), self.half)

    def scaler(self) -> StaticLossScaler:
        """The static or dynamic loss scaler."""
        return build_loss_scaler(self.params["optimizer"], self.half)

    def stream(self, split: str, seed: int) -> Any:
        """The input stream of `split` ("train" | "eval"): built in this process, or, for a
        launched chief, fed by its streamer tasks (cli passes runtime/job/remote_stream.py's
        streamed_input as stream_fn)."""
        return self.stream_fn(self.params, split, self.model_name, seed)
