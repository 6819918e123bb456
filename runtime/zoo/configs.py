"""`cszoo config pull | validate | convert_legacy | diff | stats` (Model Zoo's
`cli/config_mgmt_cli.py`, github Cerebras/modelzoo).

`pull` copies a shipped config (runtime/zoo/tables.py configs_of: the YAML files beside each
model of the model table); `validate` checks a file of either format as run.py would;
`convert_legacy` writes the trainer form of a legacy file (runtime/trainer_format); `diff`
names the key paths added, removed and changed between two files (a legacy file is compared in
its trainer form when the other one is a trainer file); `stats` counts the parameters of each
layer of the model the file describes, built shape-only (runtime/compiler/meta.py), so a 7B
config costs no memory.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cs2sim.runtime import registry
from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.params import load_params, validate_params
from cs2sim.runtime.trainer_format.convert import is_trainer, model_name_of, to_legacy, to_trainer
from cs2sim.runtime.zoo.tables import configs_of
from cs2sim.system.errors import ConfigError

__all__ = ["effective", "pull", "validate", "convert_legacy", "diff", "stats", "variants"]


def variants() -> dict[str, list[Path]]:
    """Every name `config pull` takes -> the shipped files it may mean: <model>_<variant>
    (gpt2_tiny), the file's stem without params_ (gpt2_small) and the stem itself."""
    names: dict[str, list[Path]] = {}
    for model in registry.names():
        for path in configs_of(model):
            short = path.stem.removeprefix("params_")
            for name in {f"{model}_{short}", short, path.stem}:
                names.setdefault(name, []).append(path)
    return names


def _model_of_legacy(raw: dict[str, Any], path: Path, given: str | None) -> str:
    """A legacy file's model: --model, its model.name, or the model whose configs/ it is in."""
    name = given or (raw.get("model") or {}).get("name")
    if not name:
        for model in registry.names():
            if path.resolve() in [p.resolve() for p in configs_of(model)]:
                name = model
    if not name:
        raise ConfigError(
            f"{path}: the legacy file does not name its model (model.name); pass --model "
            f"(one of {', '.join(registry.names())})."
        )
    if name not in registry.names():
        raise ConfigError(
            f"{path}: model {name!r} is not in the model table; `cszoo model list` names them."
        )
    return str(name)


def effective(
    path: str | Path, model: str | None = None
) -> tuple[str, dict[str, Any], list[str], str]:
    """(model, the validated params in the legacy sections, warnings, "trainer" or "legacy")."""
    p = Path(path)
    raw = load_params(p)
    if is_trainer(raw):
        t = to_legacy(raw, source=str(p))
        assert t.model is not None
        params, warnings = validate_params(t.legacy, t.model, source=str(p))
        return t.model, params, warnings, "trainer"
    name = _model_of_legacy(raw, p, model)
    params, warnings = validate_params(raw, name, source=str(p))
    return name, params, warnings, "legacy"


def _destination(out: str | None, name: str) -> Path:
    """-o: a directory (the file keeps its name) or a file path; default the working dir."""
    dest = Path(out) if out else Path(os.getcwd())
    if dest.suffix.lower() in (".yaml", ".yml") and not dest.is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    return dest / name


def pull(args: argparse.Namespace) -> str:
    """Copy a shipped config to -o (a directory or a file)."""
    found = variants().get(args.variant, [])
    unique = sorted({p.resolve() for p in found})
    if not unique:
        import difflib

        close = difflib.get_close_matches(args.variant, list(variants()), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"config variant {args.variant!r} is not shipped{hint}; `cszoo model info <model>` "
            "names each model's variants."
        )
    if len(unique) > 1:
        raise ConfigError(
            f"config variant {args.variant!r} names {len(unique)} files; use the "
            f"<model>_<variant> name (e.g. {registry.names()[0]}_{args.variant})."
        )
    src = unique[0]
    dest = _destination(args.out, src.name)
    atomic_write(dest, src.read_text())
    return f"Saving config {args.variant} to {dest}."


def validate(args: argparse.Namespace) -> str:
    """Check a file as run.py would; the warnings (unknown model or input keys) are listed."""
    model, params, warnings, fmt = effective(args.config)
    lines = [*warnings, f"Config {args.config} is valid ({fmt} format, model {model})."]
    return "\n".join(lines)


