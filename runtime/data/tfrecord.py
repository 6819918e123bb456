"""TFRecord files of tf.train.Example records, read without TensorFlow.

Framing (TensorFlow's `tensorflow/core/lib/io/record_writer.cc`), per record:
    uint64 length (little-endian) | uint32 masked crc32c(length bytes) | data[length]
    | uint32 masked crc32c(data)
with masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2**32). Both checksums are checked
for every record of every file, whatever its size (TensorFlow's reader and TensorBoard's raise
DataLossError on a mismatch), with the `crc32c` package (SSE4.2 / ARMv8 CRC instructions, a
software table elsewhere): about 1.5 GB/s here, ~4 us a 1 KB record (bench/processor_bench.py
measures the whole reader). A declared length is checked against the bytes left in the file
before anything is sliced or allocated for it.

Payload: tf.train.Example (`tensorflow/core/example/example.proto`, `feature.proto`), parsed
from the protobuf wire format here:
    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   (entries: key = 1, value = 2)
    Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
                       Int64List int64_list = 3; } }
    Int64List { repeated int64 value = 1; }  FloatList { repeated float value = 1; }
(repeated numbers packed or not; both are accepted).

Readers (the Model Zoo's TF processors' features):
  GptTfRecordsProcessor:  input_ids, input_mask, labels      -> {"input_ids", "labels"} (B, T)
                          (a label where input_mask is 0 becomes IGNORE: runtime/nn/loss.py)
  BertTfRecordsProcessor: input_ids, input_mask, segment_ids, masked_lm_positions,
                          masked_lm_ids, masked_lm_weights, next_sentence_labels
                          -> the BERT batch of runtime/data/mlm.py, with input_mask
A file is parsed whole when loaded (each input worker parses only its own files).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.nn.loss import IGNORE
from cs2sim.system.errors import ConfigError

__all__ = [
    "TFRECORD_SUFFIXES",
    "find_tfrecord_files",
    "masked_crc",
    "write_records",
    "read_records",
    "parse_example",
    "encode_example",
    "TfRecordFiles",
    "TfRecordSamples",
]

TFRECORD_SUFFIXES = (".tfrecords", ".tfrecord")
GPT_FEATURES = ("input_ids", "labels")
BERT_FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


def find_tfrecord_files(data_dir: str | Path) -> list[Path]:
    """The TFRecord files of a directory (or the file itself), in name order."""
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix in TFRECORD_SUFFIXES else []
    return sorted(p for p in d.iterdir() if p.suffix in TFRECORD_SUFFIXES and p.is_file())


_crc32c: Callable[[bytes | memoryview], int] | None = None  # found on first use (`_crc`)


def _crc() -> Callable[[bytes | memoryview], int]:
    """The maintained native CRC-32C (a dependency; tensorboardX uses it too when present),
    else tensorboardX's table implementation (slow but exact). Imported on first use: the
    package reads its own metadata when imported (~15 ms), which every input worker and
    launcher would pay for data that is not TFRecords."""
    global _crc32c
    if _crc32c is None:
        try:
            from crc32c import crc32c as native

            _crc32c = native
        except ImportError:  # pragma: no cover
            from tensorboardX import crc32c as tbx

            _crc32c = tbx.crc32c
    return _crc32c


def masked_crc(data: bytes | memoryview) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    c = (_crc32c or _crc())(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_records(path: str | Path, records: list[bytes]) -> None:
    """Write a TFRecord file (tests and the preprocessing command use it)."""
    with open(path, "wb") as f:
        for r in records:
            head = struct.pack("<Q", len(r))
            f.write(
                head + struct.pack("<I", masked_crc(head)) + r + struct.pack("<I", masked_crc(r))
            )


def read_records(path: str | Path) -> list[bytes]:
    """The records of a TFRecord file, framing and checksums checked."""
    try:
        raw = Path(path).read_bytes()
    except PermissionError:
        raise ConfigError(
            f"TFRecord file {path} cannot be read: permission denied; make it readable "
            f"(chmod a+r) or point data_dir elsewhere."
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read TFRecord file {path} ({e.strerror}); check it.") from None
    out: list[bytes] = []
    pos = 0
    while pos < len(raw):
        if pos + 12 > len(raw):
            raise ConfigError(f"TFRecord file {path} is truncated at byte {pos}; write it again.")
        head = raw[pos : pos + 8]
        (n,), (crc,) = struct.unpack("<Q", head), struct.unpack("<I", raw[pos + 8 : pos + 12])
        if crc != masked_crc(head):
            raise ConfigError(
                f"TFRecord file {path} has a bad length checksum at byte {pos}; "
                f"it is not a TFRecord file or is corrupt."
            )
        end = pos + 12 + n
        if end + 4 > len(raw):
            raise ConfigError(
                f"TFRecord file {path} is truncated in record {len(out)}; write it again."
            )
        data = raw[pos + 12 : end]
        if struct.unpack("<I", raw[end : end + 4])[0] != masked_crc(data):
            raise ConfigError(
                f"TFRecord file {path} has a bad checksum in record {len(out)} (its data "
                f"is corrupt); write the file again."
            )
        out.append(data)
        pos = end + 4
    return out


# -- protobuf wire format -----------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: ints for varints, bytes otherwise
    (Any: which one the caller knows from the field's wire type)."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        v: int | bytes
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 2:
            n, pos = _varint(buf, pos)
            v, pos = buf[pos : pos + n], pos + n
        elif wt == 5:
            v, pos = buf[pos : pos + 4], pos + 4
        elif wt == 1:
            v, pos = buf[pos : pos + 8], pos + 8
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, v))
    return out


def _packed_varints(buf: bytes) -> np.ndarray:
    """Packed varints -> int64 (N,), vectorised: each value's 7-bit groups, little end first."""
    b = np.frombuffer(buf, dtype=np.uint8)  # (bytes,)
    if not len(b):
        return np.zeros(0, np.int64)
    ends = b < 0x80  # (bytes,) last byte of each value
    starts = np.r_[0, np.flatnonzero(ends)[:-1] + 1]  # (N,)
    group = np.cumsum(np.r_[0, ends[:-1]])  # (bytes,) value number of each byte
    shift = (np.arange(len(b)) - starts[group]) * 7  # (bytes,)
    vals = (b & 0x7F).astype(np.uint64) << shift.astype(np.uint64)
    return np.add.reduceat(vals, starts).astype(np.int64)  # (N,) two's complement for negatives


