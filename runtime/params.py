"""Params YAML in the Model Zoo schema: load, validate, fill defaults, apply the CLI, write back.

A params file has the sections `train_input`, `eval_input`, `model`, `optimizer`, `runconfig`,
`csconfig` and a top-level `description`. Each section is checked against one `Schema` table
(runtime/schema.py): the input/runconfig/csconfig tables, the bounds and the aliases are in
runtime/sections.py, `model` comes from the model table (runtime/registry.py) and `optimizer`
from runtime/numerics/optim.py, both looked up lazily so this module never imports a model or
an optimizer.

Rules (every error is ONE sentence naming the key path and what is allowed):
1. an unknown top-level section is fatal; an unknown key inside a known section is a warning
   ("did you mean ...?") and is dropped (never copied or written to params_<mode>.yaml); keys
   that published Model Zoo configs use are all known (ACCEPTED_NO_EFFECT says why some change
   nothing here); train_input and model are required sections;
2. wrong type, impossible value (a `check` of the schema) or bad choice are fatal; string choices
   match case-insensitively and are normalised to the schema's spelling ("AdamW" -> "adamw");
3. a missing `eval_input` is derived from `train_input` (shuffle and repeat off) and vice versa;
   a model whose schema has `vocab_size` takes the input's when the model section has none
   (TF GPT-2 configs give it only in train_input/eval_input);
   bounds known up front (the MAX_* of runtime/sections.py, finite numbers, learning rate <=
   MAX_LEARNING_RATE) are checked here, not discovered as a NaN at step 2;
4. runconfig accepts the TF and the PyTorch spellings. The trainer reads only the canonical
   (PyTorch) key; it is filled from the first spelling given in `RUNCONFIG_ALIASES` order, so
   **the PyTorch spelling wins** when both are given (a warning says which value was ignored):
       checkpoint_steps <- checkpoint_steps, save_checkpoints_steps              (default 0 = none)
       seed             <- seed, tf_random_seed                                  (default 1)
   `eval_steps: 0` means "the whole eval set" (TF: <= 0 -> None) and is stored as null.
5. two logging intervals, resolved into log_steps (console) and save_summary_steps (summaries):
   see TF_LOG_DEFAULTS_TO_SUMMARY.
"""

from __future__ import annotations

import copy
import difflib
import math
import os
from pathlib import Path
from typing import Any

import yaml

from cs2sim.runtime import registry
from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.schema import REQUIRED, Key, Schema, shown
from cs2sim.runtime.sections import (
    ACCEPTED_NO_EFFECT,
    CSCONFIG_SCHEMA,
    EVAL_INPUT_SCHEMA,
    IGNORED_SECTIONS,
    INPUT_SCHEMA,
    INTERVAL_DEFAULT,
    MAX_INT,
    MAX_LEARNING_RATE,
    RUNCONFIG_ALIASES,
    RUNCONFIG_SCHEMA,
    SECTIONS,
    TF_LOG_DEFAULTS_TO_SUMMARY,
    TOP_LEVEL_SCHEMA,
    model_schema,
    optimizer_schema,
)
from cs2sim.system.errors import ConfigError
from cs2sim.system.yamlsafe import DEFAULT_LIMITS, load_yaml

__all__ = [
    "check_value",
    "load_params",
    "validate_params",
    "apply_cli_overrides",
    "write_params",
    "fill_resolved",
    "grad_accumulation",
]


# A params file is read with bounded work and memory (system/yamlsafe.py).
YAML_LIMITS = DEFAULT_LIMITS

# -- loading -----------------------------------------------------------------------------------


