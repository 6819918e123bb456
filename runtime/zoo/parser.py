"""The `cszoo` command line: its subcommands, flags and help texts (Model Zoo's `cli/main.py`,
`cli/utils.py` add_run_args, `cli/config_mgmt_cli.py`, `cli/checkpoint_cli.py`; github
Cerebras/modelzoo). Each subcommand names its handler (`func`): a function of the
namespace that returns the text to print, or run.py's exit code. Usage errors exit 2
(argparse)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

__all__ = ["build_parser", "EPILOG"]

PROG = "cszoo"
EPILOG = f"""Use `{PROG} <cmd> -h` to learn how to use individual sub-commands.

List all models:
  $ {PROG} model list
Get additional information on gpt2:
  $ {PROG} model info gpt2
List all data processors:
  $ {PROG} data_processor list
Copy config file to local workdir:
  $ {PROG} config pull gpt2_tiny -o workdir
Validate config file:
  $ {PROG} config validate workdir/params_tiny.yaml
Convert a legacy config to the trainer format:
  $ {PROG} config convert_legacy workdir/params_tiny.yaml -o workdir
Train a gpt2 model:
  $ {PROG} fit workdir/params_tiny_v2.yaml
Validate a gpt2 model:
  $ {PROG} validate workdir/params_tiny_v2.yaml
Convert a Hugging Face checkpoint for training here:
  $ {PROG} checkpoint convert --model gpt2 --src-fmt hf --tgt-fmt cs-2.4 \\
        --config hf_gpt2/config.json hf_gpt2/model.safetensors -o cs_gpt2
"""
OUT_HELP = (
    "Path to save the config file to. If it's a directory, the config file is saved to "
    "that directory. By default, the current working directory."
)
TRAINER_DOCS = "https://docs.cerebras.net/en/latest/wsc/Model-zoo/trainer-overview.html"


def _handler(module: str, name: str, *bound: Any) -> Callable[[argparse.Namespace], Any]:
    """The handler, imported when it runs (so `cszoo -h` and `cszoo model list` stay fast)."""

    def run(args: argparse.Namespace) -> Any:
        import importlib

        fn = getattr(importlib.import_module(f"cs2sim.runtime.zoo.{module}"), name)
        return fn(*bound, args)

    return run


def _run_args(p: argparse.ArgumentParser) -> None:
    """The flags of fit / validate / validate_all (Model Zoo's add_run_args). None = not given:
    the file's value stands."""
    p.add_argument("params", help="Path to .yaml file with model parameters.")
    p.add_argument(
        "--target_device",
        type=str.upper,
        choices=("CPU", "CSX"),
        help="Target device to run on: CPU (this host) or CSX (the Wafer-Scale Cluster); "
        "default: the file's trainer.init.backend.backend_type.",
    )
    p.add_argument("-o", "--model_dir", help="Model directory where checkpoints will be written.")
    p.add_argument("--checkpoint_path", help="Checkpoint to initialize weights from.")
    p.add_argument(
        "--load_checkpoint_states",
        help="Which states of --checkpoint_path to load: all (default: weights, optimizer and "
        "step) or model (the weights only, from step 0).",
    )
    p.add_argument(
        "--logging",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="Specifies the default logging level. Defaults to INFO.",
    )
    only = p.add_mutually_exclusive_group()
    only.add_argument("--compile_only", action="store_true", help="Enables compile only workflow.")
    only.add_argument(
        "--validate_only", action="store_true", help="Enables validate only workflow."
    )
    p.add_argument(
        "--job_labels",
        nargs="+",
        metavar="KEY=VALUE",
        help="A list of equal-sign-separated key value pairs served as job labels.",
    )
    p.add_argument(
        "--job_priority",
        choices=("p1", "p2", "p3"),
        help="Priority of the job: p1 (highest) to p3; default p2.",
    )
    p.add_argument(
        "--mount_dirs",
        nargs="+",
        help="A list of paths to be mounted to the appliance containers.",
    )
    p.add_argument(
        "--python_paths",
        nargs="+",
        help="A list of paths to be exported into PYTHONPATH for worker containers.",
    )
    p.add_argument("--credentials_path", help="Credentials for cluster access (TLS certificate).")
    p.add_argument("--mgmt_address", help="<host>:<port> for cluster management.")
    p.add_argument(
        "--disable_version_check",
        action="store_true",
        help="Disable version check for local experimentation and debugging.",
    )
    p.add_argument("--num_csx", type=int, help="Number of CS nodes. Defaults to 1.")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    fmt = argparse.RawTextHelpFormatter
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Cerebras ModelZoo CLI. This serves as a single entry-point to all ModelZoo "
        "related tasks including: training and validation, checkpoint conversion, data "
        "preprocessing and config management.",
        epilog=EPILOG,
        formatter_class=fmt,
    )
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="<cmd>")
    _add_run_commands(sub)
    _add_model_commands(sub)
    _add_data_processor_commands(sub)
    _add_config_commands(sub)
    _add_preprocess_commands(sub)
    _add_checkpoint_commands(sub, fmt)
    return parser


def _add_run_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """fit, validate and validate_all: run.py's modes as the trainer's methods."""
    for method, text in (
        ("fit", "Run a model by calling fit. This completes a full training run on the given "
         "train and validation dataloaders."),
        ("validate", "Run a model by calling validate. This completes a full validation run on "
         "the specified validation dataloader."),
        ("validate_all", "Run a model by calling validate_all. This runs validation on every "
         "checkpoint in the model directory."),
    ):  # fmt: skip
        p = sub.add_parser(method, help=text, description=text, epilog=TRAINER_DOCS)
        _run_args(p)
        p.set_defaults(func=_handler("run", "run_method", method))