def _feature(buf: bytes) -> np.ndarray:
    for num, _wt, v in _fields(buf):
        if num == 3:  # Int64List
            parts = [
                (_packed_varints(x) if w == 2 else np.array([x], np.uint64).astype(np.int64))
                for n, w, x in _fields(v)
                if n == 1
            ]
            return np.concatenate(parts) if parts else np.zeros(0, np.int64)
        if num == 2:  # FloatList
            parts = [np.frombuffer(x, "<f4") for n, w, x in _fields(v) if n == 1]
            return np.concatenate(parts) if parts else np.zeros(0, np.float32)
        if num == 1:  # BytesList
            return np.array([x for n, w, x in _fields(v) if n == 1], dtype=object)
    return np.zeros(0, np.int64)


def parse_example(record: bytes) -> dict[str, np.ndarray]:
    """A serialized tf.train.Example -> {feature name: values}."""
    out: dict[str, np.ndarray] = {}
    for num, _wt, features in _fields(record):
        if num != 1:
            continue
        for fnum, _w, entry in _fields(features):
            if fnum != 1:
                continue
            key, value = "", b""
            for n, _x, v in _fields(entry):
                if n == 1:
                    key = v.decode()
                elif n == 2:
                    value = v
            out[key] = _feature(value)
    return out


def _enc_varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(num: int, payload: bytes) -> bytes:
    return _enc_varint(num << 3 | 2) + _enc_varint(len(payload)) + payload


