"""TFRecords are checked like HDF5 files: every id, label and position in range, every record's
data checksum whatever the file's size, every declared length against the bytes left."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.tfrecord import encode_example, masked_crc, write_records
from cs2sim.system.errors import ConfigError

T, VOCAB = 16, 1000


def gpt_record(ids, labels=None, mask=None) -> bytes:
    ids = np.asarray(ids)
    return encode_example(
        {
            "input_ids": ids,
            "input_mask": np.ones(T, np.int64) if mask is None else np.asarray(mask),
            "labels": np.roll(ids, -1) if labels is None else np.asarray(labels),
        }
    )


def params(d, **kw) -> dict:
    sec = {
        "data_processor": "GptTfRecordsProcessor",
        "data_dir": str(d),
        "batch_size": 2,
        "max_sequence_length": T,
        "vocab_size": VOCAB,
        "shuffle": False,
        **kw,
    }
    return {"train_input": sec, "model": {"vocab_size": VOCAB, "max_position_embeddings": T}}


def one_sentence(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and text.endswith(".")
    return text


def test_a_negative_input_id_or_label_is_refused_naming_file_and_record(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    good = [gpt_record(np.arange(T) + k) for k in range(3)]
    ids = np.arange(T)
    ids[4] = -5
    write_records(d / "a.tfrecords", [*good, gpt_record(ids)])
    with pytest.raises(ConfigError) as e:
        build_input(params(d), "train", "gpt2", 1)
    assert one_sentence(e) == (
        f"TFRecord file {d / 'a.tfrecords'} record 3 has input_ids -5, but token ids lie in "
        f"[0, {VOCAB}); re-create the data."
    )
    assert "raise vocab_size" not in str(e.value)
    labels = np.arange(T)
    labels[2] = -7
    write_records(d / "a.tfrecords", [*good, gpt_record(np.arange(T), labels=labels)])
    with pytest.raises(ConfigError, match=r"record 3 has labels -7, but labels"):
        build_input(params(d), "train", "gpt2", 1)
    # -1 on an unmasked position is not padding either
    labels[2] = -1
    write_records(d / "a.tfrecords", [*good, gpt_record(np.arange(T), labels=labels)])
    with pytest.raises(ConfigError, match=r"record 3 has labels -1"):
        build_input(params(d), "train", "gpt2", 1)
    # ... but any label under input_mask 0 is padding: it becomes -1, the ignored label
    mask = np.ones(T, np.int64)
    mask[2:] = 0
    labels[2:] = -7
    write_records(d / "a.tfrecords", [*good, gpt_record(np.arange(T), labels=labels, mask=mask)])
    with build_input(params(d, batch_size=4), "train", "gpt2", 1) as s:
        assert (next(s)["labels"][3, 2:] == -1).all()
    # an id past vocab_size still says to raise it
    write_records(d / "a.tfrecords", [*good, gpt_record(np.arange(T) + VOCAB)])
    with pytest.raises(ConfigError, match=f"has input_ids {VOCAB} but vocab_size is {VOCAB}"):
        build_input(params(d), "train", "gpt2", 1)
    # a value past int32 is not wrapped into range by the cast
    write_records(d / "a.tfrecords", [*good, gpt_record(np.arange(T) + 2**32)])
    with pytest.raises(ConfigError, match="has input_ids 4294967296"):
        build_input(params(d), "train", "gpt2", 1)


def test_bert_features_out_of_range_are_refused(tmp_path):
    d = tmp_path / "bert"
    d.mkdir()

    def rec(**over) -> bytes:
        f = {
            "input_ids": np.arange(T),
            "input_mask": np.ones(T, np.int64),
            "segment_ids": np.zeros(T, np.int64),
            "masked_lm_positions": np.array([1, 2, 0]),
            "masked_lm_ids": np.array([5, 6, 0]),
            "masked_lm_weights": np.array([1.0, 1.0, 0.0], np.float32),
            "next_sentence_labels": np.array([0]),
        }
        f.update(over)
        return encode_example(f)

    p = params(d, data_processor="BertTfRecordsProcessor")
    for bad, says in (
        ({"masked_lm_ids": np.array([5, -7, 0])}, "masked_lm_ids -7"),
        ({"masked_lm_positions": np.array([1, T, 0])}, f"masked_lm_positions {T}"),
        ({"segment_ids": np.full(T, 3)}, "segment_ids 3"),
        ({"next_sentence_labels": np.array([-1])}, "next_sentence_labels -1"),
    ):
        write_records(d / "a.tfrecords", [rec(), rec(**bad)])
        with pytest.raises(ConfigError, match=f"record 1 has {says}, but"):
            build_input(p, "train", "bert", 1)


def test_a_flipped_byte_in_a_file_over_4_mib_is_found(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    rng = np.random.default_rng(0)
    recs = [gpt_record(rng.integers(0, VOCAB, T)) for _ in range(40_000)]  # ~5 MiB
    write_records(d / "big.tfrecords", recs)
    size = os.path.getsize(d / "big.tfrecords")
    assert size > 4 * 2**20
    with build_input(params(d), "train", "gpt2", 1) as s:  # intact: read
        assert s.samples_per_epoch == 40_000
    raw = bytearray((d / "big.tfrecords").read_bytes())
    at = size - 40  # in the last record's data, past every length checksum
    raw[at] ^= 0x01
    (d / "big.tfrecords").write_bytes(bytes(raw))
    with pytest.raises(ConfigError) as e:
        build_input(params(d), "train", "gpt2", 1)
    assert one_sentence(e) == (
        f"TFRecord file {d / 'big.tfrecords'} has a bad checksum in record 39999 (its data is "
        "corrupt); write the file again."
    )


def test_a_declared_length_past_the_end_is_refused_before_allocating(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    head = struct.pack("<Q", 2**60)  # a record of an exabyte, with a valid length checksum
    (d / "a.tfrecords").write_bytes(head + struct.pack("<I", masked_crc(head)) + b"x" * 64)
    with pytest.raises(ConfigError) as e:
        build_input(params(d), "train", "gpt2", 1)
    assert "is truncated in record 0" in one_sentence(e)


def test_an_unreadable_file_is_reported_as_permission_denied(tmp_path, monkeypatch):
    d = tmp_path / "tfr"
    d.mkdir()
    write_records(d / "a.tfrecords", [gpt_record(np.arange(T))] * 4)
    (d / "a.tfrecords").chmod(0)
    if os.geteuid() == 0:  # root reads every file: the kernel's answer to anyone else, made here
        real = Path.read_bytes

        def denied(self: Path) -> bytes:
            if self.name == "a.tfrecords":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ConfigError) as e:
        build_input(params(d), "train", "gpt2", 1)
    assert one_sentence(e) == (
        f"TFRecord file {d / 'a.tfrecords'} cannot be read: permission denied; make it "
        "readable (chmod a+r) or point data_dir elsewhere."
    )
