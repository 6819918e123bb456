"""The one table of the trainer format: where each trainer key lives in the legacy sections.

Read in both directions by runtime/trainer_format/convert.py (a trainer file into the legacy
sections; a legacy file into the trainer form). Model Zoo's own table is TRAINER_PARAMS_TO_LEGACY
in cerebras/modelzoo `trainer/utils.py` (github Cerebras/modelzoo); the paths here are its
paths, for the keys cs2sim runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cs2sim.runtime.schema import Key

__all__ = [
    "P",
    "DEVICES",
    "Row",
    "ROWS",
    "SECTIONS",
    "SPECIAL",
    "TOP",
    "DROPPED",
    "LOGGERS",
    "SCHEDULER_NAMES",
]

DEVICES = ("CPU", "CSX")
P = tuple[str, ...]


@dataclass(frozen=True)
class Row:
    """One trainer key and its legacy home. `legacy` None: a key of the front end (where and
    how the job runs on the cluster), handed to `cszoo` as the flag `flag`. `aliases`: other
    legacy spellings read into this row when converting a legacy file (the first one given
    wins, as runtime/params.py RUNCONFIG_ALIASES). `toggle`: a callback whose presence is the
    value (`{CheckLoss: {}}` <-> true)."""

    trainer: P
    legacy: P | None
    key: Key | None = None  # for front-end keys; legacy keys use the legacy schema's Key
    flag: str | None = None
    aliases: tuple[P, ...] = ()
    toggle: bool = False


def _r(trainer: str, legacy: str | None, **kw: Any) -> Row:
    """A row from dotted paths; `|` separates a callback's name from its (dotted) key."""
    if "|" not in trainer:
        t = tuple(trainer.split("."))
    else:
        head, name, key = trainer.split("|")
        t = (*head.split("."), name, *([key] if key else []))
    aliases = tuple(tuple(a.split(".")) for a in kw.pop("aliases", ()))
    return Row(t, tuple(legacy.split(".")) if legacy else None, aliases=aliases, **kw)


