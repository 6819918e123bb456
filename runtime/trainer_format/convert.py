"""The trainer format of today's Model Zoo (Release 2.3+): the same params, another view.

A trainer-format file has one `trainer:` key with `init` (device or backend, model_dir, seed,
`model` with its `name`, `optimizer` as `{AdamW: {...}}`, `schedulers`, `precision`, `loop`,
`checkpoint`, `logging`, `callbacks`, `loggers`) and `fit` / `validate` / `validate_all` with
their dataloaders (cerebras/modelzoo `trainer/utils.py`, TRAINER_PARAMS_TO_LEGACY, github
Cerebras/modelzoo). cs2sim runs it through the one training path of the legacy format: ROWS is
the one table of where each trainer key lives in the legacy sections, read in both directions:
`to_legacy` reads a trainer file into the legacy structure (then runtime/params.py validates it
as any params file), `to_trainer` writes the trainer form of a legacy file (`cszoo config
convert_legacy`). The value checks are the legacy keys' own (`Key`s of runtime/sections.py, the
optimizer's and the model's schema): one schema, two spellings. A key the trainer form does not
have is refused with a did-you-mean; the dataloader and model sections are the legacy input and
model sections, checked by runtime/params.py as in a legacy file.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from cs2sim.runtime.params import check_value
from cs2sim.runtime.schema import Key, Schema, shown
from cs2sim.runtime.sections import RUNCONFIG_SCHEMA, model_schema, optimizer_schema
from cs2sim.runtime.trainer_format.rows import (
    DROPPED,
    LOGGERS,
    ROWS,
    SCHEDULER_NAMES,
    SECTIONS,
    SPECIAL,
    TOP,
    P,
    Row,
)
from cs2sim.system.errors import ConfigError

__all__ = [
    "load_states",
    "Trainer",
    "is_trainer",
    "to_legacy",
    "to_trainer",
    "model_name_of",
    "METHODS",
]

_ANY = Key((bool, int, float, str, list, dict), None)


def is_trainer(raw: Any) -> bool:
    """True for a trainer-format file (Model Zoo: `"trainer" in params`)."""
    return isinstance(raw, dict) and "trainer" in raw


# -- reading a trainer file ---------------------------------------------------------------------


@dataclass
class Trainer:
    """What a trainer file says: the legacy params, where to run, and the front end's flags."""

    legacy: dict[str, Any]
    device: str | None
    flags: dict[str, Any] = field(default_factory=dict)
    model: str | None = None


def _legacy_key(row: Row, model: str) -> Key:
    if row.key is not None:
        return row.key
    assert row.legacy is not None
    section, name = row.legacy[0], row.legacy[-1]
    if section == "runconfig":
        return RUNCONFIG_SCHEMA[name]
    if section == "optimizer":
        return optimizer_schema()[name]
    if section == "model":
        schema = model_schema(model)
        if name in schema:
            return schema[name]
    return _ANY  # checked where it lands, by runtime/params.py


