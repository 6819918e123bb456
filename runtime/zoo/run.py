"""`cszoo fit | validate | validate_all PARAMS`: the run.py of the file's model, in the mode of
the method, where the backend says (Model Zoo's `cli/main.py` run_trainer; github
Cerebras/modelzoo).

The params file may be in either format; the model is the trainer file's
`trainer.init.model.name` (a legacy file's `model.name`). `CPU` runs on this host exactly as
`python run.py CPU -p PARAMS -m MODE`; `CSX` submits compile and execute wsjobs to the cluster
management server exactly as `python run.py CSX -p PARAMS -m MODE` (runtime/cli/main.py hands
that to runtime/cli/appliance.py). Only the flags the user gave on the command line override the
file (Model Zoo injects the specified args only); the cluster flags of the file
(`init.backend.cluster_config`) are the defaults of the command line's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cs2sim.runtime.cli.main import main as run_py
from cs2sim.runtime.params import load_params
from cs2sim.runtime.trainer_format.convert import METHODS, front_end, is_trainer, to_legacy
from cs2sim.system.errors import ConfigError

__all__ = ["MODES", "run_method", "run_argv"]

# cszoo method -> run.py mode (Model Zoo: fit = train_and_eval, validate = eval, ...)
MODES = {"fit": "train_and_eval", "validate": "eval", "validate_all": "eval_all"}
# flags passed on to run.py as they are, when given
PASSED = ("model_dir", "checkpoint_path", "logging", "num_csx")
# flags of the cluster only (runtime/cli/appliance.py's parser)
CLUSTER = ("job_labels", "job_priority", "mount_dirs", "python_paths", "mgmt_address",
           "credentials_path", "job_time_sec", "compile_dir")  # fmt: skip


def _model_and_device(
    raw: dict[str, Any], method: str, source: str
) -> tuple[str, str | None, dict[str, Any]]:
    if is_trainer(raw):
        if isinstance(raw["trainer"], list):
            to_legacy(raw, method=method, source=source)  # refused in one sentence
        t = front_end(raw, source)  # run.py validates the whole file where it runs
        assert t.model is not None
        return t.model, t.device, t.flags
    name = (raw.get("model") or {}).get("name") if isinstance(raw.get("model"), dict) else None
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"{source}: a legacy params file needs model.name for cszoo (the model to run); "
            "add it, or convert the file with `cszoo config convert_legacy`."
        )
    return name, None, {}


def run_argv(method: str, args: argparse.Namespace) -> tuple[str, list[str]]:
    """(model, the run.py command line) of a cszoo run: `CSX ...` for the cluster."""
    source = str(args.params)
    raw = load_params(args.params)
    model, device, flags = _model_and_device(raw, METHODS[MODES[method]], source)
    device = (args.target_device or device or "").upper() or None
    if device is None:
        raise ConfigError(
            f"{source}: no backend: set trainer.init.backend.backend_type (CPU or CSX) in the "
            "file or pass --target_device CPU|CSX."
        )
    if device == "CPU" and is_trainer(raw):  # refused here, before run.py's first line
        to_legacy(raw, model, method=METHODS[MODES[method]], source=source)
    mode = MODES[method]
    if method == "fit" and is_trainer(raw):
        fit = raw["trainer"].get("fit") or {}
        if "val_dataloader" not in fit:
            mode = "train"  # Model Zoo: fit without a val_dataloader only trains
    argv = ["-p", str(Path(args.params)), "-m", mode]
    for name in PASSED:
        value = getattr(args, name, None)
        if value is not None:
            argv += [f"--{name}", str(value)]
    if args.load_checkpoint_states is not None:
        from cs2sim.runtime.trainer_format.convert import load_states

        if load_states(args.load_checkpoint_states, "--load_checkpoint_states", "command line"):
            argv.append("--is_pretrained_checkpoint")
    for name in ("compile_only", "validate_only"):
        if getattr(args, name, False):
            argv.append(f"--{name}")
    if device == "CPU":
        return model, argv
    cluster: dict[str, Any] = {**flags}
    for name in CLUSTER:
        value = getattr(args, name, None)
        if value not in (None, []):
            cluster[name] = value
    if getattr(args, "disable_version_check", False):
        cluster["disable_version_check"] = True
    for name, value in cluster.items():
        if isinstance(value, bool):
            argv += [f"--{name}"] if value else []
        elif isinstance(value, list):
            argv += [f"--{name}", *(str(v) for v in value)]
        else:
            argv += [f"--{name}", str(value)]
    return model, ["CSX", *argv]


def run_method(method: str, args: argparse.Namespace) -> int:
    """Run the method; run.py says its own lines and errors, and its exit code is ours."""
    model, argv = run_argv(method, args)
    return run_py(model, argv)