_LABELS = Key(list, None, "key=value labels of the wsjob")
ROWS: tuple[Row, ...] = (
    _r("init.device", None, key=Key(str, None, "CPU or CSX", choices=DEVICES)),
    _r("init.model_dir", "runconfig.model_dir"),
    _r("init.seed", "runconfig.seed", aliases=("runconfig.tf_random_seed",)),
    # backend: where the run happens
    _r("init.backend.backend_type", None, key=Key(str, None, "CPU or CSX", choices=DEVICES)),
    _r("init.backend.compile_only", "runconfig.compile_only"),
    _r("init.backend.validate_only", "runconfig.validate_only"),
    _r("init.backend.enable_distributed", "runconfig.enable_distributed"),
    _r(
        "init.backend.compile_dir",
        None,
        key=Key(str, None, "compile directory"),
        flag="compile_dir",
    ),
    _r("init.backend.cluster_config.num_csx", "runconfig.num_csx"),
    _r("init.backend.cluster_config.max_wgt_servers", "runconfig.num_wgt_servers"),
    _r("init.backend.cluster_config.num_workers_per_csx", "runconfig.num_workers_per_csx"),
    _r("init.backend.cluster_config.max_act_per_csx", "runconfig.num_act_servers"),
    _r("init.backend.cluster_config.mount_dirs", "runconfig.mount_dirs"),
    _r("init.backend.cluster_config.python_paths", "runconfig.python_paths"),
    _r(
        "init.backend.cluster_config.mgmt_address",
        None,
        key=Key(str, None, "host:port of the cluster management server"),
        flag="mgmt_address",
    ),
    _r(
        "init.backend.cluster_config.credentials_path",
        None,
        key=Key(str, None, "the server's TLS certificate"),
        flag="credentials_path",
    ),
    _r("init.backend.cluster_config.job_labels", None, key=_LABELS, flag="job_labels"),
    _r(
        "init.backend.cluster_config.job_priority",
        None,
        key=Key(str, None, "p1 (highest) to p3", choices=("p1", "p2", "p3")),
        flag="job_priority",
    ),
    _r(
        "init.backend.cluster_config.job_time_sec",
        None,
        key=Key(int, None, "the job's time limit in seconds"),
        flag="job_time_sec",
    ),
    _r(
        "init.backend.cluster_config.disable_version_check",
        None,
        key=Key(bool, None, "skip the client/server version check"),
        flag="disable_version_check",
    ),
    # precision: the model's half format and the optimizer's loss scaling and clipping
    _r("init.precision.enabled", "model.mixed_precision"),
    _r("init.precision.fp16_type", "model.fp16_type"),
    _r("init.precision.precision_opt_level", "runconfig.precision_opt_level"),
    _r("init.precision.loss_scaling_factor", "optimizer.loss_scaling_factor"),
    _r("init.precision.initial_loss_scale", "optimizer.initial_loss_scale"),
    _r("init.precision.steps_per_increase", "optimizer.steps_per_increase"),
    _r("init.precision.min_loss_scale", "optimizer.min_loss_scale"),
    _r("init.precision.max_loss_scale", "optimizer.max_loss_scale"),
    _r("init.precision.max_gradient_norm", "optimizer.max_gradient_norm"),
    _r("init.precision.max_gradient_value", "optimizer.max_gradient_value"),
    # loop
    _r("init.loop.max_steps", "runconfig.max_steps"),
    _r("init.loop.num_steps", "runconfig.num_steps"),
    _r("init.loop.num_epochs", "runconfig.num_epochs"),
    _r("init.loop.steps_per_epoch", "runconfig.steps_per_epoch"),
    _r("init.loop.eval_frequency", "runconfig.eval_frequency"),
    _r("init.loop.eval_steps", "runconfig.eval_steps"),
    _r("init.loop.grad_accum_steps", "optimizer.grad_accum_steps"),
    # checkpoint
    _r(
        "init.checkpoint.steps",
        "runconfig.checkpoint_steps",
        aliases=("runconfig.save_checkpoints_steps",),
    ),
    _r("init.checkpoint.autoload_last_checkpoint", "runconfig.autoload_last_checkpoint"),
    _r("init.checkpoint.save_initial_checkpoint", "runconfig.save_initial_checkpoint"),
    # logging: one interval in the trainer form (the TF files' two are read as it)
    _r(
        "init.logging.log_steps",
        "runconfig.log_steps",
        aliases=("runconfig.log_step_count_steps", "runconfig.save_summary_steps"),
    ),
    _r("init.logging.log_level", "runconfig.logging"),
    # callbacks: a list of {Name: {key: value}}
    _r("init.callbacks|KeepNCheckpoints|n", "runconfig.keep_checkpoint_max"),
    _r("init.callbacks|CheckLoss|", "runconfig.check_loss_values", toggle=True),
    _r("init.callbacks|ComputeNorm|", "optimizer.log_summaries", toggle=True),
    _r(
        "init.callbacks|ScopedTrainFlags|csx.performance.micro_batch_size",
        "train_input.micro_batch_size",
    ),
    _r(
        "init.callbacks|LoadCheckpointStates|load_checkpoint_states",
        "runconfig.is_pretrained_checkpoint",
    ),
    # the checkpoint a method starts from
    _r("fit.ckpt_path", "runconfig.checkpoint_path"),
    _r("validate.ckpt_path", "runconfig.checkpoint_path"),
    _r("validate_all.ckpt_paths", "runconfig.checkpoint_path"),
)

# Sections copied whole: trainer path <-> legacy section (checked by runtime/params.py).
SECTIONS: tuple[tuple[P, str], ...] = (
    (("init", "model"), "model"),
    (("fit", "train_dataloader"), "train_input"),
    (("fit", "val_dataloader"), "eval_input"),
    (("validate", "val_dataloader"), "eval_input"),
    (("validate_all", "val_dataloaders"), "eval_input"),
)
SPECIAL = {("init", "optimizer"), ("init", "schedulers"), ("init", "loggers")}
TOP = ("init", "fit", "validate", "validate_all")
# Legacy keys the trainer form has no place for: said when converting, then dropped.
DROPPED = {
    ("runconfig", "mode"): None,  # the cszoo subcommand is the mode (Model Zoo ignores it too)
    ("runconfig", "cs_ip"): "the backend decides where the run happens (init.device)",
    ("runconfig", "use_cs_grad_accum"): "micro-batches are the ScopedTrainFlags callback's "
    "csx.performance.micro_batch_size",
}
LOGGERS = {"TensorBoardLogger": "cs2sim always writes TensorBoard events to model_dir"}
# Model Zoo's names of the learning-rate schedulers (cerebras.pytorch.optim.lr_scheduler) by
# the lower-case legacy spelling, with and without "lr".
SCHEDULER_NAMES = {
    n.lower(): n
    for n in (
        "ConstantLR",
        "LinearLR",
        "PolynomialLR",
        "CosineDecayLR",
        "ExponentialLR",
        "PiecewiseConstantLR",
    )
}
SCHEDULER_NAMES |= {k[:-2]: v for k, v in list(SCHEDULER_NAMES.items())}
SCHEDULER_NAMES["cosine"] = "CosineDecayLR"