def _unknown(path: str, name: Any, allowed: list[str], source: str) -> ConfigError:
    close = difflib.get_close_matches(str(name), allowed, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return ConfigError(
        f"{source}: unknown key {path}.{name}{hint}; allowed: {', '.join(sorted(allowed))}."
    )


def _mapping(value: Any, path: str, source: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {path} must be a mapping of keys, not {shown(value)}.")
    return value


def _tree() -> dict[str, Any]:
    """The allowed trainer keys as a nested dict (leaves: rows, sections: None)."""
    tree: dict[str, Any] = {}
    for row in ROWS:
        node = tree
        *heads, last = row.trainer
        for h in heads:
            node = node.setdefault(h, {})
        node[last] = row
    for path, _ in SECTIONS:
        tree.setdefault(path[0], {})[path[1]] = None
    for path in SPECIAL:
        tree[path[0]][path[1]] = None
    return tree


def _callbacks(value: Any, source: str) -> dict[str, Any]:
    """The callbacks list as {name: params}; a toggle's `true` / `{}` -> {}."""
    if not isinstance(value, list):
        raise ConfigError(
            f"{source}: trainer.init.callbacks must be a list of {{Name: {{...}}}}, "
            f"not {shown(value)}."
        )
    out: dict[str, Any] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict) or len(item) != 1:
            raise ConfigError(
                f"{source}: trainer.init.callbacks[{i}] must be one {{Name: {{...}}}}, "
                f"not {shown(item)}."
            )
        ((name, params),) = item.items()
        out[str(name)] = {} if params is True or params is None else params
    return out


def _walk(
    node: dict[str, Any], given: dict[str, Any], path: str, source: str
) -> Iterator[tuple[Row, Any]]:
    """(row, value) of every leaf given; unknown keys refused with a did-you-mean."""
    for k, v in given.items():
        if k not in node:
            raise _unknown(path, k, list(node), source)
        sub = node[k]
        if isinstance(sub, Row):
            yield sub, v
        elif isinstance(sub, dict):
            value = (
                _callbacks(v, source) if k == "callbacks" else _mapping(v, f"{path}.{k}", source)
            )
            if k == "callbacks" and path == "trainer.init":
                for name, params in value.items():
                    if name not in sub:
                        raise _unknown(f"{path}.callbacks", name, list(sub), source)
                    entry = sub[name]
                    if isinstance(entry, Row):  # a toggle
                        yield entry, params is not False
                    else:
                        yield from _walk(
                            entry,
                            _mapping(params, f"{path}.callbacks.{name}", source),
                            f"{path}.callbacks.{name}",
                            source,
                        )
            else:
                yield from _walk(sub, value, f"{path}.{k}", source)


def _set(d: dict[str, Any], path: P, value: Any) -> None:
    for h in path[:-1]:
        d = d.setdefault(h, {})
    d[path[-1]] = value


def _get(d: Any, path: P) -> Any:
    for h in path:
        if not isinstance(d, dict) or h not in d:
            return None
        d = d[h]
    return d


def model_name_of(raw: dict[str, Any], source: str = "params.yaml") -> str:
    """trainer.init.model.name: the model a trainer file trains."""
    name = _get(raw, ("trainer", "init", "model", "name"))
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"{source}: trainer.init.model.name is required (the model to train, e.g. gpt2); "
            "add it to the file."
        )
    return name


def _schedulers_to_lr(value: Any, source: str) -> Any:
    """init.schedulers -> optimizer.learning_rate (a number, one schedule or a list)."""
    where = "trainer.init.schedulers"
    items = value if isinstance(value, list) else [value]
    if len(items) != 1:
        raise ConfigError(
            f"{source}: {where} must hold one scheduler (a SequentialLR for a sequence), "
            f"not {len(items)}; one per parameter group is not supported here."
        )
    ((name, params),) = _mapping(items[0], f"{where}[0]", source).items() or [(None, None)]
    params = dict(_mapping(params, f"{where}[0].{name}", source))
    if name == "SequentialLR":
        subs = params.pop("schedulers", None)
        milestones = params.pop("milestones", None)
        if params:
            raise _unknown(
                f"{where}[0].SequentialLR", next(iter(params)), ["schedulers", "milestones"], source
            )
        if not isinstance(subs, list) or not subs:
            raise ConfigError(
                f"{source}: {where}[0].SequentialLR.schedulers must be a list of schedulers."
            )
        out = []
        for i, sub in enumerate(subs):
            ((n, p),) = _mapping(sub, f"{where}[0].SequentialLR.schedulers[{i}]", source).items()
            out.append(
                {
                    "scheduler": n,
                    **_mapping(p, f"{where}[0].SequentialLR.schedulers[{i}].{n}", source),
                }
            )
        if milestones is not None:
            lengths = [s.get("total_iters", s.get("steps", s.get("decay_steps"))) for s in out[:-1]]
            known = [x for x in lengths if x is not None]
            ends = (
                [sum(known[: i + 1]) for i in range(len(known))]
                if len(known) == len(lengths)
                else None
            )
            if ends != list(milestones):
                raise ConfigError(
                    f"{source}: {where}[0].SequentialLR.milestones ({milestones}) must be where "
                    f"each scheduler's total_iters ends ({ends}); fix or remove them."
                )
        return out
    if name not in SCHEDULER_NAMES.values():
        raise _unknown(f"{where}[0]", name, [*SCHEDULER_NAMES.values(), "SequentialLR"], source)
    if name == "ConstantLR" and set(params) == {"learning_rate"}:
        return params["learning_rate"]  # Model Zoo writes a constant rate as ConstantLR
    return {"scheduler": name, **params}