def load_params(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a params YAML file into a dict (not yet validated)."""
    p = Path(path)
    if not p.is_file():
        what = "is a directory" if p.is_dir() else "not found"
        raise ConfigError(f"params file {path} {what}; pass -p/--params with an existing file.")
    try:
        size = p.stat().st_size
        if size > YAML_LIMITS.max_bytes:
            raise ConfigError(
                f"{path} is {size} bytes, over the {YAML_LIMITS.max_bytes}-byte "
                f"limit (max_bytes) for a params file; shorten it."
            )
        with open(p, "rb") as f:  # never more than the limit into memory
            data = f.read(YAML_LIMITS.max_bytes + 1)
    except OSError as e:
        raise ConfigError(
            f"cannot read params file {path} ({e.strerror or e}); check the file."
        ) from None
    raw = load_yaml(data, str(path), YAML_LIMITS)
    if raw is None:
        raise ConfigError(f"params file {path} is empty; it needs at least train_input and model.")
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{path} must be a mapping of sections ({', '.join(SECTIONS)}), not {shown(raw)}."
        )
    return raw


# -- values --------------------------------------------------------------------------------------

_TYPE_NAMES = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "a mapping",
    list: "a list",
}


def _types(key: Key) -> tuple[type, ...]:
    return key.type if isinstance(key.type, tuple) else (key.type,)


def _coerce(value: Any, types: tuple[type, ...]) -> tuple[bool, Any]:
    """(ok, value) with YAML's loose numbers made exact: 3 -> 3.0 for floats, 1e5 -> 100000."""
    for t in types:  # 1) exact matches; bool is not an integer here
        if t is bool and isinstance(value, bool):
            return True, value
        if t is not bool and isinstance(value, t) and not isinstance(value, bool):
            return True, value
    if isinstance(value, bool):
        return False, value
    if float in types and isinstance(value, int):  # 2) loose numbers
        return True, float(value)
    if (
        int in types and isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT
    ):  # 1e5 -> 100000; 1e308 is no count anyone means
        return True, int(value)
    if list in types and isinstance(value, tuple):
        return True, list(value)
    return False, value


def _check_value(path: str, key: Key, value: Any, source: str) -> Any:
    """The value, normalised, or ConfigError naming `path` and what is allowed."""
    if value is None:
        if key.default is None:
            return None
        value_types = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in _types(key))
        raise ConfigError(
            f"{source}: {path} needs a value ({value_types}); give one or remove the key."
        )
    ok, value = _coerce(value, _types(key))
    if ok and isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise ConfigError(f"{source}: {path} must be at most 2**53 in size, not {shown(value)}.")
    if ok and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{source}: {path} must be a finite number, not {shown(value)}.")
    if not ok:
        names = [_TYPE_NAMES.get(t, t.__name__) for t in _types(key)]
        allowed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise ConfigError(f"{source}: {path} must be {allowed}, not {shown(value)}.")
    if key.choices is not None:
        match = [
            c
            for c in key.choices
            if c == value
            or (isinstance(c, str) and isinstance(value, str) and c.lower() == value.lower())
        ]
        if not match:
            allowed = ", ".join(str(c) for c in key.choices)
            raise ConfigError(f"{source}: {path} must be one of {allowed}, not {shown(value)}.")
        value = match[0]
    if key.check is not None:
        problem = key.check(value)
        if problem:  # a phrase that already shows the bad value (", not ...") is used as is
            tail = "" if ", not " in problem else f", not {shown(value)}"
            raise ConfigError(f"{source}: {path} {problem}{tail}.")
    return value


