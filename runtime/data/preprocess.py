"""Preprocessing: raw text -> the Model Zoo's GPT HDF5 and BERT CSV datasets (never prints).

GPT HDF5 (what the Model Zoo's `create_hdf5_dataset.py` writes for LM data, read back by
runtime/data/hdf5.py):
1. documents: each `.txt` file of input_dir is one document; each line of a `.jsonl` /
   `.json` file is a JSON object whose `jsonl_key` field ("text") is one; files in name order;
2. tokens: the GPT-2 byte-level BPE of the vocabulary files (the Model Zoo's published
   gpt2-encoder.json / gpt2-vocab.bpe ship in runtime/data/gpt2_vocab/) through the
   HF `tokenizers` library, and `eos_id` after every document;
3. samples: the token stream, documents run together, cut into windows of max_seq_length + 1;
   sample = [input ids = window[:-1], attention mask, labels = window[1:]]. With
   short_seq_prob p a window is cut short (to a length drawn in [2, msl - 1]) with probability
   p, from random.Random(seed). The last partial window is padded with pad_id (mask 0);
4. files: `{output_name}_{k}_{p}.h5` as the Model Zoo's writers name them (file k of writing
   process p; one process writes here, so p is 0), files_per_record samples each (the last
   may hold fewer),
   attribute n_examples, dataset `data` int32 [n, 3, msl], gzip in chunks (1, 3, msl); each is
   written under a temporary name and renamed; `data_params.json` records the flags and counts.

BERT CSV (BertCSVDynamicMaskDataProcessor's input): documents are separated by blank lines in
`.txt` files (one sentence a line), word-pieced with `tokenizers`' BertWordPieceTokenizer from
vocab_file; sentences are packed into pairs of up to max_seq_length - 3 pieces, the second
segment taken from another document half the time (is_random_next), as Google's
create_pretraining_data.py does; rows: tokens (a list literal of pieces with [CLS]/[SEP]),
segment_ids, is_random_next; `meta.dat` lists each file's rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.system.errors import ConfigError

__all__ = [
    "GPT2_VOCAB_DIR",
    "GptHdf5Args",
    "BertCsvArgs",
    "write_gpt_hdf5",
    "write_bert_csv",
    "Written",
]

GPT2_VOCAB_DIR = Path(__file__).parent / "gpt2_vocab"
TEXT_SUFFIXES = (".txt",)
JSONL_SUFFIXES = (".jsonl", ".json")


@dataclass
class GptHdf5Args:
    """The Model Zoo script's main flags."""

    input_dir: str
    output_dir: str
    max_seq_length: int = 2048
    files_per_record: int = 50000
    tokenizer_type: str = "GPT2Tokenizer"
    vocab_file: str = str(GPT2_VOCAB_DIR / "gpt2-vocab.bpe")
    encoder_file: str = str(GPT2_VOCAB_DIR / "gpt2-encoder.json")
    eos_id: int = 50256
    pad_id: int = 50256
    seed: int = 0
    short_seq_prob: float = 0.0
    output_name: str = "examples"
    jsonl_key: str = "text"


@dataclass
class BertCsvArgs:
    """Flags of the BERT CSV writer."""

    input_dir: str
    output_dir: str
    vocab_file: str
    max_seq_length: int = 128
    do_lower_case: bool = True
    files_per_record: int = 50000
    seed: int = 0
    output_name: str = "examples"