def _optimizer(value: Any, source: str) -> dict[str, Any]:
    opt = _mapping(value, "trainer.init.optimizer", source)
    if len(opt) != 1:
        raise ConfigError(
            f"{source}: trainer.init.optimizer must name one optimizer ({{AdamW: {{...}}}}), "
            f"not {len(opt)} keys."
        )
    ((kind, params),) = opt.items()
    params = dict(_mapping(params or {}, f"trainer.init.optimizer.{kind}", source))
    return {"optimizer_type": str(kind), **params}


METHODS = {"train": "fit", "train_and_eval": "fit", "eval": "validate", "eval_all": "validate_all"}


def to_legacy(
    raw: dict[str, Any],
    model: str | None = None,
    *,
    method: str = "fit",
    source: str = "params.yaml",
) -> Trainer:
    """The legacy params of a trainer file (not yet validated: runtime/params.py does that),
    where it runs and the front end's flags; ConfigError names the trainer key path.
    `method` (fit, validate, validate_all) decides whose val dataloader is eval_input and
    whose ckpt_path is runconfig.checkpoint_path."""
    body, name = _trainer_body(raw, model, source)
    tree = _tree()
    legacy: dict[str, Any] = {"description": raw["description"]} if "description" in raw else {}
    # the dataloaders and the model first: rows may add to them (micro_batch_size)
    ordered = sorted(SECTIONS, key=lambda ps: ps[0][0] != method)  # the method's own first
    for path, section in ordered:
        value = _get(body, path)
        if value is None:
            continue
        if path[1] == "val_dataloaders" and isinstance(value, list):
            if len(value) != 1:
                raise ConfigError(
                    f"{source}: trainer.validate_all.val_dataloaders has {len(value)} "
                    "dataloaders; cs2sim evaluates one: keep one."
                )
            value = value[0]
        value = dict(_mapping(value, "trainer." + ".".join(path), source))
        if section == "model":
            value.pop("name")
            if "name" in model_schema(name):
                value["name"] = name
        if section not in legacy:
            legacy[section] = value
    out = Trainer(legacy, None, model=name)
    given = {k: v for k, v in body.items()}
    for row, value in _walk(tree, given, "trainer", source):
        where = "trainer." + ".".join(row.trainer)
        if row.trainer[0] in METHODS.values() and row.trainer[0] != method:
            continue  # another method's checkpoint
        if row.toggle:
            value = bool(value)
        elif row.trainer[-1] == "load_checkpoint_states":
            value = load_states(value, where, source)
        elif row.legacy is None or row.legacy[0] != "train_input":
            value = check_value(where, _legacy_key(row, name), value, source)
        if row.legacy is None:
            if row.flag is not None:
                out.flags[row.flag] = value
            elif value is not None:
                out.device = str(value).upper()
            continue
        _set(legacy, row.legacy, value)
    init = body["init"]
    _optimizer_and_lr(legacy, init, method, source)
    if method != "fit" and "train_input" not in legacy and "eval_input" in legacy:
        legacy["train_input"] = dict(legacy["eval_input"])  # never read by an evaluation
    _check_loggers(init, source)
    if _get(legacy, ("train_input", "micro_batch_size")) is not None:
        legacy.setdefault("runconfig", {})["use_cs_grad_accum"] = True
    return out


