"""Text tables: BERT pretraining CSV and the GLUE classification TSVs (SST-2, MNLI).

BertCSVDynamicMaskDataProcessor (the Model Zoo's `create_csv_mlm_only.py` / `create_csv.py`
output): a directory of `.csv` files with a header and the columns
    tokens          a list literal of WordPiece strings, "['[CLS]', 'the', ..., '[SEP]']"
    segment_ids     "[0, 0, ..., 1, 1]"          (with next-sentence prediction)
    is_random_next  0 or 1                       (with next-sentence prediction)
and a `meta.dat` ("file.csv <rows>" a line) that decides, as the Model Zoo's get_meta_data, which
files are read (a .csv it does not list is not) and how many rows of each (the first <rows>; a
count above the rows the file holds is refused before anything is allocated). Without a
meta.dat (the Model Zoo asserts one) every .csv file is read whole. With next-sentence
prediction the columns segment_ids and is_random_next must be there (a file without them is
refused, naming the column) and a row longer than max_sequence_length is refused; MLM-only rows
are cut to it (both as the Model Zoo). Tokens map to ids through `vocab_file`, unknown ones to
[UNK]; do_lower (default false, as the Model Zoo's processors) lower-cases the tokens and the
vocabulary both, as its build_vocab / parse_text do. A vocabulary and do_lower that do not
suit the data (an uncased vocabulary read with do_lower false: most word pieces [UNK]; a cased
one with do_lower true) get one WARNING with the shares measured on the data. The list is read
with `ast.literal_eval`, never evaluated. Each sample carries its attention_mask (1 for its
tokens, 0 for the padding up to max_sequence_length), which the encoder honours.
Masking is done when a sample is read, as the Model Zoo's
`create_masked_lm_predictions` does it: min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) positions other than [CLS]/[SEP]/[PAD]/[MASK],
each replaced by [MASK] 80% of the time, a random word piece 10%, kept 10%. The masks are
redrawn every epoch: the Model Zoo's processor keeps one `random.Random(shuffle_seed + worker
+ 1)` per input worker for its whole life, so a row read again in a later epoch gets new masks;
here they are drawn from (seed, sample, epoch) (runtime/data/masking.py, a batch at once), so
a sample is the same in whatever batch or worker it falls and a resumed run sees exactly the
masks the uninterrupted one would.

SST2DataProcessor / MNLIDataProcessor (GLUE's files as published): `train.tsv`, and for eval
`dev.tsv` (SST-2) or `dev_matched.tsv` (MNLI); SST-2 has the columns sentence, label (0/1);
MNLI sentence1, sentence2, gold_label (contradiction 0, entailment 1, neutral 2, GLUE's order).
Each sentence (pair) becomes [CLS] A [SEP] (B [SEP]), cut to max_sequence_length by dropping
tokens from the longer segment (the second on a tie, as BERT's `truncate_seq_pair`), padded
with [PAD] (attention_mask 0 there).
"""

from __future__ import annotations

import ast
import csv
import stat
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.data.masking import draw_masks, predictions_per_sample
from cs2sim.runtime.data.vocab import (
    CASING_SAMPLE_ROWS,
    CASING_WARNED,
    Vocab,
    casing_advice,
    is_special,
    lowered_index,
    read_vocab,
    text_casing_advice,
    warn_casing,
    wordpiece_ids,
)
from cs2sim.system.errors import ConfigError

__all__ = [
    "find_csv_files",
    "find_tsv_files",
    "read_meta",
    "BertCsvFiles",
    "BertCsvSamples",
    "GlueTsv",
    "GlueSamples",
    "MNLI_LABELS",
    "scale_mlm_weights",
]

META_FILE = "meta.dat"
FIELD_BYTES_PER_TOKEN = 128  # a word piece of at most 100 characters, quoted, and ", "
META_MAX_BYTES = 16 * 2**20  # ~400k lines: far more files than any data set has
TSV_NAMES = {"train": ("train.tsv",), "eval": ("dev.tsv", "dev_matched.tsv", "validation.tsv")}
MNLI_LABELS = ("contradiction", "entailment", "neutral")
csv.field_size_limit(2**24)  # a row of 512 quoted word pieces is far above the 128 KiB default


