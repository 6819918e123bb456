"""The data processors a params file may name: ONE table, name -> what it reads and how.

`train_input.data_processor` / `eval_input.data_processor` names the reader, as in the Model Zoo;
absent, the model family's default reader (DEFAULT) is used. `resolve()` decides, for one input
section, between the user's files and the stand-in data, and never swaps one for the other
silently:

* data_dir set and (some entry) exists: every entry must hold files of the processor's format,
  else the run stops with one sentence naming the directory, what was looked for and what is
  there ("it holds 3 .tfrecords files, but the config's processor GptHDF5DataProcessor reads
  HDF5 files (.h5)").
* none of data_dir's entries exists (a typo, or a published config's placeholder path): an
  error naming it and both ways out (point data_dir at the data, or add `stand_in_data: True`),
  unless the section asks for stand-in data with `stand_in_data: True` (the shipped small
  configs do): then the family's stand-in data (the standard library's text, the digits
  table), logged as asked for.
* data_dir unset: the stand-in data, with a WARNING that says so and how to point it at real
  data (or logged as asked for, with `stand_in_data: True`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs2sim.runtime.data.hdf5 import find_h5_files
from cs2sim.runtime.data.mnist import find_idx_files
from cs2sim.runtime.data.shards import data_dirs
from cs2sim.runtime.data.tabular import find_csv_files, find_tsv_files
from cs2sim.runtime.data.tfrecord import find_tfrecord_files
from cs2sim.runtime.data.tokens import find_token_files
from cs2sim.system.errors import ConfigError

__all__ = ["Processor", "PROCESSORS", "DEFAULT", "Resolved", "resolve", "processor_for"]

log = logging.getLogger("cs2sim.data")


def _has_idx(d: str, split: str) -> list[Any]:
    found = find_idx_files(d, split)
    return [found] if found else []


@dataclass(frozen=True)
class Processor:
    """One reader: the model families it feeds, its format, how it finds files in a directory."""

    families: tuple[str, ...]
    fmt: str  # what it reads, for messages: "HDF5 files (.h5)"
    suffixes: tuple[str, ...]  # file name endings it reads (to name what a directory holds)
    find: Callable[[str, str], list[Any]]  # (directory, split) -> its files ([] when none)
    kind: str  # the builder in runtime/data/__init__.py: "family", "hdf5", "tfrecord", "csv"


_TOKENS = Processor(
    ("lm", "mlm"), "token files (.bin/.npy)", (".bin", ".npy"), find_token_files, "family"
)
_HDF5 = Processor(("lm",), "HDF5 files (.h5)", (".h5",), lambda d, s: find_h5_files(d), "hdf5")
_TFR_GPT = Processor(
    ("lm",),
    "TFRecord files (.tfrecords)",
    (".tfrecords", ".tfrecord"),
    lambda d, s: find_tfrecord_files(d),
    "tfrecord",
)
_TFR_BERT = Processor(
    ("mlm",),
    "TFRecord files (.tfrecords)",
    (".tfrecords", ".tfrecord"),
    lambda d, s: find_tfrecord_files(d),
    "tfrecord",
)
_CSV_BERT = Processor(
    ("mlm",), "BERT CSV files (.csv)", (".csv",), lambda d, s: find_csv_files(d), "csv"
)
_TSV_CLS = Processor(
    ("pairs",), "GLUE TSV files (train.tsv, dev.tsv)", (".tsv",), find_tsv_files, "tsv"
)

PROCESSORS: dict[str, Processor] = {
    "TokenFileDataProcessor": _TOKENS,  # nanoGPT-style uint16 .bin / .npy (runtime/data/tokens.py)
    "MNISTDataProcessor": Processor(
        ("mnist",), "MNIST IDX files", ("-ubyte", "-ubyte.gz"), _has_idx, "family"
    ),
    "GptHDF5DataProcessor": _HDF5,
    "HDF5IterableDataProcessor": _HDF5,  # later Model Zoo releases' name for the same layout
    "GptTfRecordsProcessor": _TFR_GPT,
    "BertTfRecordsProcessor": _TFR_BERT,
    "BertCSVDynamicMaskDataProcessor": _CSV_BERT,
    "SST2DataProcessor": _TSV_CLS,
    "Sst2DataProcessor": _TSV_CLS,  # the TF classifier configs' spelling
    "MNLIDataProcessor": _TSV_CLS,
    "MnliDataProcessor": _TSV_CLS,  # the TF classifier configs' spelling
}
# The reader of a family whose section names none.
DEFAULT = {
    "lm": "TokenFileDataProcessor",
    "mlm": "TokenFileDataProcessor",
    "mnist": "MNISTDataProcessor",
    "pairs": "SST2DataProcessor",
}
# How the stand-in data is described, and what to set instead.
STAND_IN = {
    "lm": "the byte-level text of the Python standard library",
    "mlm": "the Python standard library's text",
    "pairs": "segment pairs of the Python standard library's text labelled by indentation",
    "mnist": "the built-in 8x8 digits table brought to 28x28",
}


def processor_for(name: str | None, family: str, section: str) -> tuple[str, Processor]:
    """(name, Processor) of a section's data_processor (the family's default when None)."""
    name = name or DEFAULT[family]
    proc = PROCESSORS.get(name)
    if proc is None:
        names = ", ".join(n for n, p in PROCESSORS.items() if family in p.families)
        raise ConfigError(
            f"{section}.data_processor {name!r} is not a data processor cs2sim "
            f"has; for this model use one of: {names}."
        )
    if family not in proc.families:
        names = ", ".join(n for n, p in PROCESSORS.items() if family in p.families)
        raise ConfigError(
            f"{section}.data_processor {name} reads {proc.fmt} for other models; "
            f"for this model use one of: {names}."
        )
    return name, proc


def _census(d: Path) -> str:
    """What a directory holds, by file ending: "it holds 3 .tfrecords files, 1 .txt file"."""
    try:
        names = [p.name for p in d.iterdir()]
    except OSError as e:
        return f"it cannot be read ({e.strerror})"
    if not names:
        return "it is empty"
    ends = Counter(Path(n).suffix or "(no suffix)" for n in names)
    return "it holds " + ", ".join(
        f"{c} {e} file{'' if c == 1 else 's'}" for e, c in ends.most_common(3)
    )


def _reader_of(d: Path, family: str, split: str) -> str | None:
    """A processor of this family that reads what the directory holds (for the hint)."""
    for name, proc in PROCESSORS.items():
        if family not in proc.families:
            continue
        try:
            if proc.find(str(d), split):
                return name
        except ConfigError:
            continue
    return None


@dataclass(frozen=True)
class Resolved:
    """A section's data: its processor, and the directories to read or None for stand-in."""

    name: str
    processor: Processor
    dirs: list[str] | None  # None: the stand-in data
    found: list[list[Any]]  # per directory, what processor.find returned


