"""Sequence (pair) classification samples for BERT fine-tuning (model bert_classifier).

Model Zoo's classifier configs read SST-2 or MNLI (GLUE), which are not on this machine. The
stand-in is a real labelled task on the same real text as BERT's pretraining (the Python
standard library's sources in the byte-level vocabulary, runtime/data/mlm.py `text_source`):
sample i is window i, cut at a point a drawn from (seed, i) into [CLS] A [SEP] B [SEP] (segment
ids 0 then 1), and its label is how deeply the window's lines are indented, the mean over its
non-empty lines of (leading spaces // 4):
    num_labels 2:  0 below 1 level, 1 from 1 level (top-level vs nested code)
    num_labels 3:  0 below 0.5, 1 below 1.5, 2 from 1.5 levels
A property of the text computed from its bytes, so it needs the byte-level text (no vocab_file,
no token files). Batches: {"input_ids", "token_type_ids": (B, T) int32, "labels": (B,) int32}.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.data.mlm import Sample, TextWindows, sequence_length, text_source
from cs2sim.runtime.data.tokens import _open
from cs2sim.runtime.data.vocab import Vocab
from cs2sim.system.errors import ConfigError

__all__ = ["PairRecipe", "PairWindows", "build_pairs", "indent_depth"]

NEWLINE, SPACE = 10, 32


def indent_depth(text: np.ndarray) -> float:
    """Mean indentation level (leading spaces // 4) of the non-empty lines of byte array text."""
    starts = np.r_[0, np.flatnonzero(text == NEWLINE) + 1]  # (lines,) first byte of each line
    levels = []
    for s0, s1 in zip(starts, np.r_[starts[1:] - 1, len(text)], strict=True):
        line = text[s0:s1]
        if len(line) == 0 or (line == SPACE).all():
            continue
        lead = int(np.argmax(line != SPACE))
        levels.append(lead // 4)
    return float(np.mean(levels)) if levels else 0.0


@dataclass(frozen=True)
class PairRecipe:
    """Recipe of the pair samples (picklable, loaded in input workers too)."""

    paths: tuple[str, ...]
    seq_len: int
    vocab: Vocab
    num_labels: int
    seed: int
    offset: int = 0
    lower: bool = False
    nsp: bool = True  # the [CLS] A [SEP] B [SEP] layout (MlmWindows' window length)

    def load(self) -> PairWindows:
        """Memory-map the token files."""
        return PairWindows(self, [_open(Path(p)) for p in self.paths])


class PairWindows(TextWindows[PairRecipe]):
    """Samples i = 0 .. N-1: labelled segment pairs (see the module docstring)."""

    def sample(self, i: int) -> Sample:
        """One sample's arrays."""
        r, v, T, L = self.r, self.r.vocab, self.r.seq_len, self.L
        rng = np.random.default_rng([r.seed % 2**63, i])
        window = self._window(i, L)  # (L,) ids: byte b is id offset + b
        a = int(rng.integers(1, L))
        ids = np.empty(T, dtype=np.int32)
        ids[0], ids[1 : a + 1], ids[a + 1] = v.cls, window[:a], v.sep
        ids[a + 2 : T - 1], ids[T - 1] = window[a:], v.sep
        seg = np.zeros(T, dtype=np.int32)
        seg[a + 2 :] = 1
        depth = indent_depth(window - r.offset)
        bounds = (1.0,) if r.num_labels == 2 else (0.5, 1.5)
        label = int(np.searchsorted(bounds, depth, side="right"))
        return {"input_ids": ids, "token_type_ids": seg, "labels": np.int32(label)}

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        samples = [self.sample(int(i)) for i in idx]
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}


def build_pairs(
    cfg: dict[str, Any], params: dict[str, Any], split: str, section: str
) -> tuple[list[PairRecipe], str]:
    """The pair-classification recipe of one input section, and what the data is."""
    model = params.get("model") or {}
    seq_len = sequence_length(cfg, model, section)
    labels = int(model.get("num_labels") or 2)
    if labels not in (2, 3):
        raise ConfigError(
            f"model.num_labels {labels} has no stand-in task here (2 or 3 "
            "indentation classes); set 2 or 3."
        )
    vocab, paths, offset, lower, source = text_source(cfg, split, section, int(model["vocab_size"]))
    if offset == 0:
        raise ConfigError(
            f"{section}: the stand-in classification task labels the byte-level "
            "text by its indentation; remove vocab_file and the token files "
            "from data_dir (docs/training.md)."
        )
    seed = cfg.get("shuffle_seed")
    seed = (params.get("runconfig") or {}).get("seed") or 0 if seed is None else seed
    recipe = PairRecipe(
        paths,
        seq_len,
        vocab,
        labels,
        int(seed) * 2 + (0 if split == "train" else 1),
        offset,
        lower,
    )
    return [recipe], f"segment pairs labelled by indentation depth ({labels} classes) of {source}"
