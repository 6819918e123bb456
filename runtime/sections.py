"""The params file's section schemas: what `train_input`, `eval_input`, `runconfig`, `csconfig`
and the top level accept, the bounds known up front, the runconfig aliases, the keys accepted
with no effect, and where the `model` and `optimizer` sections' schemas come from.

Each table is a `Schema` (runtime/schema.py); runtime/params.py loads, validates and writes a
params file against them. The `model` section's schema comes from the model table
(runtime/registry.py) and the `optimizer` section's from runtime/numerics/optim.py, both looked
up lazily so this module never imports a model or an optimizer.
"""

from __future__ import annotations

from typing import Any

from cs2sim.runtime import registry
from cs2sim.runtime.schema import (
    REQUIRED,
    Key,
    Range,
    Schema,
    non_negative,
    positive,
    shown,
)

# Bounds known up front: a value past them cannot be meant and would only
# fail late (a NaN at step 2, a MemoryError, an overflow), so validation refuses it.
MAX_INT = 2**53  # largest integer a float holds exactly; bigger counts are typos or attacks
MAX_BATCH_SIZE = 2**20
MAX_WORKERS = 1024
MAX_KEEP_CHECKPOINTS = 100_000
MAX_LEARNING_RATE = 10.0  # an SGD/Adam step of more than 10x the gradient diverges at once
AUTOTUNE = -1  # tf.data.experimental.AUTOTUNE
MAX_SEED = 2**63 - 1  # numpy seeds are non-negative; a seed is hashed into 64 bits


_PARALLEL_CALLS = f"must be in [-1, {MAX_WORKERS}] (0/-1: AUTOTUNE)"
_parallel_calls = Range(-1, MAX_WORKERS, below=_PARALLEL_CALLS, above=_PARALLEL_CALLS)


def between(lo: int, hi: int) -> Range:
    """Schema check: lo <= v <= hi."""
    return Range(lo, hi)


def at_most(hi: int) -> Range:
    """Schema check: 0 < v <= hi."""
    return Range(0, hi, lo_open=True, below="must be > 0", above=f"must be at most {hi}")


def _cs_ip(v: Any) -> str | None:
    """runconfig.cs_ip: a non-empty address or system name without spaces (as --cs_ip)."""
    ok = (
        isinstance(v, str)
        and v.strip()
        and len(v) <= 255
        and not any(c.isspace() for c in v.strip())
    )
    return None if ok else "must be a CS-2 address (IP[:port]) or system name"


def _data_dirs(v: Any) -> str | None:
    """data_dir: a non-empty string, or a non-empty list of non-empty strings."""
    items = v if isinstance(v, list) else [v]
    if not items:
        return "must name at least one directory"
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item.strip():
            return f"must be a path or a list of paths; item {i} is {shown(item)}, not a path"
    return None


