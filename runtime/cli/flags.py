"""run.py's command line: Model Zoo's run.py flags, the checks it makes on them, where a run's
params file is found, and which runconfig values the flags set.

The flags and the refusal messages are those of Model Zoo's run.py (docs/sources.md);
runtime/cli/main.py parses with `build_parser` and then runs the mode.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from cs2sim.runtime.cli.compile_run import COMPILE_MODES
from cs2sim.runtime.cli.compile_run import add_flags as add_compile_flags
from cs2sim.runtime.cli.compile_run import stop_after as compile_stop
from cs2sim.system.errors import UsageError

__all__ = [
    "MODES",
    "DEFAULT_PARAMS",
    "ParserExit",
    "RunParser",
    "build_parser",
    "appliance_job",
    "check_eval_steps",
    "check_flags",
    "cli_overrides",
    "default_params",
    "model_home",
    "script_dir",
]

MODES = ("train", "eval", "eval_all", "train_and_eval")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
EXECUTION_STRATEGIES = ("pipeline", "weight_streaming")
DEFAULT_PARAMS = {"fc_mnist": "configs/params.yaml"}  # other models require -p

# Model Zoo's run.py validation messages, verbatim (docs/sources.md)
MSG_ONE_OF = "Please only use one of validate_only and compile_only."
MSG_FC_MNIST_CS = "For FC_MNIST model, only training is supported on the Cerebras System."
MSG_MULTIREPLICA = "Multi-replica training is only possible on the Cerebras System."
MSG_CS_MODE = "Cannot run {} mode on the Cerebras System!"
MSG_CS_EVAL_STEPS = "When performing eval on the Cerebras System, eval_steps must be provided."
HOST_DEVICES = ("cpu", "/cpu:0", "/device:cpu:0")


def model_home(model_name: str) -> Path:
    """The directory of a built-in model's run.py and configs/ in this installation."""
    return Path(__file__).resolve().parents[1] / "modelzoo" / model_name


def script_dir() -> Path | None:
    """The directory of the script this process runs by path (`python run.py`), None in an
    interpreter or under `python -m ...` (a test runner, a tool)."""
    main = sys.modules.get("__main__")
    main_file = getattr(main, "__file__", None)
    if not main_file or getattr(main, "__spec__", None) is not None:
        return None
    return Path(main_file).resolve().parent


def default_params(model_name: str, home: Path | None) -> tuple[Path, str]:
    """The params file a run without -p uses, and how it was found (for the "Params file:"
    line): `configs/params.yaml` next to the run.py (`home`), else in the working directory.
    Never the installation's copy: a copied model directory is the user's own."""
    rel = DEFAULT_PARAMS[model_name]
    places = [(home, "next to run.py")] if home is not None else []
    places.append((Path.cwd(), "in the working directory"))
    for where, how in places:
        path = where / rel
        if path.is_file():
            return path, how
    looked = " or ".join(dict.fromkeys(str(w / rel) for w, _ in places))
    raise UsageError(
        f"no -p/--params given and there is no {looked}; pass -p with your params file."
    )


class ParserExit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


class RunParser(argparse.ArgumentParser):
    """argparse that raises instead of printing and exiting (runtime/ never exits)."""

    writer: Callable[[str], None] = staticmethod(lambda text: None)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}; run with --help for the flags.")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self.writer(message)
        raise ParserExit(status)

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            self.writer(message)


def build_parser(model_name: str, writer: Callable[[str], None] = lambda t: None) -> RunParser:
    """The run.py parser (Model Zoo's run.py, docs/sources.md); store_true flags default to None so
    the YAML stays."""
    p = RunParser(
        prog="run.py",
        description=f"Train or evaluate {model_name} (cs2sim Model Zoo).",
        allow_abbrev=False,
    )  # `--param x` must not pass for --params
    p.writer = writer
    _add_run_target_flags(p, model_name)
    _add_step_flags(p)
    _add_checkpoint_flags(p)
    p.add_argument(
        "--logging",
        default=None,
        type=str.upper,
        choices=LOG_LEVELS,
        help="Log level: DEBUG, INFO, WARNING or ERROR (default: runconfig.logging, INFO).",
    )
    _add_layout_flags(p)
    _add_compile_mode_flags(p)
    add_compile_flags(p)
    p.add_argument(
        "--traceback",
        action="store_true",
        help="Show the Python traceback of an error (for bug reports).",
    )
    return p


def _add_run_target_flags(p: RunParser, model_name: str) -> None:
    """What to run and where: --mode, --params (its default per model), --model_dir, --cs_ip."""
    default_params = DEFAULT_PARAMS.get(model_name)
    p.add_argument(
        "-m",
        "--mode",
        required=True,
        choices=MODES + COMPILE_MODES,
        help="What to run: train, eval, eval_all or train_and_eval; validate_only or "
        "compile_only to compile for the CS-2 without training.",
    )
    p.add_argument(
        "-p",
        "--params",
        required=default_params is None,
        default=None,
        help="Path to the params YAML"
        + (
            f" (default: {default_params} next to run.py, else in the working directory)."
            if default_params
            else "."
        ),
    )
    p.add_argument(
        "-o",
        "--model_dir",
        default=None,
        help="Model directory where checkpoints will be written. If directory exists, "
        "weights are loaded from the checkpoint file.",
    )
    p.add_argument(
        "--cs_ip",
        default=None,
        help="IP address of the Cerebras System, defaults to None (train on the host).",
    )