def _trainer_body(
    raw: dict[str, Any], model: str | None, source: str
) -> tuple[dict[str, Any], str]:
    """The one trainer's mapping and its model's name, after checking the file holds only
    that, names the model this run.py runs (if `model`), and has an init section."""
    extra = [k for k in raw if k not in ("trainer", "description")]
    if extra:
        raise _unknown("<top>", extra[0], ["trainer", "description"], source)
    body = raw["trainer"]
    if isinstance(body, list):
        raise ConfigError(
            f"{source}: trainer is a list of {len(body)} trainers; cs2sim runs one at a time: "
            "split the file."
        )
    body = _mapping(body, "trainer", source)
    name = model_name_of(raw, source)
    if model is not None and name != model:
        raise ConfigError(
            f"{source}: trainer.init.model.name is {name!r}, but this is the run.py of "
            f"{model!r}; run it with `cszoo fit {source}` or {name}'s run.py."
        )
    if "init" not in body:
        raise ConfigError(f"{source}: trainer.init is required (model, optimizer, loop, ...).")
    return body, name


def _optimizer_and_lr(
    legacy: dict[str, Any], init: dict[str, Any], method: str, source: str
) -> None:
    """init.optimizer and init.schedulers -> the legacy optimizer and its learning rate (an
    evaluation may go without one)."""
    if "optimizer" in init:
        legacy["optimizer"] = {
            **_optimizer(init["optimizer"], source),
            **legacy.get("optimizer", {}),
        }
    if "schedulers" in init:
        legacy.setdefault("optimizer", {})["learning_rate"] = _schedulers_to_lr(
            init["schedulers"], source
        )
    elif "learning_rate" not in legacy.get("optimizer", {}):
        if method == "fit":
            raise ConfigError(
                f"{source}: trainer.init.schedulers is required to train (the learning rate, "
                "e.g. [{ConstantLR: {learning_rate: 0.001}}]); add it."
            )
        legacy.setdefault("optimizer", {})["learning_rate"] = 0.0  # an eval takes no step


def _check_loggers(init: dict[str, Any], source: str) -> None:
    """Each of init.loggers is one cs2sim knows."""
    for item in init.get("loggers") or []:
        for logger in _mapping(item, "trainer.init.loggers[]", source):
            if logger not in LOGGERS:
                raise _unknown("trainer.init.loggers", logger, list(LOGGERS), source)


def front_end(raw: dict[str, Any], source: str = "params.yaml") -> Trainer:
    """The model, device and front-end flags of a trainer file, without reading the rest
    (no model schema is loaded: run.py validates the whole file where it runs)."""
    body = _mapping(raw["trainer"], "trainer", source)
    out = Trainer({}, None, model=model_name_of(raw, source))
    for row in ROWS:
        if row.legacy is not None or row.key is None:
            continue
        value = _get(body, row.trainer)
        if value is None:
            continue
        value = check_value("trainer." + ".".join(row.trainer), row.key, value, source)
        if row.flag is not None:
            out.flags[row.flag] = value
        else:
            out.device = str(value).upper()
    return out


def load_states(value: Any, where: str, source: str) -> bool:
    """load_checkpoint_states -> is_pretrained_checkpoint: "model" loads the weights only."""
    text = ",".join(value) if isinstance(value, list) else str(value)
    parts = sorted(p.strip() for p in text.split(",") if p.strip())
    if parts == ["model"]:
        return True
    if parts == ["all"] or set(parts) >= {"model", "optimizer"}:
        return False
    raise ConfigError(
        f"{source}: {where} must be all or model (the weights only), not {shown(value)}."
    )


# -- writing the trainer form of a legacy file ---------------------------------------------------


def _lr_to_schedulers(lr: Any) -> list[dict[str, Any]]:
    """optimizer.learning_rate -> init.schedulers (Model Zoo's convert_lr_scheduler)."""

    def one(p: dict[str, Any]) -> dict[str, Any]:
        p = dict(p)
        p.pop("main_scheduler", None)
        name = str(p.pop("scheduler"))
        return {SCHEDULER_NAMES.get(name.lower(), name): p}

    if isinstance(lr, list):
        if len(lr) == 1:
            return [one(lr[0])]
        return [{"SequentialLR": {"schedulers": [one(p) for p in lr]}}]
    if isinstance(lr, dict):
        return [one(lr)]
    return [{"ConstantLR": {"learning_rate": lr}}]