INPUT_SCHEMA: Schema = {
    "data_dir": Key(
        (str, list),
        None,
        "directory or token file, or a list of them (shards, in order); absent -> built-in data",
        check=_data_dirs,
    ),
    "data_processor": Key(
        str,
        None,
        "the reader of data_dir (runtime/data/processors.py: "
        "GptHDF5DataProcessor, GptTfRecordsProcessor, ...); null -> the "
        "model's default reader",
    ),
    "stand_in_data": Key(
        bool,
        False,
        "train on the built-in stand-in data when data_dir is "
        "unset or does not exist, without the WARNING (the small configs)",
    ),
    "batch_size": Key(int, REQUIRED, "samples per batch", check=at_most(MAX_BATCH_SIZE)),
    "shuffle": Key(bool, True, "shuffle every epoch with a permutation from (seed, epoch)"),
    "shuffle_seed": Key(
        int, None, "seed of the shuffle; null -> runconfig.seed", check=between(0, MAX_SEED)
    ),
    "shuffle_buffer": Key(int, None, "accepted for TF configs; we always permute the whole epoch"),
    "repeat": Key(bool, True, "start a new epoch after the last batch; false -> one pass"),
    "drop_last_batch": Key(bool, True, "drop a last partial batch (a CS-2 needs fixed shapes)"),
    "drop_last": Key(
        bool, None, "the PyTorch data processors' spelling of drop_last_batch (wins when set)"
    ),
    "num_workers": Key(
        int, 0, "input worker processes; 0 -> in-process", check=between(0, MAX_WORKERS)
    ),
    "num_parallel_calls": Key(
        int,
        None,
        "TF spelling of num_workers; 0 or -1 -> AUTOTUNE "
        "(runtime/data decides), null -> num_workers",
        check=_parallel_calls,
    ),
    "prefetch_factor": Key(
        int, 2, "batches each worker may have ready", check=between(1, MAX_WORKERS)
    ),
    "persistent_workers": Key(bool, False, "accepted; our workers always live across epochs"),
    "to_float16": Key(bool, False, "round input pixels to float16 values (stay float32 arrays)"),
    "vocab_size": Key(int, None, "token ids must be < vocab_size", check=positive),
    "max_sequence_length": Key(int, None, "tokens per sample", check=positive),
    # in published configs; see ACCEPTED_NO_EFFECT for why they change nothing here
    "add_special_tokens": Key(bool, None, "TF GPT processors: add BOS/EOS; no effect here"),
    "use_multiple_workers": Key(
        bool,
        False,
        "TF: shard input files across input workers; "
        "here a data_dir list is always sharded across the workers",
    ),
    # gradient accumulation (runtime/executors/accumulate.py)
    "micro_batch_size": Key(
        int,
        None,
        "CS-2 gradient accumulation (Release 2.1+): the batch "
        "(per CS-X) runs as micro-batches of this many samples, one update "
        "(needs runconfig.use_cs_grad_accum)",
        check=positive,
    ),
    # BERT (runtime/data/mlm.py, runtime/data/vocab.py)
    "vocab_file": Key(
        str,
        None,
        "BERT: a WordPiece vocabulary (one token a line); absent or "
        "missing -> the byte-level fallback vocabulary",
    ),
    "do_lower": Key(
        bool,
        False,
        "BERT: lower-case the tokens (and, for CSV, the vocabulary) as the Model Zoo's "
        "processors do; off by default, as theirs",
    ),
    "max_predictions_per_seq": Key(
        int, None, "BERT: masked positions per sequence (default 20)", check=positive
    ),
    "masked_lm_prob": Key(
        (int, float),
        0.15,
        "BERT: share of the tokens masked",
        check=Range(0, 1, lo_open=True, hi_open=True),
    ),
    "scale_mlm_weights": Key(
        bool,
        None,
        "BERT TF: divide the MLM loss by the batch's masked tokens (times mlm_loss_weight)",
    ),
    "dynamic_mlm_scale": Key(
        bool,
        False,
        "BERT PyTorch: divide the MLM loss by the batch's "
        "masked tokens (instead of mlm_loss_weight)",
    ),
    "whole_word_masking": Key(bool, False, "BERT: mask whole words (only false is implemented)"),
    "mask_whole_word": Key(bool, False, "TF spelling of whole_word_masking"),
    "buckets": Key(
        list,
        None,
        "VSL sequence-length buckets; no effect (every batch is padded to max_sequence_length)",
    ),
}
# eval_input: same keys, no shuffling and a single pass unless asked.
EVAL_INPUT_SCHEMA: Schema = {
    **INPUT_SCHEMA,
    "shuffle": Key(bool, False, INPUT_SCHEMA["shuffle"].doc),
    "repeat": Key(bool, False, INPUT_SCHEMA["repeat"].doc),
}

MODES = ("train", "eval", "eval_all", "train_and_eval")

