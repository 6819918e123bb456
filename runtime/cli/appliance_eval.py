"""eval, eval_all and train_and_eval with `python run.py CSX`, as Model Zoo R1.8-R2.0 runs them.

What the release does (Cerebras/modelzoo, Release_1.9.1 and Release_2.0.2,
modelzoo/common/pytorch/run_utils.py `main`, `sideband_eval_all`, `sideband_train_eval_all`;
run_cstorch_flow.py `run_cstorch_eval`): a cstorch run on the cluster knows two modes, train and
eval. The other two are run by the user node as a sequence of those, each a whole run.py run of
its own (a compile found cached, then an execute job):

    eval_all        one eval per `checkpoint_<step>` in model_dir, in step order (never with
                    --checkpoint_path: "Checkpoints inferred from model_dir");
    train_and_eval  train `eval_frequency` steps, evaluate, again, up to the run's end (the last
                    part trains what is left); a run counted in epochs evaluates after each one.

An eval runs `eval_steps` batches (runconfig, or --eval_steps), else one pass over the eval set
(Release_2.0.2: `num_epochs = 1 if eval_steps is None`). `plan_parts` turns one command line into
those parts and refuses, before anything is submitted, what a mode cannot do (UsageError, exit
2). `EvalLines` reads an eval job's result lines as they arrive and prints the client's: the
"| Eval" progress with Rate and GlobalRate measured here, then "Metric: <name> = <value>",
"Avg Eval Loss: <loss>", "Evaluation completed successfully!" and "Processed ... sample(s)",
in the order of run_cstorch_flow.py.

A `pipeline` job runs the pipelined TF flow, whose `check_env` (modelzoo/common/tf/run_utils.py)
refuses eval_all and train_and_eval on a CS system and wants eval_steps for eval: the client
refuses those up front, with the fix.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs2sim.system.errors import UsageError

__all__ = ["plan_parts", "model_dir_of", "EvalLines", "EVAL_RE"]

EVAL_RE = re.compile(r"\| Eval Device=[^,]*, Step=(\d+), Loss=([^,\s]+)")
METRIC_RE = re.compile(r"Metric: (\S+) = (\S+)\s*$")
AVG_RE = re.compile(r"Avg Eval Loss: (\S+)\s*$")


def model_dir_of(args: argparse.Namespace, raw: dict[str, Any]) -> Path:
    """-o, else the YAML's runconfig.model_dir, else ./model_dir (absolute)."""
    runconfig = raw.get("runconfig") or {}
    return Path(args.model_dir or runconfig.get("model_dir") or "model_dir").resolve()


def plan_parts(
    model_name: str,
    args: argparse.Namespace,
    params_path: Path,
    pipeline: bool,
    load: Callable[[list[str]], dict[str, Any]],
    job_argv: Callable[[argparse.Namespace, Path, Path, bool], list[str]],
) -> list[argparse.Namespace]:
    """The train and eval runs that make up `args.mode`, each as run.py CSX's own arguments;
    UsageError (one sentence, exit 2) for what the mode cannot do. `load(job_argv(...))` gives
    the effective params of the command line (YAML + flags), as the job will see them."""
    from cs2sim.runtime.params import load_params

    # the bounded loader (a 39 MB file is refused before it is parsed), as run.py's own
    model_dir = model_dir_of(args, load_params(params_path))
    if args.compile_only or args.validate_only:  # a compile job alone: no mode runs
        return [args]
    params = load(job_argv(args, params_path, model_dir, pipeline))
    if pipeline:
        _check_pipeline(model_name, args, params)
        return [args]
    if args.mode == "train":
        return [args]
    _check_eval_batch(args, params)
    if args.mode == "eval":
        _check_evaluable(args, params, model_dir)
        return [args]
    if args.mode == "eval_all":
        return [_eval_of(args, path) for path in _all_checkpoints(args, model_dir)]
    return _train_and_eval(args, params, model_dir)


def _part(args: argparse.Namespace, **changes: Any) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), **changes})


def _eval_of(args: argparse.Namespace, checkpoint: Path) -> argparse.Namespace:
    return _part(args, mode="eval", checkpoint_path=str(checkpoint), is_pretrained_checkpoint=None)


