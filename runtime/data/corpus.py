"""The language models' fallback text: a byte-level corpus of the Python standard library.

When `data_dir` has no token files, gpt2/gptj train on real text that every machine with Python
has: the standard library's `.py` sources (sysconfig's "stdlib" path).
1. files: every `*.py` below it, in order of their relative path, leaving out site-packages
   (it differs between installs), `__pycache__` and the test suites (they hold deliberately
   broken encodings);
2. tokens: each file's raw bytes (ids 0-255) followed by an end-of-text id 256 when
   vocab_size >= 257; with vocab_size == 256 the files simply follow each other; below 256 a
   byte-level corpus cannot be expressed and the build refuses;
3. size: the first CORPUS_MAX_BYTES bytes of that stream (fixed, so every run sees the same text);
4. split by position: the first 90% is train.bin, the last 10% val.bin (uint16, nanoGPT's format).
The result is cached under the data cache dir (runtime/data/cache.py), keyed by the Python
version and these constants, and read back through runtime/data/tokens.py like any token file.
Deterministic for a given Python installation; a different Python version gives other text.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.data.cache import cached_entry
from cs2sim.system.errors import ConfigError

__all__ = [
    "CORPUS_MAX_BYTES",
    "EVAL_FRACTION",
    "EOT",
    "stdlib_files",
    "build_corpus",
    "stdlib_corpus",
]

CORPUS_MAX_BYTES = 8 * 2**20
EVAL_FRACTION = 0.1
EOT = 256  # end-of-text id, after the 256 byte values
EXCLUDED_DIRS = frozenset(
    {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test"}
)
CORPUS_VERSION = 1


def stdlib_files(root: Path | None = None) -> list[Path]:
    """The standard library's .py files in deterministic order."""
    root = Path(sysconfig.get_paths()["stdlib"]) if root is None else root
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if x not in EXCLUDED_DIRS]  # prune: never walk the test suites
        files += [Path(d, n) for n in names if n.endswith(".py")]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def build_corpus(files: list[Path], max_bytes: int, eot: bool) -> tuple[np.ndarray, int]:
    """(tokens uint16 (N,), number of files used): bytes of each file, EOT-separated if asked."""
    parts: list[np.ndarray] = []
    size, used = 0, 0
    for p in files:
        if size >= max_bytes:
            break
        data = np.frombuffer(p.read_bytes(), dtype=np.uint8).astype(np.uint16)
        if eot:
            data = np.append(data, np.uint16(EOT))
        parts.append(data[: max_bytes - size])
        size += len(parts[-1])
        used += 1
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint16)), used


def _key(eot: bool) -> str:
    ident = f"{sys.version}|{sysconfig.get_paths()['stdlib']}|{CORPUS_MAX_BYTES}|{EVAL_FRACTION}"
    ident += f"|{eot}|{CORPUS_VERSION}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def stdlib_corpus(vocab_size: int, root: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """(cache directory holding train.bin and val.bin, its meta) for this vocab_size."""
    if vocab_size < 256:
        raise ConfigError(
            f"vocab_size {vocab_size} is too small for the built-in byte-level "
            f"corpus (it needs >= 256); raise vocab_size or put token files "
            f"(.bin/.npy) in data_dir."
        )
    eot = vocab_size > EOT

    def build(tmp: Path) -> None:
        files = stdlib_files()
        tokens, used = build_corpus(files, CORPUS_MAX_BYTES, eot)  # (N,)
        n_eval = int(len(tokens) * EVAL_FRACTION)
        tokens[: len(tokens) - n_eval].tofile(tmp / "train.bin")
        tokens[len(tokens) - n_eval :].tofile(tmp / "val.bin")
        meta = {
            "python": sys.version.split()[0],
            "stdlib": sysconfig.get_paths()["stdlib"],
            "files": used,
            "tokens": int(len(tokens)),
            "eot": eot,
            "train_tokens": int(len(tokens) - n_eval),
            "eval_tokens": n_eval,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")

    entry = cached_entry(f"stdlib-corpus-{_key(eot)}", build, root)
    return entry, json.loads((entry / "meta.json").read_text())
