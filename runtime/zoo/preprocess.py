"""`cszoo data_preprocess list | pull | run --config FILE` (Model Zoo's
`cli/data_preprocess_cli.py`, github Cerebras/modelzoo): named preprocessing configurations
over runtime/data/preprocess.py's writers (the same ones `cs2sim-preprocess` runs).

A configuration is YAML in the Model Zoo's shape, `setup:` (`mode` - which writer -,
`input_dir`, `output_dir`) and `processing:` (that writer's flags, e.g. `max_seq_length`);
CONFIGS is the table of the shipped ones that `list` shows and `pull` writes out. Every key is
checked against the writer's own fields: an unknown one is refused with a did-you-mean.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
from pathlib import Path
from typing import Any

import yaml

from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.data.preprocess import (
    BertCsvArgs,
    GptHdf5Args,
    write_bert_csv,
    write_gpt_hdf5,
)
from cs2sim.runtime.params import load_params
from cs2sim.runtime.schema import shown
from cs2sim.system.errors import ConfigError

__all__ = ["CONFIGS", "WRITERS", "list_configs", "pull", "run"]

# mode -> (the writer's flags, the writer, what one sample is)
WRITERS: dict[str, tuple[type, Any, str]] = {
    "gpt2-hdf5": (GptHdf5Args, write_gpt_hdf5, "samples of max_seq_length tokens"),
    "bert-csv": (BertCsvArgs, write_bert_csv, "sentence pairs"),
}
# name -> (description, the configuration)
CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "gpt2_pretraining_hdf5": (
        "raw text (.txt/.jsonl) -> GPT-2 BPE tokens in HDF5 (GptHDF5DataProcessor)",
        {
            "setup": {"mode": "gpt2-hdf5", "input_dir": "./raw", "output_dir": "./gpt2_hdf5"},
            "processing": {"max_seq_length": 2048, "files_per_record": 50000, "seed": 0},
        },
    ),
    "gpt2_tiny_hdf5": (
        "raw text -> short GPT-2 sequences (64 tokens) for the tiny configs",
        {
            "setup": {"mode": "gpt2-hdf5", "input_dir": "./raw", "output_dir": "./gpt2_tiny"},
            "processing": {"max_seq_length": 64, "files_per_record": 1000, "seed": 0},
        },
    ),
    "bert_pretraining_csv": (
        "raw text -> BERT sentence pairs in CSV (BertCSVDynamicMaskDataProcessor)",
        {
            "setup": {
                "mode": "bert-csv",
                "input_dir": "./raw",
                "output_dir": "./bert_csv",
            },
            "processing": {"vocab_file": "./vocab.txt", "max_seq_length": 128},
        },
    ),
}


def list_configs(args: argparse.Namespace) -> str:
    """The shipped configurations."""
    width = max(len(n) for n in CONFIGS)
    rows = [f"{'NAME':<{width}}  MODE       DESCRIPTION"]
    for name, (text, cfg) in CONFIGS.items():
        rows.append(f"{name:<{width}}  {cfg['setup']['mode']:<9}  {text}")
    return "\n".join(rows)


def pull(args: argparse.Namespace) -> str:
    """Write a shipped configuration as <name>.yaml in -o (a directory or a file)."""
    if args.name not in CONFIGS:
        close = difflib.get_close_matches(args.name, list(CONFIGS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"no preprocessing configuration {args.name!r}{hint}; "
            "`cszoo data_preprocess list` names them."
        )
    out = Path(args.out) if args.out else Path.cwd()
    dest = out if out.suffix in (".yaml", ".yml") else out / f"{args.name}.yaml"
    dest.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(dest, yaml.safe_dump(CONFIGS[args.name][1], sort_keys=False))
    return f"Saving preprocessing config {args.name} to {dest}."


def _section(raw: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    value = raw.get(name) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {name} must be a mapping of keys, not {shown(value)}.")
    return value


def run(args: argparse.Namespace) -> str:
    """Run the writer the configuration's setup.mode names, with its flags."""
    source = str(args.config)
    raw = load_params(args.config)
    unknown = [k for k in raw if k not in ("setup", "processing")]
    if unknown:
        raise ConfigError(f"{source}: unknown section {unknown[0]!r}; allowed: setup, processing.")
    setup, processing = _section(raw, "setup", source), _section(raw, "processing", source)
    mode = setup.get("mode")
    if mode not in WRITERS:
        raise ConfigError(
            f"{source}: setup.mode must be one of {', '.join(WRITERS)}, not {mode!r}."
        )
    cls, write, unit = WRITERS[mode]
    fields = {f.name for f in dataclasses.fields(cls)}
    values = {**{k: v for k, v in setup.items() if k != "mode"}, **processing}
    for key in values:
        if key not in fields:
            close = difflib.get_close_matches(key, sorted(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"{source}: unknown key {key}{hint} for mode {mode}.")
    missing = [f.name for f in dataclasses.fields(cls)
               if f.default is dataclasses.MISSING and f.name not in values]  # fmt: skip
    if missing:
        raise ConfigError(f"{source}: {missing[0]} is required for mode {mode}; add it.")
    done = write(cls(**values))
    files = len(done.files)
    return (
        f"Wrote {done.samples} {unit} in {files} file{'' if files == 1 else 's'} to "
        f"{values['output_dir']} from {done.documents} documents ({done.tokens} tokens, "
        f"{done.tokens / max(done.seconds, 1e-9):,.0f} tokens/s on this host)."
    )
