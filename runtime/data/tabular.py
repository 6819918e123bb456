"""Text tables: BERT pretraining CSV and the GLUE classification TSVs (SST-2, MNLI).

BertCSVDynamicMaskDataProcessor (the Model Zoo's `create_csv_mlm_only.py` / `create_csv.py`
output): a directory of `.csv` files with a header and the columns
    tokens          a list literal of WordPiece strings, "['[CLS]', 'the', ..., '[SEP]']"
    segment_ids     "[0, 0, ..., 1, 1]"          (with next-sentence prediction)
    is_random_next  0 or 1                       (with next-sentence prediction)
and usually a `meta.dat` ("file.csv <examples>" a line). Tokens map to ids through
`vocab_file` (lower-cased with do_lower, unknown ones to [UNK]); the list is read with
`ast.literal_eval`, never evaluated. Masking is done when a sample is read, as the Model Zoo's
`create_masked_lm_predictions` does it: min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions other than [CLS]/[SEP]/[PAD]/[MASK],
each replaced by [MASK] 80% of the time, a random word piece 10%, kept 10%. The masks are
redrawn every epoch: the Model Zoo's processor keeps one `random.Random(shuffle_seed + worker
+ 1)` per input worker for its whole life, so a row read again in a later epoch gets new masks;
here they are drawn from (seed, sample, epoch), so a sample is the same in whatever batch or
worker it falls and a resumed run sees exactly the masks the uninterrupted one would.

SST2DataProcessor / MNLIDataProcessor (GLUE's files as published): `train.tsv`, and for eval
`dev.tsv` (SST-2) or `dev_matched.tsv` (MNLI); SST-2 has the columns sentence, label (0/1);
MNLI sentence1, sentence2, gold_label (contradiction 0, entailment 1, neutral 2, GLUE's order).
Each sentence (pair) becomes [CLS] A [SEP] (B [SEP]), cut to max_sequence_length by dropping
tokens from the longer segment (the second on a tie, as BERT's `truncate_seq_pair`), padded
with [PAD].
"""

from __future__ import annotations

import ast
import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs2sim.runtime.data.vocab import Vocab, read_vocab, wordpiece_ids
from cs2sim.system.errors import ConfigError

__all__ = [
    "find_csv_files",
    "find_tsv_files",
    "BertCsvFiles",
    "BertCsvSamples",
    "GlueTsv",
    "GlueSamples",
    "MNLI_LABELS",
    "scale_mlm_weights",
]

TSV_NAMES = {"train": ("train.tsv",), "eval": ("dev.tsv", "dev_matched.tsv", "validation.tsv")}
MNLI_LABELS = ("contradiction", "entailment", "neutral")
csv.field_size_limit(2**24)  # a row of 512 quoted word pieces is far above the 128 KiB default


def find_csv_files(data_dir: str | Path) -> list[Path]:
    """The `.csv` files of a directory, in name order."""
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix == ".csv" else []
    return sorted(p for p in d.glob("*.csv") if p.is_file())


def find_tsv_files(data_dir: str | Path, split: str) -> list[Path]:
    """The split's GLUE file in a directory ([] when there is none)."""
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix == ".tsv" else []
    for name in TSV_NAMES[split]:
        if (d / name).is_file():
            return [d / name]
    return []


def scale_mlm_weights(w: np.ndarray, scale_by_masked: bool, weight: float) -> np.ndarray:
    """A batch's MLM loss weights (B, P), as runtime/data/mlm.py describes (in place)."""
    if scale_by_masked:
        w *= np.float32(len(w) / max(float(w.sum()), 1.0))
    if weight != 1.0:
        w *= np.float32(weight)
    return w


def _vocab(path: str | None, do_lower: bool, what: str) -> tuple[Vocab, dict[str, int]]:
    if not path or not Path(path).is_file():
        raise ConfigError(
            f"{what} needs vocab_file, the WordPiece vocabulary the data was made "
            f"with; {'set it' if not path else f'{path} does not exist'}."
        )
    return read_vocab(path, do_lower)


@dataclass(frozen=True)
class BertCsvFiles:
    """Recipe: masked-LM samples of BERT CSV files (picklable)."""

    paths: tuple[str, ...]
    vocab_file: str
    do_lower: bool
    seq_len: int
    vocab_size: int
    predictions: int
    masked_lm_prob: float
    nsp: bool
    seed: int
    scale_by_masked: bool
    weight: float

    def load(self) -> BertCsvSamples:
        """Read the files and map their tokens to ids."""
        return BertCsvSamples(self)