def _check_pipeline(model_name: str, args: argparse.Namespace, params: dict[str, Any]) -> None:
    """What the pipelined TF flow's check_env would refuse once the job ran."""
    drop = "drop `pipeline` to run it with weight streaming"
    if model_name == "fc_mnist" and args.mode != "train":
        raise UsageError(
            f"--mode {args.mode} of fc_mnist does not run in a pipeline job (its TF flow says "
            f'"For FC_MNIST model, only training is supported on the Cerebras System."); {drop}.'
        )
    if args.mode in ("eval_all", "train_and_eval"):
        raise UsageError(
            f"--mode {args.mode} does not run in a pipeline job (its TF flow says "
            f'"Cannot run {args.mode} mode on the Cerebras System!"); {drop}.'
        )
    if args.mode == "eval" and not (params.get("runconfig") or {}).get("eval_steps"):
        raise UsageError(
            'a pipeline eval needs eval_steps (its TF flow says "When performing eval on the '
            'Cerebras System, eval_steps must be provided."); set runconfig.eval_steps or pass '
            f"--eval_steps, or {drop}."
        )


def _check_eval_batch(args: argparse.Namespace, params: dict[str, Any]) -> None:
    """Every CS-X evaluates at least one sample of each global eval batch."""
    batch = int((params.get("eval_input") or {}).get("batch_size") or 0)
    if batch < args.num_csx:
        raise UsageError(
            f"eval_input.batch_size {batch} is smaller than --num_csx {args.num_csx}: every "
            "CS-X needs at least one sample of the global batch; raise eval_input.batch_size "
            "or lower --num_csx."
        )


def _checkpoints(model_dir: Path) -> list[Path]:
    """The checkpoints in model_dir in global-step order (Model Zoo's get_checkpoints)."""
    from cs2sim.runtime.artifacts.checkpoint import list_checkpoints, step_of

    return sorted(list_checkpoints(model_dir), key=lambda p: step_of(p) or 0)


def _given_checkpoint(args: argparse.Namespace) -> Path | None:
    """--checkpoint_path as the job will open it; UsageError when there is no such file."""
    from cs2sim.runtime.artifacts.checkpoint import resolve_checkpoint_path

    if args.checkpoint_path is None:
        return None
    path = resolve_checkpoint_path(Path(args.checkpoint_path).resolve())
    if not path.is_file():
        raise UsageError(
            f"--checkpoint_path {args.checkpoint_path} is not a file; pass a checkpoint of "
            "model_dir (model-ckpt-<step>.npz)."
        )
    return path


def _check_evaluable(args: argparse.Namespace, params: dict[str, Any], model_dir: Path) -> None:
    """An eval has weights to evaluate: --checkpoint_path, a checkpoint in model_dir, or random
    weights on purpose (runconfig.eval_random_weights)."""
    if _given_checkpoint(args) is not None or _checkpoints(model_dir):
        return
    if not (params.get("runconfig") or {}).get("eval_random_weights"):
        raise UsageError(
            f'No checkpoint to evaluate in "{model_dir}"; train first (--mode train), pass '
            "--checkpoint_path, or set runconfig.eval_random_weights to evaluate randomly "
            "initialized weights on purpose."
        )


def _all_checkpoints(args: argparse.Namespace, model_dir: Path) -> list[Path]:
    """eval_all's checkpoints: every one in model_dir, in step order."""
    if args.checkpoint_path is not None:
        raise UsageError(
            '--checkpoint_path cannot be given with --mode eval_all ("Checkpoint path cannot '
            'be provided with eval_all. Checkpoints inferred from model_dir"); drop it, or use '
            "--mode eval to evaluate that one checkpoint."
        )
    found = _checkpoints(model_dir)
    if not found:
        raise UsageError(
            f'No checkpoints found at "{model_dir}"; train first (--mode train) or point '
            "--model_dir at a trained run."
        )
    return found