def encode_example(features: dict[str, np.ndarray]) -> bytes:
    """A tf.train.Example with int64 (integer arrays) or float (float arrays) features."""
    entries = b""
    for key, arr in features.items():
        a = np.asarray(arr).reshape(-1)
        if np.issubdtype(a.dtype, np.floating):
            feat = _ld(2, _ld(1, a.astype("<f4").tobytes()))
        else:
            feat = _ld(3, _ld(1, b"".join(_enc_varint(int(x)) for x in a)))
        entries += _ld(1, _ld(1, key.encode()) + _ld(2, feat))
    return _ld(1, entries)


# -- readers ------------------------------------------------------------------------------------
class TfRecordSamples:
    """The parsed samples of some TFRecord files, in memory, batched as the model wants."""

    def __init__(self, recipe: TfRecordFiles) -> None:
        self.r = recipe
        want = GPT_FEATURES if recipe.kind == "gpt" else BERT_FEATURES
        cols: dict[str, list[np.ndarray]] = {k: [] for k in want}
        where: list[tuple[str, int]] = []  # (file, record) of each sample, for messages
        pads: list[np.ndarray] = []  # GPT: where input_mask is 0 (padding), per sample
        for path in recipe.paths:
            for i, rec in enumerate(read_records(path)):
                try:
                    ex = parse_example(rec)
                except (ValueError, IndexError, UnicodeDecodeError) as e:
                    raise ConfigError(
                        f"TFRecord file {path} record {i} is not a "
                        f"tf.train.Example ({e}); write it again."
                    ) from None
                missing = [k for k in want if k not in ex]
                if missing:
                    raise ConfigError(
                        f"TFRecord file {path} record {i} has no feature "
                        f"{missing[0]!r} (it has {', '.join(sorted(ex))}); "
                        f"{recipe.name} needs {', '.join(want)}."
                    )
                if len(ex["input_ids"]) > recipe.seq_len:
                    raise ConfigError(
                        f"TFRecord file {path} holds sequences of "
                        f"{len(ex['input_ids'])} tokens, longer than "
                        f"max_sequence_length {recipe.seq_len}; raise it or "
                        f"re-create the data."
                    )
                if recipe.kind == "gpt":
                    mask = np.asarray(ex.get("input_mask", ()))
                    pad = mask == 0 if len(mask) == len(ex["labels"]) else None
                    pads.append(np.zeros(len(ex["labels"]), bool) if pad is None else pad)
                for k in want:
                    cols[k].append(ex[k])
                where.append((path, i))
        stacked = {k: _stack(v, k, recipe) for k, v in cols.items()}  # int64 as stored
        pad = _stack(pads, "labels", recipe).astype(bool) if pads else None  # (N, T)
        if pad is not None and pad.all(axis=1).any():
            path, i = where[int(np.flatnonzero(pad.all(axis=1))[0])]
            raise ConfigError(
                f"TFRecord file {path} record {i} has an all-zero input_mask (no position to "
                f"learn from: it would train at loss 0); drop it or re-create the data."
            )
        if pad is not None:  # a padded position's label is not looked at: any value
            stacked["labels"][pad] = 0
        _check_values(stacked, recipe, where)  # before the int32 cast could wrap a value
        if pad is not None:
            stacked["labels"][pad] = IGNORE  # the loss skips it (runtime/nn/loss.py)
        self.cols = {
            k: v.astype(np.float32 if k == "masked_lm_weights" else np.int32)
            for k, v in stacked.items()
        }

    def __len__(self) -> int:
        return len(self.cols["input_ids"])

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The samples `idx` (B,): GPT (B, T) ids and labels, or BERT's batch."""
        c = self.cols
        if self.r.kind == "gpt":
            return {"input_ids": c["input_ids"][idx], "labels": c["labels"][idx]}
        w = c["masked_lm_weights"][idx].astype(np.float32)  # (B, P)
        if self.r.scale_by_masked:
            w *= np.float32(len(idx) / max(float(w.sum()), 1.0))
        if self.r.weight != 1.0:
            w *= np.float32(self.r.weight)
        return {
            "input_ids": c["input_ids"][idx],
            "token_type_ids": c["segment_ids"][idx],
            "input_mask": c["input_mask"][idx],  # the encoder hides the padding (attention.py)
            "masked_lm_positions": c["masked_lm_positions"][idx],
            "masked_lm_ids": c["masked_lm_ids"][idx],
            "masked_lm_weights": w,
            "next_sentence_label": c["next_sentence_labels"][idx].reshape(-1),
        }