class BertCsvSamples:
    """The rows as ids (N, T), segment ids (N, T), lengths (N,), next-sentence labels (N,)."""

    def __init__(self, r: BertCsvFiles) -> None:
        self.r = r
        self.vocab, index = _vocab(r.vocab_file, r.do_lower, "BertCSVDynamicMaskDataProcessor")
        if self.vocab.size > r.vocab_size:
            raise ConfigError(
                f"vocab_file {r.vocab_file} has {self.vocab.size} tokens but "
                f"model.vocab_size is {r.vocab_size}; make them equal."
            )
        unk = index["[UNK]"]
        ids, segs, lens, nsp = [], [], [], []
        for path in r.paths:
            try:
                with open(path, newline="", encoding="utf-8") as f:
                    for n, row in enumerate(csv.DictReader(f)):
                        toks = _literal(row, "tokens", path, n)
                        if len(toks) > r.seq_len:
                            raise ConfigError(
                                f"CSV file {path} row {n + 1} has {len(toks)} "
                                f"tokens, more than max_sequence_length "
                                f"{r.seq_len}; re-create it or raise it."
                            )
                        toks = [
                            t.lower() if r.do_lower and not t.startswith("[") else t for t in toks
                        ]
                        row_ids = np.full(r.seq_len, self.vocab.pad, np.int32)
                        row_ids[: len(toks)] = [index.get(t, unk) for t in toks]
                        seg = np.zeros(r.seq_len, np.int32)
                        if r.nsp:
                            s = _literal(row, "segment_ids", path, n)
                            seg[: len(s)] = s[: r.seq_len]
                            nsp.append(int(row.get("is_random_next") or 0))
                        else:
                            nsp.append(0)
                        ids.append(row_ids)
                        segs.append(seg)
                        lens.append(len(toks))
            except (OSError, UnicodeDecodeError, csv.Error) as e:
                raise ConfigError(f"cannot read CSV file {path} ({e}); check it.") from None
        if not ids:
            raise ConfigError(f"CSV files {', '.join(r.paths)} hold no rows; re-create them.")
        self.ids, self.segs = np.stack(ids), np.stack(segs)  # (N, T) each
        self.lens, self.nsp = np.array(lens), np.array(nsp, np.int32)  # (N,)
        specials = [self.vocab.cls, self.vocab.sep, self.vocab.pad, self.vocab.mask]
        self.maskable = ~np.isin(self.ids, specials)  # (N, T)

    def __len__(self) -> int:
        return len(self.ids)

    def sample(self, i: int, epoch: int = 0) -> dict[str, np.ndarray]:
        """Row i with its masks of `epoch` drawn (see the module docstring)."""
        r, v, P = self.r, self.vocab, self.r.predictions
        rng = np.random.default_rng([r.seed % 2**63, i, epoch])
        ids = self.ids[i].copy()  # (T,)
        cand = np.flatnonzero(self.maskable[i])
        n = min(P, max(1, int(round(int(self.lens[i]) * r.masked_lm_prob))), len(cand))
        pos = np.sort(rng.choice(cand, size=n, replace=False)) if n else cand[:0]  # (n,)
        labels = ids[pos].copy()
        u = rng.random(n)  # 80% [MASK], 10% random word piece, 10% kept
        ids[pos[u < 0.8]] = v.mask
        swap = pos[(u >= 0.8) & (u < 0.9)]
        ids[swap] = rng.integers(v.pool[0], v.pool[1], size=len(swap))
        positions, mlm_ids = np.zeros(P, np.int32), np.zeros(P, np.int32)
        weights = np.zeros(P, np.float32)
        positions[:n], mlm_ids[:n], weights[:n] = pos, labels, 1.0
        return {
            "input_ids": ids,
            "token_type_ids": self.segs[i],
            "masked_lm_positions": positions,
            "masked_lm_ids": mlm_ids,
            "masked_lm_weights": weights,
            "next_sentence_label": self.nsp[i],
        }

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The samples of `idx` with epoch 0's masks (see `epoch_batch`)."""
        return self.epoch_batch(idx, 0)

    def epoch_batch(self, idx: np.ndarray, epoch: int) -> dict[str, np.ndarray]:
        """The samples of `idx` with `epoch`'s masks stacked, loss weights scaled for the
        batch."""
        samples = [self.sample(int(i), epoch) for i in idx]
        out = {k: np.stack([s[k] for s in samples]) for k in samples[0]}
        scale_mlm_weights(out["masked_lm_weights"], self.r.scale_by_masked, self.r.weight)
        return out