def _train_and_eval(
    args: argparse.Namespace, params: dict[str, Any], model_dir: Path
) -> list[argparse.Namespace]:
    """Train to each evaluation point, evaluating the checkpoint written there."""
    from cs2sim.runtime.artifacts.checkpoint import checkpoint_file, step_of
    from cs2sim.runtime.training.runconfig import LoopConfig

    rc = params.get("runconfig") or {}
    for other in ("num_epochs", "steps_per_epoch"):
        if rc.get("num_steps") is not None and rc.get(other) is not None:
            raise UsageError(
                f"runconfig sets both num_steps and {other}, which train_and_eval cannot both "
                "follow; keep one."
            )
    if rc.get("num_epochs") and not rc.get("steps_per_epoch"):
        raise UsageError(
            "train_and_eval on the cluster evaluates after each epoch only when "
            "runconfig.steps_per_epoch says how long one is; set steps_per_epoch, or count the "
            "run in steps (max_steps or num_steps) with runconfig.eval_frequency."
        )
    counted_in_epochs = bool(rc.get("num_epochs")) and not (
        rc.get("max_steps") or rc.get("steps") or rc.get("num_steps")
    )
    every = rc.get("eval_frequency") or (rc["steps_per_epoch"] if counted_in_epochs else None)
    if not every:
        raise UsageError(
            "train_and_eval needs runconfig.eval_frequency, the training steps between "
            'evaluations (Model Zoo: "eval_frequency is needed to dictate how many train '
            'steps before each eval"); add it to runconfig.'
        )
    given = _given_checkpoint(args)
    if given is not None:
        start = 0 if args.is_pretrained_checkpoint else step_of(given) or 0
    elif rc.get("autoload_last_checkpoint", True) and _checkpoints(model_dir):
        from cs2sim.runtime.artifacts.checkpoint import list_checkpoints

        start = step_of(list_checkpoints(model_dir)[-1]) or 0  # the one a resume loads
    else:
        start = 0
    stop = LoopConfig.from_params(params).stop_step(start, int(rc.get("steps_per_epoch") or 1))
    if stop <= start:
        raise UsageError(
            f"global step {start} already reaches the run's end ({stop}), so train_and_eval has "
            "nothing to train; raise max_steps, or use --mode eval."
        )
    ends = [*range(start + every, stop, every), stop]
    parts: list[argparse.Namespace] = []
    for i, end in enumerate(ends):
        # every part after the first resumes from the checkpoint the one before it wrote
        resume = {} if i == 0 else {"checkpoint_path": str(checkpoint_file(model_dir, ends[i - 1]))}
        first = {} if i == 0 else {"is_pretrained_checkpoint": None}
        parts.append(_part(args, mode="train", max_steps=end, **resume, **first))
        parts.append(_eval_of(args, checkpoint_file(model_dir, end)))
    return parts


class EvalLines:
    """An eval job's result lines -> the client's, with Rate and GlobalRate measured here.

    `say(key, **values)` prints a line of runtime/cli/appliance_lines.py; `tracker` counts from
    the moment the job said its executable was loaded; `begin()` prints the staging lines still
    due before the first result."""

    def __init__(
        self, say: Callable[..., None], tracker: Any, batch: int, begin: Callable[[], None]
    ) -> None:
        self.say, self.tracker, self.batch, self.begin = say, tracker, batch, begin
        self.step = 0
        self.avg_loss: str | None = None

    def line(self, text: str) -> bool:
        """Print what `text` (a line of the job's log) says, if it is an eval result."""
        from cs2sim.runtime.training.metrics import format_rate

        m = EVAL_RE.search(text)
        if m is not None:
            self.begin()
            step = int(m.group(1))
            self.tracker.add(max(0, step - self.step) * self.batch)
            self.step = step
            now = self.tracker.clock()
            self.say(
                "eval",
                step=step,
                loss=m.group(2),
                rate=format_rate(self.tracker.rate(now)),
                global_rate=format_rate(self.tracker.global_rate(now)),
            )
            return True
        m = METRIC_RE.search(text)
        if m is not None:
            self.begin()
            self.say("eval_metric", name=m.group(1), value=m.group(2))
            return True
        m = AVG_RE.search(text)
        if m is not None:
            self.begin()
            self.avg_loss = m.group(1)
            self.say("eval_loss", loss=self.avg_loss)
            return True
        return False

    def succeeded(self) -> None:
        """The job ended well: the closing lines, once its result has been seen."""
        self.begin()
        # (a job run with --logging WARNING or ERROR logs no result lines: none is printed,
        # none is made up)
        self.say("eval_completed")
        self.say("processed", samples=int(self.tracker.total_count), seconds=self.tracker.elapsed())