def convert_legacy(args: argparse.Namespace) -> str:
    """Write <stem>_v2.yaml, the trainer form of a legacy file (device CSX when unset, as
    Model Zoo's convert_legacy does)."""
    path = Path(args.config)
    raw = load_params(path)
    if is_trainer(raw):
        return f"Config file {path} is not a legacy config."
    model = _model_of_legacy(raw, path, args.model)
    validate_params(raw, model, source=str(path))  # a broken file is refused, not converted
    converted, notes = to_trainer(raw, model)
    converted["trainer"]["init"] = {"device": "CSX", **converted["trainer"]["init"]}
    dest = _destination(args.out, f"{path.stem}_v2.yaml")
    atomic_write(dest, yaml.safe_dump(converted, sort_keys=False, default_flow_style=False))
    return "\n".join([*(f"note: {n}" for n in notes), f"Saving converted config to {dest}."])


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    """Key path -> value; a list of mappings is indexed (schedulers[0].SequentialLR...)."""
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(d, list) and d and all(isinstance(x, dict) for x in d):
        out = {}
        for i, v in enumerate(d):
            out.update(_flat(v, f"{prefix}[{i}]"))
        return out
    return {prefix: d}


def diff(args: argparse.Namespace) -> str:
    """Added / Removed / Changed key paths (verbose 0: paths; 1: changed values; 2: all)."""
    left, right = load_params(args.left), load_params(args.right)
    head = []
    if is_trainer(left) != is_trainer(right):  # compare in the trainer form
        model = model_name_of(left if is_trainer(left) else right, str(args.left))
        if is_trainer(left):
            right = to_trainer(right, model)[0]
            head.append(f"({args.right} is compared in its trainer form)")
        else:
            left = to_trainer(left, model)[0]
            head.append(f"({args.left} is compared in its trainer form)")
    a, b = _flat(left), _flat(right)
    added = [k for k in b if k not in a]
    removed = [k for k in a if k not in b]
    changed = [k for k in a if k in b and a[k] != b[k]]
    if not (added or removed or changed):
        return "\n".join([*head, "Configs are identical."])
    v = args.verbose_level
    lines = head
    shows: tuple[tuple[str, list[str], Callable[[str], str]], ...] = (
        ("Added", added, lambda k: f"{k}: {b[k]!r}"),
        ("Removed", removed, lambda k: f"{k}: {a[k]!r}"),
        ("Changed", changed, lambda k: f"{k}: {a[k]!r} -> {b[k]!r}"),
    )
    for title, keys, show in shows:
        if keys:
            lines.append(f"{title}:")
            verbose = v >= 2 or (v == 1 and title == "Changed")
            lines += [f"  {show(k) if verbose else k}" for k in keys]
    return "\n".join(lines)


def stats(args: argparse.Namespace) -> str:
    """The parameters of each layer of the model (its layer graph), and the total."""
    from cs2sim.runtime.compiler.graph import build_meta_model
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision

    model_name, params, _, _ = effective(args.params)
    half, _ = resolve_precision(params)
    model = build_meta_model(model_name, params, half)
    rows: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for s in model.layer_graph(1):
        if not s.params:
            continue
        shared = bool(s.param_names) and set(s.param_names) <= seen
        seen.update(s.param_names)  # a tied weight (the output layer's) counts once
        rows.append((s.name + (" (tied)" if shared else ""), s.kind, 0 if shared else s.params))
    columns = ("name", "kind", "params")
    if args.order_by:
        keys = [c.strip() for c in args.order_by.split(",")]
        bad = [k for k in keys if k not in columns]
        if bad:
            raise ConfigError(f"--order_by {bad[0]} is not a column; use {', '.join(columns)}.")
        rows.sort(key=lambda r: tuple(r[columns.index(k)] for k in keys), reverse=args.descending)
    total = model.num_params()
    width = max([len(r[0]) for r in rows] + [len("Total")])
    kind_w = max([len(r[1]) for r in rows] + [4])
    lines = [f"Model {model_name}: parameters per layer (host count of its layer graph)"]
    lines.append(f"{'Layer':<{width}}  {'Kind':<{kind_w}}  {'Params':>14}  {'Share':>6}")
    for name, kind, n in rows:
        lines.append(f"{name:<{width}}  {kind:<{kind_w}}  {n:>14,}  {100 * n / total:>5.1f}%")
    lines.append(f"{'Total':<{width}}  {'':<{kind_w}}  {total:>14,}  100.0%")
    return "\n".join(lines)