def resolve(cfg: dict[str, Any], family: str, section: str, split: str) -> Resolved:
    """Which data a section reads (see the module docstring); errors and warnings here."""
    name, proc = processor_for(cfg.get("data_processor"), family, section)
    dirs = [d for d in data_dirs(cfg.get("data_dir")) if d.strip()]
    present = [d for d in dirs if Path(d).exists()]
    if not present:
        why = (
            f"{section}.data_dir {dirs[0]} does not exist"
            if len(dirs) == 1
            else f"none of the {len(dirs)} entries of {section}.data_dir exists"
            if dirs
            else f"{section} has no data_dir"
        )
        if cfg.get("stand_in_data"):
            log.info(
                "%s.stand_in_data: %s, so the run trains on stand-in data (%s).",
                section,
                why,
                STAND_IN[family],
            )
        elif dirs:  # a typo, or a published config's placeholder: never trained on silently
            raise ConfigError(
                f"{why}; point {section}.data_dir at your data ({proc.fmt} for {name}) "
                f"or add `stand_in_data: True` to {section} to train on stand-in data."
            )
        else:
            log.warning(
                "%s, so the run trains on STAND-IN data (%s), not on your data set; "
                "set %s.data_dir to a directory of %s for %s.",
                why,
                STAND_IN[family],
                section,
                proc.fmt,
                name,
            )
        return Resolved(name, proc, None, [])
    found = []
    for i, d in enumerate(dirs):
        where = f"{section}.data_dir" + (f"[{i}]" if len(dirs) > 1 else "")
        if not Path(d).exists():
            raise ConfigError(
                f"{where} ({d}) does not exist while other entries do; fix the "
                f"path or remove it from the list."
            )
        files = proc.find(d, split)
        if not files:
            other = _reader_of(Path(d), family, split)
            hint = f"point data_dir at {proc.fmt}"
            if other and other != name:
                hint = f"set data_processor to {other}, which reads them, or {hint}"
            raise ConfigError(
                f"{where} {d} holds no {proc.fmt}: {_census(Path(d))}, but the "
                f"config's processor {name} reads {proc.fmt}; {hint}."
            )
        found.append(files)
    return Resolved(name, proc, dirs, found)