@dataclass
class Written:
    """What a preprocessing run wrote (host measurements for its tokens/s)."""

    files: list[str] = field(default_factory=list)
    samples: int = 0
    tokens: int = 0
    documents: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_sec(self) -> float:
        """Tokens tokenized and written per second (host measurement)."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _inputs(input_dir: str, suffixes: tuple[str, ...]) -> list[Path]:
    d = Path(input_dir)
    if not d.is_dir():
        raise ConfigError(
            f"--input_dir {input_dir} is not a directory; give the directory of raw text files."
        )
    files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix in suffixes)
    if not files:
        raise ConfigError(
            f"--input_dir {input_dir} holds no {'/'.join(suffixes)} files; put the raw text there."
        )
    return files


def documents(files: list[Path], key: str) -> Iterator[str]:
    """The documents of the input files, in order (see the module docstring)."""
    for path in files:
        try:
            if path.suffix in TEXT_SUFFIXES:
                yield path.read_text(encoding="utf-8")
                continue
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        raise ConfigError(
                            f"{path} line {n} is not JSON; write one JSON object a line."
                        ) from None
                    if not isinstance(obj, dict) or not isinstance(obj.get(key), str):
                        raise ConfigError(
                            f"{path} line {n} has no text field {key!r}; set "
                            f"--jsonl_key to the field that holds the text."
                        )
                    yield obj[key]
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path} ({e}); check it.") from None


def gpt2_tokenizer(vocab_file: str, encoder_file: str) -> Any:
    """The GPT-2 byte-level BPE from local files (nothing is downloaded)."""
    from tokenizers import ByteLevelBPETokenizer

    for flag, path in (("--vocab_file", vocab_file), ("--encoder_file", encoder_file)):
        if not Path(path).is_file():
            raise ConfigError(
                f"{flag} {path} does not exist; give the GPT-2 file or leave the "
                f"flag out for the shipped one."
            )
    try:
        return ByteLevelBPETokenizer(encoder_file, vocab_file, add_prefix_space=False)
    except Exception as e:  # noqa: BLE001 - the library raises its own exception types
        raise ConfigError(
            f"cannot load the GPT-2 BPE from {encoder_file} and {vocab_file} "
            f"({e}); check the files."
        ) from None


def _write_h5(path: Path, data: np.ndarray) -> None:
    """One file of the GPT layout, under a temporary name first."""
    import h5py

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as f:
        f.attrs["n_examples"] = len(data)
        f.create_dataset(
            "data", data=data, dtype="i4", chunks=(1, 3, data.shape[2]), compression="gzip"
        )
    os.replace(tmp, path)


def _out_dir(output_dir: str) -> Path:
    out = Path(output_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"cannot create --output_dir {output_dir} ({e.strerror}); choose another."
        ) from None
    return out


def write_gpt_hdf5(a: GptHdf5Args) -> Written:
    """Raw text -> GPT HDF5 files (see the module docstring)."""
    _check_args(a)
    files = _inputs(a.input_dir, TEXT_SUFFIXES + JSONL_SUFFIXES)
    tok = gpt2_tokenizer(a.vocab_file, a.encoder_file)
    vocab = tok.get_vocab_size()
    _check_special_ids(a, vocab)
    out, msl, rng = _out_dir(a.output_dir), a.max_seq_length, random.Random(a.seed)
    done = Written()
    t0 = time.perf_counter()
    pending: list[np.ndarray] = []  # samples (3, msl) not yet in a file
    carry = np.zeros(0, np.int64)  # tokens of the last, partial window

    def sample(window: np.ndarray) -> np.ndarray:
        n = len(window) - 1
        s = np.full((3, msl), a.pad_id, np.int32)  # (3, msl)
        s[0, :n], s[2, :n] = window[:-1], window[1:]
        s[1] = 0
        s[1, :n] = 1
        return s

    def flush(final: bool) -> None:
        while len(pending) >= a.files_per_record or (final and pending):
            part, pending[:] = pending[: a.files_per_record], pending[a.files_per_record :]
            path = out / f"{a.output_name}_{len(done.files)}_0.h5"  # file k of process 0
            _write_h5(path, np.stack(part))  # (n, 3, msl)
            done.files.append(str(path))

    batch: list[str] = []

    def tokenize(docs: list[str]) -> None:
        nonlocal carry
        for enc in tok.encode_batch(docs):
            ids = np.array([*enc.ids, a.eos_id], np.int64)
            done.tokens += len(ids)
            done.documents += 1
            stream = np.concatenate([carry, ids])
            pos = 0
            while len(stream) - pos >= msl + 1:
                width = msl + 1
                if a.short_seq_prob and rng.random() < a.short_seq_prob:
                    width = rng.randint(2, msl - 1) + 1
                pending.append(sample(stream[pos : pos + width]))
                pos += width
            carry = stream[pos:]
        flush(final=False)

    for doc in documents(files, a.jsonl_key):
        batch.append(doc)
        if len(batch) >= 256:
            tokenize(batch)
            batch = []
    tokenize(batch)
    if len(carry) >= 2:
        pending.append(sample(carry))
    flush(final=True)
    done.samples = _count_samples(done, a.files_per_record)
    done.seconds = time.perf_counter() - t0
    if not done.files:
        raise ConfigError(
            f"--input_dir {a.input_dir} holds too little text for one sample; add text."
        )
    _write_data_params(out, a, done)
    return done


def _check_args(a: GptHdf5Args) -> None:
    """The tokenizer is one we have, and the sample length and file size are usable."""
    if a.tokenizer_type != "GPT2Tokenizer":
        raise ConfigError(
            f"--tokenizer_type {a.tokenizer_type} is not available here; use GPT2Tokenizer."
        )
    if a.max_seq_length < 2 or a.files_per_record < 1:
        raise ConfigError(
            "--max_seq_length must be at least 2 and --files_per_record at least 1; raise them."
        )


def _check_special_ids(a: GptHdf5Args, vocab: int) -> None:
    """--eos_id and --pad_id are ids of the vocabulary."""
    for flag, v in (("--eos_id", a.eos_id), ("--pad_id", a.pad_id)):
        if not 0 <= v < vocab:
            raise ConfigError(
                f"{flag} {v} is outside the vocabulary (0 to {vocab - 1}); give an id of it."
            )


def _count_samples(done: Written, files_per_record: int) -> int:
    """The samples written: full files, plus what the last one holds."""
    samples = (len(done.files) - 1) * files_per_record if done.files else 0
    if done.files:
        import h5py

        with h5py.File(done.files[-1], "r") as f:
            samples += int(f.attrs["n_examples"])
    return samples


def _write_data_params(out: Path, a: GptHdf5Args, done: Written) -> None:
    """data_params.json: the arguments and what came of them."""
    meta = {
        "processing": {k: v for k, v in asdict(a).items()},
        "post-process": {
            "n_examples": done.samples,
            "documents": done.documents,
            "tokens": done.tokens,
            "files": len(done.files),
        },
    }
    _atomic_text(out / "data_params.json", json.dumps(meta, indent=2) + "\n")


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# -- BERT CSV -------------------------------------------------------------------------------------
def _bert_documents(files: list[Path], tok: Any) -> list[list[list[str]]]:
    """Documents (blank-line separated) as lists of sentences (lines) of word pieces."""
    docs: list[list[list[str]]] = [[]]
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {path} ({e}); check it.") from None
        for enc, line in zip(tok.encode_batch(lines, add_special_tokens=False), lines, strict=True):
            if not line.strip():
                if docs[-1]:
                    docs.append([])
                continue
            if enc.tokens:
                docs[-1].append(list(enc.tokens))
        if docs[-1]:
            docs.append([])
    return [d for d in docs if d]


def _pairs(
    docs: list[list[list[str]]], max_tokens: int, rng: random.Random
) -> Iterator[tuple[list[str], list[str], int]]:
    """(A, B, is_random_next) instances, as create_instances_from_document makes them."""
    for i, doc in enumerate(docs):
        chunk: list[list[str]] = []
        length = 0
        for j, sent in enumerate(doc):
            chunk.append(sent)
            length += len(sent)
            if j == len(doc) - 1 or length >= max_tokens:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                a = [t for s in chunk[:a_end] for t in s]
                if len(docs) > 1 and (len(chunk) == 1 or rng.random() < 0.5):
                    k = rng.randrange(len(docs) - 1)
                    other = docs[k + (k >= i)]
                    start = rng.randrange(len(other))
                    b = [t for s in other[start:] for t in s][: max(1, max_tokens - len(a))]
                    random_next = 1
                else:
                    b = [t for s in chunk[a_end:] for t in s]
                    random_next = 0
                while len(a) + len(b) > max_tokens:  # truncate_seq_pair
                    (a if len(a) > len(b) else b).pop()
                if a and b:
                    yield a, b, random_next
                chunk, length = [], 0


def write_bert_csv(a: BertCsvArgs) -> Written:
    """Raw text -> BERT CSV files with meta.dat (see the module docstring)."""
    from tokenizers import BertWordPieceTokenizer

    if not Path(a.vocab_file).is_file():
        raise ConfigError(
            f"--vocab_file {a.vocab_file} does not exist; give the WordPiece "
            f"vocabulary (one token a line)."
        )
    if a.max_seq_length < 5:
        raise ConfigError(
            "--max_seq_length must be at least 5 for [CLS] A [SEP] B [SEP]; raise it."
        )
    files = _inputs(a.input_dir, TEXT_SUFFIXES)
    t0 = time.perf_counter()
    tok = BertWordPieceTokenizer(a.vocab_file, lowercase=a.do_lower_case)
    docs = _bert_documents(files, tok)
    out, rng, done = _out_dir(a.output_dir), random.Random(a.seed), Written()
    rows: list[list[Any]] = []
    meta: list[str] = []

    def flush() -> None:
        name = f"{a.output_name}_{len(done.files)}.csv"
        buf = io.StringIO(newline="")
        w = csv.writer(buf)
        w.writerow(["tokens", "segment_ids", "is_random_next"])
        w.writerows(rows)
        _atomic_text(out / name, buf.getvalue())
        done.files.append(str(out / name))
        meta.append(f"{name} {len(rows)}")
        done.samples += len(rows)
        rows.clear()

    for a_toks, b_toks, random_next in _pairs(docs, a.max_seq_length - 3, rng):
        tokens = ["[CLS]", *a_toks, "[SEP]", *b_toks, "[SEP]"]
        segs = [0] * (len(a_toks) + 2) + [1] * (len(b_toks) + 1)
        rows.append([repr(tokens), repr(segs), random_next])
        done.tokens += len(tokens)
        if len(rows) >= a.files_per_record:
            flush()
    if rows:
        flush()
    done.documents = len(docs)
    if not done.files:
        raise ConfigError(
            f"--input_dir {a.input_dir} holds too little text for one sentence "
            f"pair; add documents of two or more lines."
        )
    _atomic_text(out / "meta.dat", "\n".join(meta) + "\n")
    done.seconds = time.perf_counter() - t0
    return done