def _validate_section(
    name: str, given: dict[str, Any], schema: Schema, source: str, warnings: list[str]
) -> dict[str, Any]:
    """One section: known keys checked, defaults filled, unknown keys warned about and kept."""
    prefix = f"{name}." if name else ""
    out: dict[str, Any] = {}
    for k, v in given.items():
        if k in schema:
            out[k] = _check_value(f"{prefix}{k}", schema[k], v, source)
            continue
        close = difflib.get_close_matches(str(k), list(schema), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        warnings.append(f"{source}: unknown key {prefix}{k} ignored{hint}")
        # not kept: an ignored value is never expanded, copied or written to params_<mode>.yaml
    for k, key in schema.items():
        if k in out:
            continue
        if key.default is REQUIRED:
            doc = f" ({key.doc})" if key.doc else ""
            unknown = [str(u) for u in given if u not in schema]
            typo = difflib.get_close_matches(k, unknown, n=1)
            if typo:  # the warning about it would never be seen: say it here
                raise ConfigError(
                    f"{source}: {prefix}{k} is required{doc} and {prefix}{typo[0]} "
                    f"is not a key; rename {typo[0]} to {k}."
                )
            raise ConfigError(f"{source}: {prefix}{k} is required{doc}; add it to the file.")
        out[k] = copy.deepcopy(key.default)
    return out


def _resolve_intervals(
    rc: dict[str, Any], given: dict[str, Any], model_name: str, source: str, warnings: list[str]
) -> None:
    """log_steps (console) and save_summary_steps (summaries) as the file's flow means them.

    After this, log_step_count_steps is set only in the TF flow, which is how
    `apply_cli_overrides` tells the flows apart.
    """
    tf_keys = [
        k for k in ("save_summary_steps", "log_step_count_steps") if given.get(k) is not None
    ]
    if given.get("log_steps") is not None or not tf_keys:  # PyTorch flow: one number
        for k in tf_keys:
            if rc[k] != rc["log_steps"]:
                warnings.append(
                    f"{source}: runconfig.{k} ({rc[k]}) ignored because "
                    f"runconfig.log_steps ({rc['log_steps']}) is also given"
                )
        rc["save_summary_steps"] = rc["log_steps"]
        rc["log_step_count_steps"] = None
        return
    summary = rc.get("save_summary_steps") or INTERVAL_DEFAULT
    console = rc.get("log_step_count_steps") or (
        summary if model_name in TF_LOG_DEFAULTS_TO_SUMMARY else INTERVAL_DEFAULT
    )
    rc["save_summary_steps"], rc["log_step_count_steps"], rc["log_steps"] = (
        summary,
        console,
        console,
    )


def _normalise_runconfig(
    rc: dict[str, Any], given: dict[str, Any], source: str, warnings: list[str]
) -> None:
    """Fill the canonical runconfig keys from whichever spelling was given (PyTorch first)."""
    for canonical, aliases in RUNCONFIG_ALIASES.items():
        spelled = [(k, rc[k]) for k in (canonical, *aliases) if given.get(k) is not None]
        if not spelled:
            continue
        (winner, value), *others = spelled
        rc[canonical] = value
        for k, v in others:
            if v != value:
                warnings.append(
                    f"{source}: runconfig.{k} ({v}) ignored because "
                    f"runconfig.{winner} ({value}) is also given"
                )
    if rc.get("eval_steps") == 0:
        rc["eval_steps"] = None


check_value = _check_value  # the trainer format checks its keys with the legacy keys' Key


def _derived_input(raw: dict[str, Any]) -> dict[str, Any]:
    """eval_input derived from train_input when the file has none."""
    train, ev = raw.get("train_input"), raw.get("eval_input")
    if ev is None and isinstance(train, dict):
        return {"eval_input": {**train, "shuffle": False, "repeat": False}}
    return {}


REQUIRED_SECTIONS = {
    "train_input": "at least batch_size",
    "model": "the model's shape; nothing is assumed, or a missing section would silently "
    "train the default (e.g. GPT-2 small) shapes",
}


def _learning_rates(value: Any, where: str = "optimizer.learning_rate") -> list[tuple[str, Any]]:
    """Every number a learning-rate setting can reach: the value, a schedule's *learning_rate*
    and `values` entries, recursively (scheduler lists)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(where, value)]
    if isinstance(value, str):  # "1e-3": YAML 1.1 leaves it a string; the schedules parse it
        try:
            return [(where, float(value))]
        except ValueError:
            return []
    found: list[tuple[str, Any]] = []
    if isinstance(value, list):
        for i, item in enumerate(value):
            found += _learning_rates(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            if "learning_rate" in str(k) or k == "values":
                found += _learning_rates(v, f"{where}.{k}")
            elif isinstance(v, (list, dict)):
                found += _learning_rates(v, f"{where}.{k}")
    return found


def _check_bounds(params: dict[str, Any], source: str) -> None:
    """Cross-key bounds known before step 1."""
    for where, lr in _learning_rates(params["optimizer"].get("learning_rate")):
        if isinstance(lr, float) and not math.isfinite(lr):
            raise ConfigError(f"{source}: {where} must be a finite number, not {shown(lr)}.")
        if abs(lr) > MAX_LEARNING_RATE:
            raise ConfigError(
                f"{source}: {where} must be at most {MAX_LEARNING_RATE:g}, not "
                f"{shown(lr)}; a step that large diverges at once (lower it)."
            )
    model = params["model"]
    size = model.get("embedding_size")
    if size is not None and "hidden_size" in model and size != model["hidden_size"]:
        raise ConfigError(
            f"{source}: model.embedding_size ({size}) must equal "
            f"model.hidden_size ({model['hidden_size']}) here; the token embedding "
            "is as wide as the residual stream."
        )


def _share_vocab_size(params: dict[str, Any], schema: Schema) -> None:
    """TF GPT-2 configs give vocab_size only in the input sections; the model needs it too."""
    model = params["model"]
    if "vocab_size" in schema and model.get("vocab_size") is None:
        model["vocab_size"] = params["train_input"].get("vocab_size") or params["eval_input"].get(
            "vocab_size"
        )


def validate_params(
    raw: dict[str, Any], model_name: str, *, source: str = "params.yaml"
) -> tuple[dict[str, Any], list[str]]:
    """(effective params with every default filled, warnings); ConfigError names the key path."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source} must be a mapping of sections, not {shown(raw)}.")
    allowed = (*TOP_LEVEL_SCHEMA, *SECTIONS)
    ignored = [
        f"{source}: {name} is ignored: {why}."
        for name, why in IGNORED_SECTIONS.items()
        if name in raw
    ]
    raw = {k: v for k, v in raw.items() if k not in IGNORED_SECTIONS}
    for name in raw:
        if name not in allowed:
            close = difflib.get_close_matches(str(name), allowed, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(
                f"{source}: unknown section {name!r}{hint}; allowed: {', '.join(allowed)}."
            )
    for name, needs in REQUIRED_SECTIONS.items():
        if raw.get(name) is None:  # absent, or every key commented out; `{}` asks for defaults
            state = "has no keys" if name in raw else "is missing"
            raise ConfigError(f"{source}: section {name} {state}; it is required ({needs}).")
    raw = {**raw, **_derived_input(raw)}
    schemas: dict[str, Schema] = {
        "train_input": INPUT_SCHEMA,
        "eval_input": EVAL_INPUT_SCHEMA,
        "model": {**ACCEPTED_NO_EFFECT["model"], **model_schema(model_name)},
        "optimizer": {**ACCEPTED_NO_EFFECT["optimizer"], **optimizer_schema()},
        "runconfig": RUNCONFIG_SCHEMA,
        "csconfig": CSCONFIG_SCHEMA,
    }
    warnings: list[str] = ignored
    params = _validate_section(
        "", {k: raw[k] for k in TOP_LEVEL_SCHEMA if k in raw}, TOP_LEVEL_SCHEMA, source, warnings
    )
    for name, schema in schemas.items():
        given = raw.get(name)
        if given is None:
            given = {}  # an absent (or empty) section takes every default
        if not isinstance(given, dict):
            raise ConfigError(f"{source}: {name} must be a mapping of keys, not {shown(given)}.")
        params[name] = _validate_section(name, given, schema, source, warnings)
        if name == "runconfig":
            _normalise_runconfig(params[name], given, source, warnings)
            _resolve_intervals(params[name], given, model_name, source, warnings)
    _share_vocab_size(params, schemas["model"])
    _complete(params, model_name, source, warnings)
    _check_bounds(params, source)
    grad_accumulation(params, source)
    return params, warnings


def _complete(params: dict[str, Any], model_name: str, source: str, warnings: list[str]) -> None:
    """What a model derives from other sections (BERT: vocab_size from the vocab_file)."""
    try:
        cls = registry.get(model_name)
    except ConfigError:  # model_schema resolved the name already: a stand-in schema (tests)
        return
    complete = getattr(cls, "complete_params", None)
    if complete is not None:
        complete(params, source, warnings)


def grad_accumulation(
    params: dict[str, Any], source: str = "params"
) -> tuple[int, int | None, int]:
    """(input batches per update, micro-batch size per CS-X or None, CS-X systems): the three
    Model Zoo spellings of gradient accumulation, checked (runtime/executors/accumulate.py
    runs them). optimizer.grad_accum_steps k sums k input batches into one update;
    train_input.micro_batch_size m (with runconfig.use_cs_grad_accum, or its older spelling
    optimizer.use_cs_grad_accum) runs the batch of each CS-X as micro-batches of m samples.
    A setting that cannot be honoured is a ConfigError, never ignored."""
    ti, rc, opt = (params.get(k) or {} for k in ("train_input", "runconfig", "optimizer"))
    k = int(opt.get("grad_accum_steps") or 1)
    m = ti.get("micro_batch_size")
    systems = int(rc.get("num_csx") or 1)
    on = rc.get("use_cs_grad_accum") or opt.get("use_cs_grad_accum")
    if m is None:
        return k, None, systems
    if not on:
        raise ConfigError(
            f"{source}: train_input.micro_batch_size ({m}) needs "
            "runconfig.use_cs_grad_accum: true (gradient accumulation on the CS "
            "system); set it, or remove micro_batch_size."
        )
    B = int(ti["batch_size"])
    if B % systems:
        raise ConfigError(
            f"{source}: train_input.batch_size ({B}) must be a multiple of "
            f"num_csx ({systems}) for micro-batches; change one of them."
        )
    if (B // systems) % m:
        raise ConfigError(
            f"{source}: the batch of each CS-X ({B} // num_csx {systems} = "
            f"{B // systems}) is not a multiple of train_input.micro_batch_size "
            f"({m}); choose batch_size and num_csx so that it is."
        )
    return k, int(m), systems


def apply_cli_overrides(params: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """A copy of `params` whose runconfig takes every CLI value that is not None (Model Zoo's
    run.py, docs/sources.md).

    Flags that are store_true must default to None in the parser, or a False would clobber the
    YAML. A TF spelling given on the command line also sets its canonical key.
    """
    out = copy.deepcopy(params)
    rc = out.setdefault("runconfig", {})
    for k, v in args.items():
        if v is None:
            continue
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if k in RUNCONFIG_SCHEMA:
            if k == "eval_steps" and isinstance(v, int) and v <= 0:
                v = None  # TF: --eval_steps <= 0 -> the whole eval set
            else:
                v = _check_value(f"--{k}", RUNCONFIG_SCHEMA[k], v, "command line")
        rc[k] = v
        for canonical, aliases in RUNCONFIG_ALIASES.items():
            if k in aliases:
                rc[canonical] = v
    tf_flow = rc.get("log_step_count_steps") is not None
    if args.get("log_steps") is not None:  # PyTorch: one number for both
        rc["save_summary_steps"] = rc["log_steps"]
        if tf_flow:
            rc["log_step_count_steps"] = rc["log_steps"]
    elif args.get("log_step_count_steps") is not None:
        rc["log_steps"] = rc["log_step_count_steps"]
    elif args.get("save_summary_steps") is not None and not tf_flow:
        rc["log_steps"] = rc["save_summary_steps"]  # PyTorch file: one number for both
    return out


def fill_resolved(params: dict[str, Any], half: str) -> dict[str, Any]:
    """Write into `params` the values the run will use where the file left them null, so
    params_<mode>.yaml shows them: the loss-scale bounds (runtime/numerics/loss_scale.py
    defaults for the half format; used only when loss_scaling_factor is dynamic) and
    steps_per_increase."""
    from cs2sim.runtime.numerics.loss_scale import loss_scale_defaults

    opt = params.setdefault("optimizer", {})
    for k, v in loss_scale_defaults(half).items():
        if opt.get(k) is None:
            opt[k] = v
    if opt.get("steps_per_increase") is None:
        opt["steps_per_increase"] = 2000
    return params


# -- writing -------------------------------------------------------------------------------------


def _plain(v: Any) -> Any:
    """Tuples, numpy scalars and paths as the plain YAML types safe_dump accepts."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if hasattr(v, "item") and callable(v.item):  # numpy scalar
        return v.item()
    return v


def write_params(
    params: dict[str, Any],
    path: str | os.PathLike[str],
    within: str | os.PathLike[str] | None = None,
) -> None:
    """Write params as YAML, atomically (temp file in the same directory, then os.replace);
    below `within` (model_dir) no symlink is followed (runtime/artifacts/atomic.py)."""
    atomic_write(
        path,
        yaml.safe_dump(_plain(params), sort_keys=False, default_flow_style=False),
        within=within,
    )
