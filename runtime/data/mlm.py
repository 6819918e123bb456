"""BERT's pretraining input: masked-LM (and next-sentence) samples made from real text.

Text: token files in data_dir (ids in the model's vocabulary), else the Python standard library's
sources (runtime/data/corpus.py): as bytes in the fallback vocabulary (byte b -> id 4 + b,
lower-cased with do_lower), or cut into WordPiece tokens when the input's vocab_file exists
(runtime/data/vocab.py; the first WORDPIECE_MAX_BYTES of the text, cached).

Sample i is window i of the token stream (L = T - 3 tokens with the next-sentence task, T - 2
without), made as Model Zoo's BERT processors make it (BertCSVDynamicMaskDataProcessor,
create_masked_lm_predictions), from a generator seeded by (seed, i), so a sample is the same
whatever the batch it falls in:
1. next sentence: a split point a in [1, L); half the time (is_random_next, label 1) the second
   segment is the start of another window. [CLS] A [SEP] B [SEP], segment ids 0 then 1.
   Without it: [CLS] window [SEP].
2. masking: min(max_predictions_per_seq, max(1, round(n * masked_lm_prob))) of the n content
   tokens ([CLS] and [SEP] never), chosen at random; each replaced by [MASK] 80% of the time, by
   a random token of the vocabulary's pool 10%, kept 10%. Positions ascending, padded to P with
   position 0, label 0, weight 0 (masked_lm_positions / _ids / _weights).
3. loss weights, per batch (the loss head divides by the batch size only):
     dynamic_mlm_scale (PyTorch)            w = mask * B / (masked tokens in the batch)
     scale_mlm_weights (TF), or model.mlm_loss_scaling num_masked / precomputed_num_masked
                                            w = mask * B / (masked tokens) * mlm_loss_weight
     otherwise                              w = mask * mlm_loss_weight
   so every MLM loss scaling Model Zoo has is in the weights, and a micro-batch of the batch
   carries its share of the batch's normalisation.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from cs2sim.runtime.data.cache import cached_entry
from cs2sim.runtime.data.corpus import EVAL_FRACTION, stdlib_corpus, stdlib_files
from cs2sim.runtime.data.tokens import _open, find_token_files
from cs2sim.runtime.data.vocab import (
    BYTE_OFFSET,
    Vocab,
    fallback_vocab,
    read_vocab,
    text_casing_advice,
    warn_casing,
    wordpiece_ids,
)
from cs2sim.system.errors import ConfigError

__all__ = [
    "MlmRecipe",
    "MlmWindows",
    "Sample",
    "TextWindows",
    "WindowRecipe",
    "build_mlm",
    "sequence_length",
    "text_source",
    "WORDPIECE_MAX_BYTES",
]

WORDPIECE_MAX_BYTES = 2 * 2**20
CASING_SAMPLE_BYTES = 64 * 1024
WORDPIECE_VERSION = 1


@dataclass(frozen=True)
class MlmRecipe:
    """Recipe of the masked-LM samples (picklable: also loaded inside every input worker)."""

    paths: tuple[str, ...]
    seq_len: int
    vocab: Vocab
    predictions: int
    masked_lm_prob: float
    nsp: bool
    seed: int
    scale_by_masked: bool
    weight: float  # mlm_loss_weight, or 1.0 under dynamic_mlm_scale
    offset: int = 0  # added to the stored ids (raw bytes -> the fallback vocabulary)
    lower: bool = False  # lower-case ASCII bytes first (byte-level do_lower)

    def load(self) -> MlmWindows:
        """Memory-map the token files."""
        return MlmWindows(self, [_open(Path(p)) for p in self.paths])


class WindowRecipe(Protocol):
    """What TextWindows reads of its recipe (MlmRecipe; PairRecipe, runtime/data/classify.py)."""

    @property
    def paths(self) -> tuple[str, ...]: ...
    @property
    def seq_len(self) -> int: ...
    @property
    def nsp(self) -> bool: ...
    @property
    def offset(self) -> int: ...
    @property
    def lower(self) -> bool: ...


R = TypeVar("R", bound=WindowRecipe)
# one sample: arrays, and a scalar label (stacked into (B,) by `batch`)
Sample = dict[str, np.ndarray | np.int32]


class TextWindows(Generic[R]):
    """Samples i = 0 .. N-1 over the concatenated token files (windows never cross a file)."""

    def __init__(self, recipe: R, arrays: list[np.ndarray]) -> None:
        self.r = recipe
        self.L = recipe.seq_len - (3 if recipe.nsp else 2)  # content tokens per sample
        if self.L < 2:
            raise ConfigError(
                f"max_sequence_length {recipe.seq_len} is too short for BERT's "
                "[CLS]/[SEP] tokens and two segments; raise it."
            )
        self.arrays = arrays
        counts = [len(a) // self.L for a in arrays]
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)  # (F+1,)
        if len(self) < 2:
            raise ConfigError(
                f"token files {', '.join(recipe.paths)} hold too few tokens for "
                f"two samples of max_sequence_length {recipe.seq_len}; add data."
            )
        self._lut: np.ndarray | None = None
        if recipe.lower:  # ASCII upper case -> lower case, on the raw bytes
            self._lut = np.arange(256, dtype=np.int64)
            self._lut[65:91] += 32

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _window(self, i: int, n: int) -> np.ndarray:
        """The first n tokens of window i, in the model's ids."""
        f = int(np.searchsorted(self.starts, i, side="right") - 1)
        s = (i - int(self.starts[f])) * self.L
        w = np.asarray(self.arrays[f][s : s + n], dtype=np.int64)  # (n,)
        if self._lut is not None:
            w = self._lut[w]
        return w + self.r.offset