def find_csv_files(data_dir: str | Path) -> list[Path]:
    """The `.csv` files of a directory that its meta.dat lists, in meta.dat's order (a file it
    does not list is not read, as the Model Zoo's get_meta_data); without a meta.dat every
    `.csv` file in name order; a single .csv path is itself."""
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix == ".csv" else []
    meta = read_meta(d)
    if meta is None:  # the Model Zoo asserts a meta.dat; without one every file is read whole
        return sorted(p for p in d.glob("*.csv") if p.is_file())
    return [d / name for name in meta]


def read_meta(d: Path) -> dict[str, int] | None:
    """A directory's meta.dat as {file name: rows} in its order, None when there is none."""
    path = d / META_FILE
    try:
        st = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode) or st.st_size > META_MAX_BYTES:
        raise ConfigError(
            f"{path} is not a regular file of at most {META_MAX_BYTES // 2**20} MiB; "
            "replace it with the '<file>.csv <rows>' lines of the data."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read {path} ({e}); check the file.") from None
    meta: dict[str, int] = {}
    for n, line in enumerate(text.splitlines()):
        parts = line.split()
        if not parts:
            continue
        ok = len(parts) == 2 and parts[1].isdigit() and Path(parts[0]).name == parts[0]
        if not ok:
            raise ConfigError(
                f"{path} line {n + 1} is {line.strip()[:80]!r}, not '<file>.csv <rows>'; "
                "correct it."
            )
        if not (d / parts[0]).is_file():
            raise ConfigError(
                f"{path} lists {parts[0]}, which is not in {d}; remove the line or add the file."
            )
        meta[parts[0]] = int(parts[1])
    if not meta:
        raise ConfigError(f"{path} lists no files; write one '<file>.csv <rows>' line a file.")
    return meta


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
        self.vocab, cased = _vocab(r.vocab_file, r.do_lower, "BertCSVDynamicMaskDataProcessor")
        if self.vocab.size > r.vocab_size:
            raise ConfigError(
                f"vocab_file {r.vocab_file} has {self.vocab.size} tokens but "
                f"model.vocab_size is {r.vocab_size}; make them equal."
            )
        index = lowered_index(cased) if r.do_lower else cased
        declared = [_declared_rows(path) for path in r.paths]  # checked: nothing sized yet
        N, T = sum(declared), r.seq_len
        self.ids = np.full((N, T), self.vocab.pad, np.int32)  # (N, T)
        self.segs = np.zeros((N, T), np.int32)  # (N, T)
        self.lens = np.zeros(N, np.int64)  # (N,)
        self.nsp = np.zeros(N, np.int32)  # (N,)
        tally = _Tally()
        row0 = 0
        for path, n in zip(r.paths, declared, strict=True):
            self._read(path, n, row0, index, tally)
            row0 += n
        if N == 0:
            raise ConfigError(f"CSV files {', '.join(r.paths)} hold no rows; re-create them.")
        tally.warn_casing(r, cased, index)
        specials = [self.vocab.cls, self.vocab.sep, self.vocab.pad, self.vocab.mask]
        self.maskable = ~np.isin(self.ids, specials)  # (N, T)
        self.n_pred = predictions_per_sample(
            self.maskable, self.lens, r.predictions, r.masked_lm_prob
        )

    def _read(self, path: str, n: int, row0: int, index: dict[str, int], tally: _Tally) -> None:
        """Rows row0 .. row0 + n of the arrays from the first n rows of `path` (as many as
        meta.dat declares; the Model Zoo reads no further)."""
        r = self.r
        unk = index[_lower("[UNK]", r.do_lower)]
        need = ("tokens", "segment_ids", "is_random_next") if r.nsp else ("tokens",)
        try:
            with open(path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                have = reader.fieldnames or ()
                for col in need:
                    if col not in have:
                        raise ConfigError(_missing_column(path, col, have))
                got = 0
                for k, row in enumerate(reader):
                    if k == n:
                        break
                    raw = _literal(row, "tokens", path, k, r.seq_len)
                    if not r.nsp:  # the Model Zoo cuts MLM-only rows to max_sequence_length
                        raw = raw[: r.seq_len]
                    toks = [_lower(str(t), r.do_lower) for t in raw]
                    if len(toks) > r.seq_len:  # with NSP it asserts len(tokens) <= MSL
                        raise ConfigError(
                            f"CSV file {path} row {k + 1} has {len(toks)} tokens, more than "
                            f"max_sequence_length {r.seq_len}; re-create it or raise it."
                        )
                    tally.add(raw)
                    i = row0 + k
                    self.ids[i, : len(toks)] = [index.get(t, unk) for t in toks]
                    self.lens[i] = len(toks)
                    if r.nsp:
                        seg = _literal(row, "segment_ids", path, k, r.seq_len)
                        self.segs[i, : min(len(seg), r.seq_len)] = seg[: r.seq_len]
                        self.nsp[i] = _flag(row.get("is_random_next"), path, k)
                    got = k + 1
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"cannot read CSV file {path} ({e}); check it.") from None
        if got < n:
            raise ConfigError(_short_file(path, got, n))

    def __len__(self) -> int:
        return len(self.ids)

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The samples of `idx` with epoch 0's masks (see `epoch_batch`)."""
        return self.epoch_batch(idx, 0)

    def epoch_batch(self, idx: np.ndarray, epoch: int) -> dict[str, np.ndarray]:
        """The samples of `idx` (B,) with `epoch`'s masks (drawn for the batch at once,
        runtime/data/masking.py; each sample's from (seed, sample, epoch) alone), loss
        weights scaled for the batch."""
        r, v = self.r, self.vocab
        idx = np.asarray(idx, np.int64)
        ids, lens = self.ids[idx], self.lens[idx]  # (B, T) a copy, (B,)
        positions, mlm_ids, weights = draw_masks(
            ids,
            self.maskable[idx],
            lens,
            r.predictions,
            r.masked_lm_prob,
            v.mask,
            v.pool,
            r.seed,
            idx,
            epoch,
            self.n_pred[idx],
        )
        scale_mlm_weights(weights, r.scale_by_masked, r.weight)
        return {
            "input_ids": ids,
            "attention_mask": (np.arange(r.seq_len) < lens[:, None]).astype(np.int32),
            "token_type_ids": self.segs[idx],
            "masked_lm_positions": positions,
            "masked_lm_ids": mlm_ids,
            "masked_lm_weights": weights,
            "next_sentence_label": self.nsp[idx],
        }


def _lower(token: str, do_lower: bool) -> str:
    return token.lower() if do_lower else token


def _declared_rows(path: str) -> int:
    """The rows the Model Zoo reads of a CSV file: its meta.dat's count, checked against the
    rows the file holds before anything is sized from it (all of a file without one)."""
    p = Path(path)
    meta = read_meta(p.parent)
    have = _count_rows(path)
    if meta is None or p.name not in meta:
        return have
    if meta[p.name] > have:
        raise ConfigError(_short_file(path, have, meta[p.name]))
    return meta[p.name]


def _count_rows(path: str) -> int:
    """Data rows of a CSV file, streamed (nothing kept)."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return max(0, sum(1 for _ in csv.reader(f)) - 1)  # less the header
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"cannot read CSV file {path} ({e}); check it.") from None


def _short_file(path: str, have: int, declared: int) -> str:
    meta = Path(path).parent / META_FILE
    return (
        f"CSV file {path} holds {have} rows but {meta} declares {declared}; correct "
        "meta.dat (the Model Zoo's create_csv.py writes it with the files) or re-create the data."
    )


def _missing_column(path: str, col: str, have: Sequence[str]) -> str:
    cols = ", ".join(have) or "none"
    if col == "tokens":
        return (
            f"CSV file {path} has no column 'tokens' (it has {cols}); it is not in the Model "
            "Zoo's BERT CSV layout (create_csv.py, create_csv_mlm_only.py)."
        )
    return (
        f"CSV file {path} has no column {col!r} (it has {cols}), which next-sentence "
        "prediction needs; re-create it with create_csv.py (tokens, segment_ids, "
        "is_random_next) or set model.disable_nsp: true for MLM-only data."
    )


def _flag(text: str | None, path: str, n: int) -> int:
    value = (text or "").strip()
    if value not in ("0", "1"):
        raise ConfigError(
            f"CSV file {path} row {n + 1} has is_random_next {value!r}; it must be 0 or 1."
        )
    return int(value)


class _Tally:
    """How the data's word pieces meet the vocabulary: counted while reading, judged once."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, tokens: list[Any]) -> None:
        self.counts.update(str(t) for t in tokens)

    def warn_casing(self, r: BertCsvFiles, cased: dict[str, int], index: dict[str, int]) -> None:
        """One WARNING when do_lower does not suit the vocabulary and the data (see
        casing_advice)."""
        if (r.vocab_file, r.do_lower) in CASING_WARNED:
            return
        words = {t: c for t, c in self.counts.items() if not is_special(t)}
        total = sum(words.values())
        if not total:
            return
        other = cased if r.do_lower else lowered_index(cased)

        def unk_share(idx: dict[str, int], lower: bool) -> float:
            return sum(c for t, c in words.items() if _lower(t, lower) not in idx) / total

        capitals = sum(c for t, c in words.items() if t != t.lower()) / total
        advice = casing_advice(
            r.vocab_file,
            cased,
            r.do_lower,
            unk_share(index, r.do_lower),
            unk_share(other, not r.do_lower),
            capitals,
            f"CSV file{'s' if len(r.paths) > 1 else ''} {', '.join(r.paths)}",
        )
        warn_casing(r.vocab_file, r.do_lower, advice)


def _literal(row: dict[str, str], col: str, path: str, n: int, seq_len: int) -> list[Any]:
    text = row.get(col)
    if text is not None and len(text) > FIELD_BYTES_PER_TOKEN * (seq_len + 1):
        # parsed only when it can hold a sequence: a literal is ~10x its text in memory
        raise ConfigError(
            f"CSV file {path} row {n + 1} has {len(text)} characters in column {col!r}, more "
            f"than {seq_len} tokens of max_sequence_length can take; re-create the file."
        )
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
        ids, segs, labels, lens = [], [], [], []
        texts: list[str] = []  # the first rows' sentences, to measure a casing mismatch
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
                    if n < CASING_SAMPLE_ROWS:
                        texts += [row[c] for c in cols[:-1]]
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
                    lens.append(len(seq))
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise ConfigError(f"cannot read TSV file {r.path} ({e}); check it.") from None
        if not ids:
            raise ConfigError(f"TSV file {r.path} holds no rows; check it.")
        where = f"TSV file {r.path} (its first {min(len(ids), CASING_SAMPLE_ROWS)} rows)"
        advice = text_casing_advice(texts, index, r.do_lower, r.vocab_file, where, targets=False)
        warn_casing(r.vocab_file, r.do_lower, advice)
        self.ids, self.segs = np.stack(ids), np.stack(segs)  # (N, T)
        self.labels = np.array(labels, np.int32)  # (N,)
        T = r.seq_len
        self.mask = (np.arange(T)[None] < np.array(lens)[:, None]).astype(np.int32)  # (N, T)

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """{"input_ids", "attention_mask", "token_type_ids": (B, T), "labels": (B,)}."""
        return {
            "input_ids": self.ids[idx],
            "attention_mask": self.mask[idx],
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