def _add_step_flags(p: RunParser) -> None:
    """How many steps, and the steps between summaries and checkpoints."""
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="Number of steps to run mode train. Runs repeatedly for the specified number.",
    )
    p.add_argument(
        "--max_steps",
        type=int,
        default=None,
        help="Number of total steps to run mode train. Runs incrementally till the "
        "specified number.",
    )
    p.add_argument(
        "--eval_steps",
        type=int,
        default=None,
        help="Number of batches to evaluate (<= 0: the whole eval set).",
    )
    p.add_argument(
        "--save_summary_steps",
        type=int,
        default=None,
        help="Steps between console logs and TensorBoard summaries.",
    )
    p.add_argument(
        "--save_checkpoints_steps", type=int, default=None, help="Steps between checkpoints."
    )


def _add_checkpoint_flags(p: RunParser) -> None:
    """The checkpoint to start from, and whether eval may run without one."""
    p.add_argument(
        "--checkpoint_path",
        default=None,
        help="Checkpoint to resume from (weights, optimizer, data position and "
        "step), as Model Zoo's PyTorch run.py; with --is_pretrained_checkpoint "
        "only its weights are loaded and training starts at step 0 (what the TF "
        "run.py's --checkpoint_path always does).",
    )
    p.add_argument(
        "--is_pretrained_checkpoint",
        action="store_true",
        default=None,
        help="--checkpoint_path is a pretrained model: load its weights only and start at step 0.",
    )
    p.add_argument(
        "--eval_random_weights",
        action="store_true",
        default=None,
        help="Let --mode eval run without any checkpoint (random weights); without "
        "it that is an error.",
    )


def _add_layout_flags(p: RunParser) -> None:
    """How the run is laid out: systems, weight servers, strategy, mounts, replicas."""
    p.add_argument(
        "--num_csx",
        type=int,
        default=None,
        help="Number of CS-X systems (weight streaming); default 1.",
    )
    p.add_argument(
        "--num_wgt_servers",
        type=int,
        default=None,
        help="Number of MemoryX weight servers (weight streaming); default 12.",
    )
    p.add_argument(
        "--execution_strategy",
        default=None,
        choices=EXECUTION_STRATEGIES,
        help="pipeline or weight_streaming.",
    )
    p.add_argument(
        "--mount_dirs",
        nargs="*",
        default=None,
        help="Directories to mount in the appliance's containers.",
    )
    p.add_argument(
        "--python_paths",
        nargs="*",
        default=None,
        help="Paths to add to PYTHONPATH in the appliance's containers.",
    )
    p.add_argument(
        "--multireplica",
        action="store_true",
        default=None,
        help="Run multiple copies of the model data-parallel on the wafer at the same time.",
    )


def _add_compile_mode_flags(p: RunParser) -> None:
    """The compile-only modes given as flags, and the device."""
    p.add_argument(
        "--validate_only",
        action="store_true",
        default=None,
        help="Compile model up to kernel matching.",
    )
    p.add_argument(
        "--compile_only",
        action="store_true",
        default=None,
        help="Compile model completely, generating compiled executables.",
    )
    p.add_argument(
        "--device", default=None, help="Force model to run on a specific device (here: cpu)."
    )


def check_flags(model_name: str, args: argparse.Namespace) -> None:
    """The flag combinations Model Zoo's run.py refuses (docs/sources.md), then the CS-2-only flags
    (UsageError)."""
    if args.validate_only and args.compile_only:
        raise UsageError(MSG_ONE_OF)
    on_cs = args.cs_ip is not None and not compile_stop(args)  # a compile runs on the host
    if args.multireplica and not (on_cs or compile_stop(args)):
        raise UsageError(MSG_MULTIREPLICA)
    if on_cs and not appliance_job():
        if model_name == "fc_mnist" and args.mode != "train":
            raise UsageError(MSG_FC_MNIST_CS)
        if args.mode in ("eval_all", "train_and_eval"):
            raise UsageError(MSG_CS_MODE.format(args.mode))
    if args.device is not None and args.device.lower() not in HOST_DEVICES:
        raise UsageError(
            f"--device {args.device} is not available: this version of cs2sim "
            "runs on the host CPU only (--device cpu)."
        )


def appliance_job() -> bool:
    """This run is a cluster server's execute wsjob. Its rules are the Model Zoo R1.9+ PyTorch
    run utilities' (modelzoo/common/pytorch/run_utils.py, run_cstorch_flow.py), not the
    pipelined-era TF `check_env` above: eval runs, with runconfig.eval_steps or one pass over
    the eval set, and the client (runtime/cli/appliance_eval.py) has already split eval_all and
    train_and_eval into train and eval jobs."""
    from cs2sim.system import knobs

    return bool(knobs.raw("CS2SIM_WSJOB"))


def check_eval_steps(args: argparse.Namespace, runconfig: dict[str, Any]) -> None:
    """TF `check_env`'s eval rule, on the effective runconfig as Model Zoo checks it (the YAML's
    eval_steps counts, not only --eval_steps): a pipelined CS-2 eval needs eval_steps."""
    on_cs = args.cs_ip is not None and not compile_stop(args)
    if on_cs and not appliance_job() and args.mode == "eval" and not runconfig.get("eval_steps"):
        raise UsageError(MSG_CS_EVAL_STEPS)


def cli_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(CLI values for runconfig, runconfig keys the CLI clears).

    A flag saying how long to run beats the YAML's other way of saying it: `--steps` clears the
    YAML's max_steps, `--max_steps` its steps (and both clear num_steps / num_epochs).
    """
    values = {
        k: v
        for k, v in vars(args).items()
        if k not in ("params", "params_given", "params_found", "traceback", "home", "split")
        and v is not None
    }
    clears: tuple[str, ...] = ()
    if args.steps is not None:
        clears = ("max_steps", "num_steps", "num_epochs")
    elif args.max_steps is not None:
        clears = ("steps", "num_steps", "num_epochs")
    return values, clears
