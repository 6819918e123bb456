"""`cszoo model list|info` and `cszoo data_processor list|info`: views of the project's model
table (runtime/registry.py) and processor table (runtime/data/processors.py), never a second
list. A model's configs are the YAML files in the `configs/` folder beside its class."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cs2sim.runtime import registry
from cs2sim.runtime.data.processors import DEFAULT, PROCESSORS
from cs2sim.runtime.schema import REQUIRED
from cs2sim.system.errors import ConfigError

__all__ = ["model_list", "model_info", "processor_list", "processor_info", "configs_of"]


def configs_of(name: str) -> list[Path]:
    """The config files shipped with a model (its class's folder's configs/)."""
    folder = Path(inspect.getfile(registry.get(name))).parent / "configs"
    return sorted(folder.glob("*.yaml")) if folder.is_dir() else []


def _summary(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return doc.strip().split("\n")[0].rstrip(".") if doc else ""


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in (header, *rows)]  # fmt: skip
    return "\n".join(lines)


def model_list(args: argparse.Namespace) -> str:
    """One line per model of the table: name, input family, configs, summary."""
    rows = []
    for name in registry.names():
        cls = registry.get(name)
        variants = ", ".join(p.stem.removeprefix("params_") for p in configs_of(name))
        rows.append((name, str(getattr(cls, "family", "")), variants or "-", _summary(cls)))
    return _table(("MODEL", "FAMILY", "CONFIGS", "DESCRIPTION"), rows)


def _known(name: str, table: list[str], what: str, listing: str) -> None:
    if name not in table:
        import difflib

        close = difflib.get_close_matches(name, table, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"no {what} named {name!r}{hint}; `cszoo {listing} list` names them.")


def model_info(args: argparse.Namespace) -> str:
    """The model's summary, its configs (the variant names `config pull` takes) and its keys."""
    _known(args.model, registry.names(), "model", "model")
    cls = registry.get(args.model)
    lines = [f"Model: {args.model}", f"Class: {cls.__module__}.{cls.__qualname__}"]
    lines.append(f"Description: {_summary(cls) or '-'}")
    lines.append(f"Input family: {getattr(cls, 'family', '-')} (default data processor: "
                 f"{DEFAULT.get(getattr(cls, 'family', ''), '-')})")  # fmt: skip
    processors = [n for n, p in PROCESSORS.items() if getattr(cls, "family", "") in p.families]
    lines.append(f"Data processors: {', '.join(processors) or '-'}")
    configs = configs_of(args.model)
    lines.append("Configs (cszoo config pull <variant>):")
    lines += [f"  {args.model}_{p.stem.removeprefix('params_')}  ({p.name})" for p in configs]
    schema: dict[str, Any] = cls.SCHEMA
    lines.append(f"Model keys ({len(schema)}, trainer.init.model):")
    for key, k in schema.items():
        default = "required" if k.default is REQUIRED else f"default {k.default!r}"
        lines.append(f"  {key}: {default}. {k.doc}".rstrip())
    return "\n".join(lines)


def processor_list(args: argparse.Namespace) -> str:
    """One line per data processor: name, the model families it feeds, what it reads."""
    rows = [(n, ", ".join(p.families), p.fmt) for n, p in PROCESSORS.items()]
    return _table(("DATA PROCESSOR", "FAMILIES", "READS"), rows)


def processor_info(args: argparse.Namespace) -> str:
    """What one processor reads, for which models, and how a config names it."""
    name = args.data_processor
    _known(name, list(PROCESSORS), "data processor", "data_processor")
    p = PROCESSORS[name]
    models = [m for m in registry.names() if getattr(registry.get(m), "family", "") in p.families]
    same = [n for n, q in PROCESSORS.items() if q is p and n != name]
    lines = [
        f"Data processor: {name}",
        f"Reads: {p.fmt} (file names ending {', '.join(p.suffixes)})",
        f"Models: {', '.join(models) or '-'}",
        f"Same reader as: {', '.join(same) or '-'}",
        "Use it in a config:",
        "  trainer.fit.train_dataloader:",
        f"    data_processor: {name}",
        "    data_dir: <a directory of those files>",
    ]
    return "\n".join(lines)