def _add_model_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`model list` and `model info`."""
    model = sub.add_parser("model", help="Get information on available models.")
    msub = model.add_subparsers(dest="action", required=True, metavar="<action>")
    msub.add_parser("list", help="List all models.").set_defaults(
        func=_handler("tables", "model_list")
    )
    mi = msub.add_parser("info", help="Get information on a model: its configs and keys.")
    mi.add_argument("model", help="Name of the model (see `cszoo model list`).")
    mi.set_defaults(func=_handler("tables", "model_info"))


def _add_data_processor_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`data_processor list` and `data_processor info`."""
    data = sub.add_parser("data_processor", help="Get information on available data processors.")
    dsub = data.add_subparsers(dest="action", required=True, metavar="<action>")
    dsub.add_parser("list", help="List all data processors.").set_defaults(
        func=_handler("tables", "processor_list")
    )
    di = dsub.add_parser("info", help="Get information on a data processor.")
    di.add_argument("data_processor", help="Name of the data processor.")
    di.set_defaults(func=_handler("tables", "processor_info"))


def _add_config_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`config` pull, validate, convert_legacy, diff and stats."""
    config = sub.add_parser("config", help="Manage model config files.")
    csub = config.add_subparsers(dest="action", required=True, metavar="<action>")
    pull = csub.add_parser(
        "pull", help="Saves a config file with a given variant name to the local workspace."
    )
    pull.add_argument("variant", help="Config variant name to load (e.g. gpt2_tiny).")
    pull.add_argument("-o", "--out", help=OUT_HELP)
    pull.set_defaults(func=_handler("configs", "pull"))
    val = csub.add_parser("validate", help="Validate the provided config file.")
    val.add_argument("config", help="Config file to validate.")
    val.set_defaults(func=_handler("configs", "validate"))
    conv = csub.add_parser(
        "convert_legacy", help="Convert a legacy params file to the updated format."
    )
    conv.add_argument("config", help="Config file to convert.")
    conv.add_argument("-o", "--out", help=OUT_HELP)
    conv.add_argument("--model", help="The model of a legacy file whose model section has no name.")
    conv.set_defaults(func=_handler("configs", "convert_legacy"))
    diff = csub.add_parser("diff", help="Find the difference between two config files.")
    diff.add_argument("left", help="Left config file to diff.")
    diff.add_argument("right", help="Right config file to diff.")
    diff.add_argument(
        "-v",
        "--verbose_level",
        type=int,
        default=2,
        choices=(0, 1, 2),
        help="0: the changed key paths only; 1: and the added and removed ones; 2 (default): "
        "and the values.",
    )
    diff.set_defaults(func=_handler("configs", "diff"))
    stats = csub.add_parser(
        "stats", help="Get relevant statistics for a model based on an input config file."
    )
    stats.add_argument("params", help="Path to .yaml file with model parameters.")
    stats.add_argument(
        "--order_by", help="Name or comma-separated list of names of columns to sort the table by."
    )
    stats.add_argument(
        "--descending",
        action="store_true",
        help="Whether to sort in descending order when `order_by` is provided.",
    )
    stats.set_defaults(func=_handler("configs", "stats"))


def _add_preprocess_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`data_preprocess` list, pull and run."""
    pre = sub.add_parser("data_preprocess", help="Run data preprocessing.")
    psub = pre.add_subparsers(dest="action", required=True, metavar="<action>")
    psub.add_parser("list", help="List all data preprocessing configurations.").set_defaults(
        func=_handler("preprocess", "list_configs")
    )
    ppull = psub.add_parser("pull", help="Copy a data preprocessing configuration.")
    ppull.add_argument("name", help="Name of the configuration (see `list`).")
    ppull.add_argument("-o", "--out", help=OUT_HELP)
    ppull.set_defaults(func=_handler("preprocess", "pull"))
    prun = psub.add_parser("run", help="Run data preprocessing using the given configuration.")
    prun.add_argument("--config", required=True, help="Path to the preprocessing YAML.")
    prun.set_defaults(func=_handler("preprocess", "run"))


def _add_checkpoint_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], fmt: type[argparse.HelpFormatter]
) -> None:
    """`checkpoint info` and `checkpoint convert` (Hugging Face <-> cs)."""
    ckpt = sub.add_parser(
        "checkpoint", help="Get information on or perform some action on a checkpoint(s)"
    )
    ksub = ckpt.add_subparsers(dest="action", required=True, metavar="<action>")
    info = ksub.add_parser("info", help="Gives a high level summary of a checkpoint.")
    info.add_argument("ckpt_path", help="A checkpoint (.npz, or a Hugging Face directory).")
    info.set_defaults(func=_handler("hf_convert", "info"))
    conv = ksub.add_parser(
        "convert",
        help="Convert a checkpoint between CS and HuggingFace.",
        formatter_class=fmt,
    )
    conv.add_argument(
        "checkpoint_path",
        help="Checkpoint file to convert (a .npz, or a Hugging Face model.safetensors or its "
        "directory).",
    )
    conv.add_argument("--model", required=True, help="Name of model: gpt2, llama or bert.")
    conv.add_argument(
        "--src-fmt", required=True, dest="src_fmt", help='Format of input: "hf" or "cs-X.X".'
    )
    conv.add_argument(
        "--tgt-fmt", required=True, dest="tgt_fmt", help='Format of output: "hf" or "cs-X.X".'
    )
    conv.add_argument(
        "--config",
        required=True,
        help="Config file corresponding to checkpoint (config.json for hf, the params YAML "
        "for cs).",
    )
    conv.add_argument(
        "-o",
        "--output-dir",
        dest="output_dir",
        help="Output directory. Default: directory of input checkpoint/config.",
    )
    conv.set_defaults(func=_handler("hf_convert", "convert"))