def _check_values(
    cols: dict[str, np.ndarray], r: TfRecordFiles, where: list[tuple[str, int]]
) -> None:
    """Every id, label and position in range, as HDF5 files are checked (runtime/data/hdf5.py):
    the first bad value stops the run naming its file and record. A GPT label is looked at
    only where input_mask is not 0 (a label of -1 elsewhere is an error, as in HDF5 files)."""
    checks = [("input_ids", 0, r.vocab_size, "token ids")]
    if r.kind == "gpt":  # padded positions (input_mask 0) were set to 0 for this check
        checks.append(("labels", 0, r.vocab_size, "labels at unpadded positions (token ids)"))
    else:
        checks += [
            ("masked_lm_ids", 0, r.vocab_size, "masked-LM labels (token ids)"),
            ("masked_lm_positions", 0, r.seq_len, "masked positions"),
            ("segment_ids", 0, 2, "segment ids"),
            ("next_sentence_labels", 0, 2, "next-sentence labels"),
        ]
    for key, low, high, what in checks:
        arr = cols[key]
        if not arr.size:
            continue
        bad = (arr < low) | (arr >= high)  # (N, len)
        if not bad.any():
            continue
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        value = int(arr[row][bad[row]][0])
        path, rec = where[row]
        vocab = high == r.vocab_size and key != "masked_lm_positions"
        if vocab and value >= high:
            raise ConfigError(
                f"TFRecord file {path} record {rec} has {key} {value} but vocab_size is "
                f"{high}; raise vocab_size or re-tokenise the data."
            )
        raise ConfigError(
            f"TFRecord file {path} record {rec} has {key} {value}, but {what} lie in "
            f"[{low}, {high}); re-create the data."
        )


def _stack(values: list[np.ndarray], key: str, r: TfRecordFiles) -> np.ndarray:
    """One feature of every record, (N, len): sequences must all be max_sequence_length long."""
    lengths = {len(v) for v in values}
    if len(lengths) > 1:
        raise ConfigError(
            f"TFRecord files {r.paths[0]}, ... hold {key} of lengths "
            f"{sorted(lengths)[:3]}; every record must have the same length."
        )
    if (
        key in ("input_ids", "input_mask", "labels", "segment_ids")
        and lengths
        and lengths != {r.seq_len}
    ):
        raise ConfigError(
            f"TFRecord file {r.paths[0]} holds {key} of {lengths.pop()} tokens "
            f"but max_sequence_length is {r.seq_len}; make them equal."
        )
    return np.stack(values) if values else np.zeros((0, 1), np.int64)


@dataclass(frozen=True)
class TfRecordFiles:
    """Recipe: the samples of TFRecord files (picklable: each input worker loads its own)."""

    paths: tuple[str, ...]
    kind: str  # "gpt" | "bert"
    name: str  # the processor, for messages
    seq_len: int
    vocab_size: int
    scale_by_masked: bool = False  # BERT: the loss weights of runtime/data/mlm.py
    weight: float = 1.0

    def load(self) -> TfRecordSamples:
        """Read and parse the files."""
        data = TfRecordSamples(self)
        if len(data) == 0:
            raise ConfigError(
                f"TFRecord files {', '.join(self.paths)} hold no records; write them again."
            )
        return data