class MlmWindows(TextWindows[MlmRecipe]):
    """The masked-LM samples (see the module docstring)."""

    def sample(self, i: int) -> Sample:
        """One sample's arrays (before the batch's weight scaling)."""
        r, v, T, L, P = self.r, self.r.vocab, self.r.seq_len, self.L, self.r.predictions
        rng = np.random.default_rng([r.seed % 2**63, i])
        ids = np.full(T, v.pad, dtype=np.int64)  # (T,)
        seg = np.zeros(T, dtype=np.int32)  # (T,)
        window = self._window(i, L)  # (L,)
        nsp_label = 0
        if r.nsp:  # 1) [CLS] A [SEP] B [SEP]
            a = int(rng.integers(1, L))
            if rng.random() < 0.5:
                nsp_label = 1  # is_random_next: B from the start of another window
                j = int(rng.integers(0, len(self) - 1))
                j += j >= i
                b = self._window(j, L - a)
            else:
                b = window[a:]
            ids[0], ids[1 : a + 1], ids[a + 1] = v.cls, window[:a], v.sep
            ids[a + 2 : T - 1], ids[T - 1] = b, v.sep
            seg[a + 2 :] = 1
            content = np.r_[1 : a + 1, a + 2 : T - 1]  # (L,) positions that may be masked
        else:  # [CLS] window [SEP]
            ids[0], ids[1 : L + 1], ids[L + 1] = v.cls, window, v.sep
            content = np.arange(1, L + 1)
        # 2) choose and corrupt the predictions
        n = min(P, max(1, int(round(len(content) * r.masked_lm_prob))))
        pos = np.sort(rng.choice(content, size=n, replace=False))  # (n,)
        labels = ids[pos].copy()
        u = rng.random(n)  # (n,) 80% [MASK], 10% random, 10% kept
        ids[pos[u < 0.8]] = v.mask
        swap = pos[(u >= 0.8) & (u < 0.9)]
        ids[swap] = rng.integers(v.pool[0], v.pool[1], size=len(swap))
        positions = np.zeros(P, dtype=np.int32)
        mlm_ids = np.zeros(P, dtype=np.int32)
        weights = np.zeros(P, dtype=np.float32)
        positions[:n], mlm_ids[:n], weights[:n] = pos, labels, 1.0
        return {
            "input_ids": ids.astype(np.int32),
            "token_type_ids": seg,
            "masked_lm_positions": positions,
            "masked_lm_ids": mlm_ids,
            "masked_lm_weights": weights,
            "next_sentence_label": np.int32(nsp_label),
        }

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The samples of `idx` stacked, with the batch's loss weights (3 in the docstring)."""
        samples = [self.sample(int(i)) for i in idx]
        out = {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        w = out["masked_lm_weights"]  # (B, P)
        if self.r.scale_by_masked:
            w *= np.float32(len(idx) / max(float(w.sum()), 1.0))
        if self.r.weight != 1.0:
            w *= np.float32(self.r.weight)
        return out


def _wordpiece_files(vocab: Vocab, index: dict[str, int]) -> Path:
    """train.bin / val.bin of the standard library's text in WordPiece ids (cached)."""
    digest = hashlib.sha256(Path(vocab.path or "").read_bytes()).hexdigest()[:12]
    key = f"wordpiece-{digest}-{int(vocab.do_lower)}-{WORDPIECE_MAX_BYTES}-{WORDPIECE_VERSION}"
    dtype = np.uint16 if vocab.size <= 2**16 else np.int32

    def build(tmp: Path) -> None:
        parts, size = [], 0
        for p in stdlib_files():
            if size >= WORDPIECE_MAX_BYTES:
                break
            text = p.read_bytes()[: WORDPIECE_MAX_BYTES - size]
            size += len(text)
            parts.append(wordpiece_ids(text.decode("utf-8", "replace"), index, vocab.do_lower))
        ids = np.array([t for part in parts for t in part], dtype=dtype)  # (N,)
        n_eval = int(len(ids) * EVAL_FRACTION)
        suffix = ".bin" if dtype == np.uint16 else ".npy"
        for name, arr in (("train", ids[: len(ids) - n_eval]), ("val", ids[len(ids) - n_eval :])):
            if suffix == ".bin":
                arr.tofile(tmp / f"{name}.bin")
            else:
                np.save(tmp / f"{name}.npy", arr)
        (tmp / "meta.json").write_text(json.dumps({"tokens": int(len(ids))}) + "\n")

    return cached_entry(key, build)


def _warn_casing(vocab: Vocab, index: dict[str, int]) -> None:
    """Warn when do_lower does not suit the vocab_file, measured on the stand-in text's first
    CASING_SAMPLE_BYTES (vocab.py casing_advice)."""
    texts, size = [], 0
    for p in stdlib_files():
        if size >= CASING_SAMPLE_BYTES:
            break
        text = p.read_bytes()[: CASING_SAMPLE_BYTES - size]
        size += len(text)
        texts.append(text.decode("utf-8", "replace"))
    where = f"the stand-in text (its first {CASING_SAMPLE_BYTES // 1024} KiB)"
    path = vocab.path or ""
    warn_casing(path, vocab.do_lower, text_casing_advice(texts, index, vocab.do_lower, path, where))


def _vocab_of(cfg: dict[str, Any], section: str, vocab_size: int) -> tuple[Vocab, Any]:
    """The vocabulary the input uses and, for a vocab_file, its token index."""
    lower = bool(cfg.get("do_lower", False))
    path = cfg.get("vocab_file")
    if path and Path(path).is_file():
        vocab, index = read_vocab(path, lower)
        if vocab.size > vocab_size:
            raise ConfigError(
                f"{section}.vocab_file {path} has {vocab.size} tokens but "
                f"model.vocab_size is {vocab_size}; make them equal."
            )
        return vocab, index
    if vocab_size < fallback_vocab().size:
        raise ConfigError(
            f"model.vocab_size {vocab_size} is too small for the byte-level "
            f"fallback vocabulary ({fallback_vocab().size} ids); raise it or give "
            f"{section}.vocab_file."
        )
    return fallback_vocab(lower), None


def sequence_length(cfg: dict[str, Any], model: dict[str, Any], section: str) -> int:
    """A BERT input section's max_sequence_length, else model.max_position_embeddings."""
    seq_len = cfg.get("max_sequence_length") or model.get("max_position_embeddings")
    if not seq_len:
        raise ConfigError(
            f"{section}.max_sequence_length is not set (nor model.max_position_embeddings); add it."
        )
    return int(seq_len)


def _mask_seed(cfg: dict[str, Any], params: dict[str, Any], split: str) -> int:
    """The masks' seed: the section's shuffle_seed, else the run's seed; eval apart from train."""
    seed = cfg.get("shuffle_seed")
    if seed is None:
        seed = (params.get("runconfig") or {}).get("seed") or 0
    return int(seed) * 2 + (0 if split == "train" else 1)


def text_source(
    cfg: dict[str, Any], split: str, section: str, vocab_size: int
) -> tuple[Vocab, tuple[str, ...], int, bool, str]:
    """(vocabulary, token files, id offset, lower-case bytes, what it is) of a BERT input
    section: token files in data_dir, else the standard library's text (WordPiece with a
    vocab_file, else the byte-level fallback)."""
    vocab, index = _vocab_of(cfg, section, int(vocab_size))
    dirs = cfg.get("data_dir")
    dirs = dirs if isinstance(dirs, list) else [dirs] if dirs else []
    files = [p for d in dirs for p in find_token_files(d, split)]
    offset, lower = 0, False
    why = cfg.get("_stand_in_why") or "no token files in data_dir"
    if files:
        paths = tuple(str(p) for p in files)
        source = f"token files {', '.join(p.name for p in files)} in {files[0].parent}"
    elif index is not None:
        entry = _wordpiece_files(vocab, index)
        _warn_casing(vocab, index)
        paths = tuple(
            str(p) for p in sorted(entry.glob(("train" if split == "train" else "val") + ".*"))
        )
        source = (
            f"the Python standard library's sources in WordPiece tokens of {vocab.path} "
            f"(first {WORDPIECE_MAX_BYTES // 2**20} MiB; {why})"
        )
    else:
        entry, meta = stdlib_corpus(256)
        paths = (str(entry / ("train.bin" if split == "train" else "val.bin")),)
        offset, lower = BYTE_OFFSET, vocab.do_lower
        source = (
            f"byte-level corpus of the Python {meta['python']} standard library in the "
            f"{vocab.source}{', lower-cased' if lower else ''}; {why}"
        )
    return vocab, paths, offset, lower, source


def build_mlm(
    cfg: dict[str, Any], params: dict[str, Any], split: str, section: str
) -> tuple[list[MlmRecipe], str]:
    """The masked-LM recipe of one input section, and what the data is (one phrase)."""
    model = params.get("model") or {}
    seq_len = cfg.get("max_sequence_length") or model.get("max_position_embeddings")
    vocab_size = model.get("vocab_size")
    if not seq_len or not vocab_size:
        raise ConfigError(
            f"{section}.max_sequence_length and model.vocab_size must be set; add them."
        )
    if seq_len > (model.get("max_position_embeddings") or seq_len):
        raise ConfigError(
            f"{section}.max_sequence_length ({seq_len}) exceeds "
            f"model.max_position_embeddings ({model['max_position_embeddings']}); "
            "lower it."
        )
    if cfg.get("whole_word_masking") or cfg.get("mask_whole_word"):
        raise ConfigError(
            f"{section}.whole_word_masking is not implemented (tokens are masked "
            "one at a time); set it to false."
        )
    vocab, paths, offset, lower, source = text_source(cfg, split, section, int(vocab_size))
    scaling = model.get("mlm_loss_scaling")
    dynamic = bool(cfg.get("dynamic_mlm_scale"))
    by_masked = (
        dynamic
        or bool(cfg.get("scale_mlm_weights"))
        or scaling in ("num_masked", "precomputed_num_masked")
    )
    if scaling == "batch_size" and not dynamic:
        by_masked = False
    weight = 1.0 if dynamic else float(model.get("mlm_loss_weight") or 1.0)
    nsp = not model.get("disable_nsp", False)
    recipe = MlmRecipe(
        paths,
        int(seq_len),
        vocab,
        int(cfg.get("max_predictions_per_seq") or 20),
        float(cfg.get("masked_lm_prob") or 0.15),
        nsp,
        _mask_seed(cfg, params, split),
        by_masked,
        weight,
        offset,
        lower,
    )
    what = "masked LM" + (" + next sentence" if nsp else "")
    return [recipe], f"{what} samples of {source}"