def to_trainer(raw: dict[str, Any], model: str) -> tuple[dict[str, Any], list[str]]:
    """The trainer form of a legacy params file, and a note for each key it has no place for."""
    legacy = copy.deepcopy(raw)
    init: dict[str, Any] = {}
    body: dict[str, Any] = {"init": init}
    notes: list[str] = []
    _rows_to_trainer(legacy, body)
    # sections copied whole
    model_section = dict(legacy.pop("model", None) or {})
    model_section.pop("name", None)
    init["model"] = {"name": model, **model_section}
    opt = dict(legacy.pop("optimizer", None) or {})
    lr = opt.pop("learning_rate", None)
    kind = opt.pop("optimizer_type", "adam")
    init["optimizer"] = {kind: opt}
    if lr is not None:
        init["schedulers"] = _lr_to_schedulers(lr)
    train, ev = legacy.pop("train_input", None), legacy.pop("eval_input", None)
    if train is not None:
        body.setdefault("fit", {})["train_dataloader"] = train
    if ev is not None:
        if train is not None:
            body["fit"]["val_dataloader"] = ev
        body.setdefault("validate", {})["val_dataloader"] = ev
        body["validate_all"] = {"val_dataloaders": ev}
    for method, needs in (
        ("fit", "train_dataloader"),
        ("validate", "val_dataloader"),
        ("validate_all", "val_dataloaders"),
    ):
        if method in body and needs not in body[method]:
            body.pop(method)  # Model Zoo: no fit without a train dataloader, ...
    if "callbacks" in init:
        init["callbacks"] = [{k: v} for k, v in init["callbacks"].items()]
    notes.extend(_dropped_notes(legacy, train))
    order = (
        "device",
        "backend",
        "model_dir",
        "seed",
        "model",
        "optimizer",
        "schedulers",
        "precision",
        "loop",
        "checkpoint",
        "logging",
        "callbacks",
    )
    body["init"] = {k: init[k] for k in order if k in init}
    out: dict[str, Any] = {}
    if "description" in legacy:
        out["description"] = legacy["description"]
    out["trainer"] = {k: body[k] for k in TOP if k in body}
    return out, notes


def _rows_to_trainer(legacy: dict[str, Any], body: dict[str, Any]) -> None:
    """Move each key the table maps from `legacy` to its trainer place in `body` (the first
    spelling given wins; a checkpoint path goes to every method)."""
    for row in ROWS:
        if row.legacy is None:
            continue
        for path in (row.legacy, *row.aliases):
            value = _get(legacy, path)
            if value is None:
                continue
            for p in (row.legacy, *row.aliases):  # the first spelling given wins
                parent = _get(legacy, p[:-1])
                if isinstance(parent, dict):
                    parent.pop(p[-1], None)
            if row.toggle:
                if value:
                    _set(body, row.trainer, {})
                continue
            if row.trainer[-1] == "load_checkpoint_states":
                value = "model" if value else "all"
            if row.trainer[0] in ("validate", "validate_all") or row.trainer[0] == "fit":
                for where in (("fit", "ckpt_path"), ("validate", "ckpt_path")):
                    _set(body, where, value)
                _set(body, ("validate_all", "ckpt_paths"), value)
                break
            _set(body, row.trainer, value)
            break


def _dropped_notes(legacy: dict[str, Any], train: Any) -> list[str]:
    """A note for each key left in `legacy` that the trainer form has no place for, unless
    nothing is lost (its default, or implied by another key)."""
    notes: list[str] = []
    for section, rest in legacy.items():
        if section == "description":
            continue
        for k, v in rest.items() if isinstance(rest, dict) else [("", rest)]:
            reason = DROPPED.get((section, k), "the trainer form has no such key")
            schema = RUNCONFIG_SCHEMA if section == "runconfig" else {}
            if reason is None or v is None or (k in schema and v == schema[k].default):
                continue  # nothing lost: the trainer form's default is the same
            if k == "use_cs_grad_accum" and isinstance(train, dict) and "micro_batch_size" in train:
                continue  # the micro-batch flag implies it
            notes.append(f"{section}.{k} ({shown(v)}) is not converted: {reason}.")
    return notes


def schema_of(model: str) -> Schema:
    """Every trainer leaf key with its Key, by dotted trainer path (the docs' table)."""
    return {".".join(r.trainer): _legacy_key(r, model) for r in ROWS}