RUNCONFIG_SCHEMA: Schema = {
    # how long to run
    "max_steps": Key(int, None, "train until this global step", check=non_negative),
    "steps": Key(int, None, "train this many more steps (TF --steps)", check=non_negative),
    "num_steps": Key(int, None, "train this many steps (PyTorch)", check=non_negative),
    "num_epochs": Key(int, None, "train this many epochs", check=non_negative),
    "steps_per_epoch": Key(int, None, "steps that make an epoch", check=positive),
    "eval_steps": Key(
        int, None, "eval batches; null or 0 -> the whole eval set", check=non_negative
    ),
    "eval_frequency": Key(
        int,
        None,
        "train_and_eval: evaluate every this many steps (and at the end); null -> at the end",
        check=positive,
    ),
    # logging and checkpoints (canonical keys; see RUNCONFIG_ALIASES)
    "log_steps": Key(
        int, 100, "steps between console lines (PyTorch: and summaries)", check=positive
    ),
    "save_summary_steps": Key(
        int, None, "TF: steps between TensorBoard summaries (default 100)", check=positive
    ),
    "log_step_count_steps": Key(
        int,
        None,
        "TF: steps between console lines (default 100; gpt2/gptj: save_summary_steps)",
        check=positive,
    ),
    "checkpoint_steps": Key(int, 0, "steps between checkpoints; 0 -> none", check=non_negative),
    "save_checkpoints_steps": Key(int, None, "TF spelling of checkpoint_steps", check=non_negative),
    "keep_checkpoint_max": Key(
        int, 5, "checkpoints kept; 0 -> all", check=between(0, MAX_KEEP_CHECKPOINTS)
    ),
    "save_initial_checkpoint": Key(bool, False, "save a checkpoint at step 0"),
    "autoload_last_checkpoint": Key(bool, True, "resume from the latest checkpoint in model_dir"),
    "checkpoint_path": Key(str, None, "checkpoint to initialise from"),
    "is_pretrained_checkpoint": Key(
        bool,
        False,
        "checkpoint_path is a warm start: weights only, from step 0 (else checkpoint_path resumes)",
    ),
    "eval_random_weights": Key(
        bool,
        False,
        "let eval run without a checkpoint (random weights); otherwise that is an error",
    ),
    "model_dir": Key(str, "./model_dir", "where checkpoints, events and logs go"),
    "save_losses": Key(bool, True, "keep the loss of every step"),
    "check_loss_values": Key(bool, True, "stop on a NaN/inf loss"),
    "show_debug_metrics": Key(bool, False, "log extra debug metrics"),
    "disable_standard_logs": Key(bool, False, "no per-step console lines"),
    "logging": Key(str, "INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    # the system
    "cs_ip": Key(
        str,
        None,
        "CS-2 address (IP[:port] or system name), as --cs_ip; null -> run on the host CPU",
        check=_cs_ip,
    ),
    "mode": Key(str, "train", "what to run", choices=MODES),
    "multireplica": Key(bool, False, "data-parallel copies on the wafer"),
    "validate_only": Key(bool, False, "compile up to kernel matching"),
    "compile_only": Key(bool, False, "compile completely, do not run"),
    "device": Key(str, None, "force a device (TF --device)"),
    "num_csx": Key(int, 1, "CS-X systems (weight streaming)", check=between(1, MAX_WORKERS)),
    "num_workers_per_csx": Key(
        int, 0, "input workers per CS-X; 0 -> decided by the system", check=non_negative
    ),
    "num_wgt_servers": Key(int, 12, "MemoryX weight servers", check=positive),
    "num_act_servers": Key(int, 1, "activation servers", check=positive),
    "use_cs_grad_accum": Key(
        bool,
        False,
        "let the CS-2 compiler split the batch into "
        "micro-batches (gradient accumulation; runtime/executors/"
        "accumulate.py)",
    ),
    "execution_strategy": Key(
        str,
        None,
        "pipeline or weight_streaming (PyTorch flag)",
        choices=("pipeline", "weight_streaming"),
    ),
    "mount_dirs": Key(list, None, "directories to mount in the appliance's containers"),
    "python_paths": Key(list, None, "paths added to PYTHONPATH in the appliance's containers"),
    # in a published config (GPT-3 XL PyTorch); see ACCEPTED_NO_EFFECT
    "save_checkpoint_steps": Key(
        int, None, "not a Model Zoo key; no effect (checkpoint_steps is)", check=non_negative
    ),
    "precision_opt_level": Key(int, 1, "0 = fp32 reductions, 1/2 = faster", choices=(0, 1, 2)),
    # numerics and seeds
    "seed": Key(int, 1, "seed of weights, dropout and shuffling", check=between(0, MAX_SEED)),
    "tf_random_seed": Key(int, None, "TF spelling of seed", check=between(0, MAX_SEED)),
    # distributed TF (accepted, single-process here)
    "enable_distributed": Key(bool, False, "TF distributed strategy"),
    "multiple_workers": Key(bool, False, "TF multiple workers"),
    "throttle_secs": Key((int, float), 0, "TF train_and_eval throttle", check=between(0, 86400)),
}

# canonical key -> the other spellings it is filled from, in priority order after itself.
RUNCONFIG_ALIASES: dict[str, tuple[str, ...]] = {
    "checkpoint_steps": ("save_checkpoints_steps",),
    "seed": ("tf_random_seed",),
}

# The two logging intervals (Model Zoo's logging intervals, docs/sources.md). PyTorch:
# runconfig.log_steps sets console lines AND
# summaries. TF (a file that spells save_summary_steps / log_step_count_steps and not log_steps):
# summaries every save_summary_steps (default 100), console lines every log_step_count_steps
# (tf.estimator's default 100; Model Zoo's TF gpt2/gptj set_defaults use save_summary_steps).
TF_LOG_DEFAULTS_TO_SUMMARY = ("gpt2", "gptj")
INTERVAL_DEFAULT = 100

# Keys of the model and optimizer sections that published Model Zoo configs use and that the
# model/optimizer schemas do not have. Each is accepted (type-checked, kept in the effective
# params) with the reason it changes nothing here, or what reads it.
ACCEPTED_NO_EFFECT: dict[str, Schema] = {
    "model": {
        "allow_multireplica": Key(
            bool,
            True,
            "whether the compiler may replicate the model "
            "with --multireplica; read by the CS-2 compiler, no effect "
            "on a host run",
        ),
        "embedding_size": Key(
            int,
            None,
            "width of the token embedding; our GPT models tie it "
            "to hidden_size, so it must equal hidden_size",
            check=positive,
        ),
    },
    "optimizer": {
        "ws_summary": Key(
            bool,
            False,
            "weight-streaming optimizer summaries on the appliance; "
            "no effect: optimizer.log_summaries writes ours",
        ),
    },
}


CSCONFIG_SCHEMA: Schema = {
    "use_cbfloat16": Key(bool, False, "legacy: half format cbfloat16 (prefer model.fp16_type)"),
}

TOP_LEVEL_SCHEMA: Schema = {
    "description": Key(str, None, "free text"),
}

SECTIONS = ("train_input", "eval_input", "model", "optimizer", "runconfig", "csconfig")
# Sections of published configs that configure nothing cs2sim runs: accepted, warned about.
IGNORED_SECTIONS = {
    "predict_input": "cs2sim has no predict mode (its modes are train, eval, eval_all, "
    "train_and_eval), so nothing reads it",
}


# -- section schemas owned by other files, looked up lazily -----------------------------------


def model_schema(model_name: str) -> Schema:
    """The model section's schema, from the model table (runtime/registry.py)."""
    return registry.get(model_name).SCHEMA


def optimizer_schema() -> Schema:
    """The optimizer section's schema, from runtime/numerics/optim.py."""
    from cs2sim.runtime.numerics.optim import OPTIMIZER_SCHEMA

    return OPTIMIZER_SCHEMA