def _literal(row: dict[str, str], col: str, path: str, n: int) -> list:
    text = row.get(col)
    try:
        value = ast.literal_eval(text) if text is not None else None
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, list):
        raise ConfigError(
            f"CSV file {path} row {n + 1} has no list in column {col!r}; it is "
            f"not in the Model Zoo's BERT CSV layout."
        )
    return value


@dataclass(frozen=True)
class GlueTsv:
    """Recipe: labelled sentences (pairs) of a GLUE TSV file (picklable)."""

    path: str
    task: str  # "sst2" | "mnli"
    vocab_file: str
    do_lower: bool
    seq_len: int
    num_labels: int

    def load(self) -> GlueSamples:
        """Read and tokenize the file."""
        return GlueSamples(self)


class GlueSamples:
    """input_ids, token_type_ids (N, T) and labels (N,) in memory."""

    def __init__(self, r: GlueTsv) -> None:
        what = "SST2DataProcessor" if r.task == "sst2" else "MNLIDataProcessor"
        _, index = _vocab(r.vocab_file, r.do_lower, what)
        cls, sep, pad = index["[CLS]"], index["[SEP]"], index["[PAD]"]
        cols = (
            ("sentence", "label") if r.task == "sst2" else ("sentence1", "sentence2", "gold_label")
        )
        ids, segs, labels = [], [], []
        try:
            with open(r.path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                missing = [c for c in cols if c not in (reader.fieldnames or ())]
                if missing:
                    raise ConfigError(
                        f"TSV file {r.path} has no column {missing[0]!r} (it has "
                        f"{', '.join(reader.fieldnames or ())}); {what} reads "
                        f"GLUE's {'SST-2' if r.task == 'sst2' else 'MNLI'} layout."
                    )
                for n, row in enumerate(reader):
                    a = wordpiece_ids(row[cols[0]], index, r.do_lower)
                    b = wordpiece_ids(row[cols[1]], index, r.do_lower) if r.task == "mnli" else []
                    label = _label(row[cols[-1]], r, n)
                    room = r.seq_len - (3 if b else 2)
                    while len(a) + len(b) > room:  # drop from the longer segment
                        (a if len(a) > len(b) else b).pop()  # as BERT's truncate_seq_pair
                    row_ids = np.full(r.seq_len, pad, np.int32)
                    seq = [cls, *a, sep] + ([*b, sep] if b else [])
                    row_ids[: len(seq)] = seq
                    seg = np.zeros(r.seq_len, np.int32)
                    seg[len(a) + 2 : len(seq)] = 1
                    ids.append(row_ids)
                    segs.append(seg)
                    labels.append(label)
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"cannot read TSV file {r.path} ({e}); check it.") from None
        if not ids:
            raise ConfigError(f"TSV file {r.path} holds no rows; check it.")
        self.ids, self.segs = np.stack(ids), np.stack(segs)  # (N, T)
        self.labels = np.array(labels, np.int32)  # (N,)

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """{"input_ids", "token_type_ids": (B, T), "labels": (B,)}."""
        return {
            "input_ids": self.ids[idx],
            "token_type_ids": self.segs[idx],
            "labels": self.labels[idx],
        }


def _label(text: str, r: GlueTsv, n: int) -> int:
    text = (text or "").strip()
    if r.task == "mnli":
        if text not in MNLI_LABELS:
            raise ConfigError(
                f"TSV file {r.path} row {n + 1} has gold_label {text!r}; MNLI's are "
                f"{', '.join(MNLI_LABELS)}."
            )
        label = MNLI_LABELS.index(text)
    else:
        try:
            label = int(text)
        except ValueError:
            raise ConfigError(
                f"TSV file {r.path} row {n + 1} has label {text!r}; SST-2's are 0 and 1."
            ) from None
    if not 0 <= label < r.num_labels:
        raise ConfigError(
            f"TSV file {r.path} row {n + 1} has label {label} but model.num_labels "
            f"is {r.num_labels}; set num_labels to "
            f"{3 if r.task == 'mnli' else 2}."
        )
    return label
