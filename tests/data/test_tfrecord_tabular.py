"""TFRecords (GPT and BERT features), BERT pretraining CSV and GLUE TSV files written by the
test in the Model Zoo's layouts, read back by the processors the configs name."""

from __future__ import annotations

import csv
import struct

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.tfrecord import (
    encode_example,
    masked_crc,
    parse_example,
    read_records,
    write_records,
)
from cs2sim.system.errors import ConfigError

T = 16


def test_masked_crc_of_the_tfrecord_format():
    # CRC-32C("123456789") = 0xE3069283 (the standard check value), masked as TFRecord does
    c = 0xE3069283
    assert masked_crc(b"123456789") == (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_example_round_trip_and_packed_or_unpacked_int64():
    ex = {
        "input_ids": np.array([0, 1, 127, 128, 50256, 2**40]),
        "w": np.array([0.5, 1.0], np.float32),
    }
    got = parse_example(encode_example(ex))
    assert got["input_ids"].tolist() == ex["input_ids"].tolist()
    assert got["w"].tolist() == [0.5, 1.0]
    # an unpacked repeated int64 (wire type 0 per value), as older writers emit it
    values = b"".join(b"\x08" + bytes([v]) for v in (3, 4, 5))
    feat = b"\x1a" + bytes([len(values)]) + values  # Feature.int64_list
    entry = b"\x0a\x01k" + b"\x12" + bytes([len(feat)]) + feat
    rec = b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry
    assert parse_example(rec)["k"].tolist() == [3, 4, 5]


def gpt_records(path, first, n, vocab=1000):
    rng = np.random.default_rng(first)
    recs = []
    for s in range(first, first + n):
        ids = rng.integers(0, vocab, T + 1)
        ids[0] = s
        recs.append(
            encode_example(
                {"input_ids": ids[:-1], "input_mask": np.ones(T, np.int64), "labels": ids[1:]}
            )
        )
    write_records(path, recs)


def gpt_params(d, **kw):
    return {
        "train_input": {
            "data_processor": "GptTfRecordsProcessor",
            "data_dir": str(d),
            "batch_size": 4,
            "max_sequence_length": T,
            "vocab_size": 1000,
            "shuffle": False,
            **kw,
        },
        "model": {"vocab_size": 1000, "max_position_embeddings": T},
    }


def test_gpt_tfrecords_are_read_in_file_order_and_sharded_by_file(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    gpt_records(d / "a.tfrecords", 0, 8)
    gpt_records(d / "b.tfrecords", 8, 8)
    s = build_input(gpt_params(d), "train", "gpt2", 1)
    seen = [int(x) for _ in range(4) for x in next(s)["input_ids"][:, 0]]
    assert seen == list(range(16)) and "2 TFRecord files" in s.source
    with build_input(gpt_params(d, num_workers=2, shuffle=True), "train", "gpt2", 1) as s:
        epoch = [int(x) for _ in range(4) for x in next(s)["input_ids"][:, 0]]
    assert sorted(epoch) == list(range(16))


def test_corrupt_tfrecord_and_ids_beyond_vocab_name_the_file(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    gpt_records(d / "a.tfrecords", 0, 4)
    raw = bytearray((d / "a.tfrecords").read_bytes())
    raw[30] ^= 0xFF  # inside the first record's data
    (d / "a.tfrecords").write_bytes(bytes(raw))
    with pytest.raises(ConfigError, match=r"a\.tfrecords has a bad checksum in record 0"):
        build_input(gpt_params(d), "train", "gpt2", 1)
    gpt_records(d / "a.tfrecords", 0, 4, vocab=5000)
    with pytest.raises(
        ConfigError, match=r"a\.tfrecords record 0 has input_ids \d+ but vocab_size is 1000"
    ):
        build_input(gpt_params(d), "train", "gpt2", 1)
    (d / "a.tfrecords").write_bytes(struct.pack("<Q", 5))
    with pytest.raises(ConfigError, match="truncated"):
        read_records(d / "a.tfrecords")


def test_bert_tfrecords_features(tmp_path):
    d = tmp_path / "bert"
    d.mkdir()
    recs = []
    for i in range(8):
        recs.append(
            encode_example(
                {
                    "input_ids": np.arange(T) + i,
                    "input_mask": np.ones(T, np.int64),
                    "segment_ids": (np.arange(T) >= T // 2).astype(np.int64),
                    "masked_lm_positions": np.array([1, 2, 0]),
                    "masked_lm_ids": np.array([7, 8, 0]),
                    "masked_lm_weights": np.array([1.0, 1.0, 0.0], np.float32),
                    "next_sentence_labels": np.array([i % 2]),
                }
            )
        )
    write_records(d / "x.tfrecord", recs)
    p = {
        "train_input": {
            "data_processor": "BertTfRecordsProcessor",
            "data_dir": str(d),
            "batch_size": 4,
            "max_sequence_length": T,
            "shuffle": False,
        },
        "model": {"vocab_size": 100, "max_position_embeddings": T},
    }
    b = next(build_input(p, "train", "bert", 1))
    assert b["input_ids"][1].tolist() == list(range(1, T + 1))
    assert b["token_type_ids"][0, T // 2] == 1 and b["next_sentence_label"].tolist() == [0, 1, 0, 1]
    assert (
        b["masked_lm_ids"][0].tolist() == [7, 8, 0] and b["masked_lm_weights"].dtype == np.float32
    )


VOCAB = [
    "[PAD]",
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "the",
    "cat",
    "sat",
    "on",
    "mat",
    "a",
    "dog",
    "good",
    "bad",
    "film",
    "is",
    "##s",
    ".",
    "it",
]


def vocab_file(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    return path


def test_bert_csv_dynamic_masking(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    rows = []
    for i in range(12):
        toks = ["[CLS]", "the", "cat", "sat", "[SEP]", "on", "a", "mat", "zebra", "[SEP]"]
        rows.append(
            {"tokens": repr(toks), "segment_ids": repr([0] * 5 + [1] * 5), "is_random_next": i % 2}
        )
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["tokens", "segment_ids", "is_random_next"])
        w.writeheader()
        w.writerows(rows)
    (d / "meta.dat").write_text("part0.csv 12\n")
    p = {
        "train_input": {
            "data_processor": "BertCSVDynamicMaskDataProcessor",
            "data_dir": str(d),
            "vocab_file": str(vocab_file(tmp_path)),
            "batch_size": 4,
            "max_sequence_length": T,
            "max_predictions_per_seq": 3,
            "masked_lm_prob": 0.3,
            "shuffle": False,
        },
        "model": {"vocab_size": len(VOCAB), "max_position_embeddings": T},
    }
    s = build_input(p, "train", "bert", 1)
    b = next(s)
    # round(10 * 0.3) = 3 predictions, never on [CLS]/[SEP]/[PAD]
    assert (b["masked_lm_weights"] > 0).sum(axis=1).tolist() == [3, 3, 3, 3]
    orig = np.array([2, 5, 6, 7, 3, 8, 10, 9, 1, 3] + [0] * (T - 10))
    for row in range(4):
        pos = b["masked_lm_positions"][row]
        assert set(pos.tolist()) <= {1, 2, 3, 5, 6, 7, 8}
        assert b["masked_lm_ids"][row].tolist() == orig[pos].tolist()  # labels: the originals
        kept = np.setdiff1d(np.arange(T), pos)
        assert b["input_ids"][row][kept].tolist() == orig[kept].tolist()
    assert b["token_type_ids"][0, 5] == 1 and b["next_sentence_label"].tolist() == [0, 1, 0, 1]
    # the 80/10/10 split over many draws: mostly [MASK]
    masks = [next(s) for _ in range(30)]
    hits = sum(
        int((m["input_ids"][r, m["masked_lm_positions"][r]] == 4).sum())
        for m in masks
        for r in range(4)
    )
    assert 0.65 < hits / (30 * 4 * 3) < 0.95


def test_sst2_and_mnli_tsv(tmp_path):
    sst = tmp_path / "SST-2"
    sst.mkdir()
    (sst / "train.tsv").write_text(
        "sentence\tlabel\nthe film is good .\t1\nit is bad\t0\n"
        "a dog sat on the mat\t1\nthe cats\t0\n"
    )
    (sst / "dev.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    p = {
        "train_input": {
            "data_processor": "SST2DataProcessor",
            "data_dir": str(sst),
            "vocab_file": str(vocab_file(tmp_path)),
            "batch_size": 2,
            "max_sequence_length": 8,
            "shuffle": False,
        },
        "eval_input": {
            "data_processor": "SST2DataProcessor",
            "data_dir": str(sst),
            "vocab_file": str(vocab_file(tmp_path)),
            "batch_size": 2,
            "max_sequence_length": 8,
        },
        "model": {"vocab_size": len(VOCAB), "num_labels": 2, "max_position_embeddings": 8},
    }
    b = next(build_input(p, "train", "bert_classifier", 1))
    assert b["labels"].tolist() == [1, 0]
    assert b["input_ids"][0].tolist() == [2, 5, 14, 15, 12, 17, 3, 0]  # [CLS] .. [SEP] [PAD]
    assert b["input_ids"][1].tolist()[:5] == [2, 18, 15, 13, 3]
    e = next(build_input(p, "eval", "bert_classifier", 1))
    assert e["labels"].tolist() == [1, 0]
    mnli = tmp_path / "MNLI"
    mnli.mkdir()
    (mnli / "train.tsv").write_text(
        "index\tsentence1\tsentence2\tgold_label\n"
        "0\tthe cat sat\ta cat sat\tentailment\n"
        "1\tthe dog\tthe cat\tcontradiction\n"
    )
    p["train_input"].update(data_processor="MNLIDataProcessor", data_dir=str(mnli))
    p["model"]["num_labels"] = 3
    b = next(build_input(p, "train", "bert_classifier", 1))
    assert b["labels"].tolist() == [1, 0]
    assert b["input_ids"][0].tolist() == [2, 5, 6, 7, 3, 10, 6, 3]  # cut to 8: the longer lost
    assert b["token_type_ids"][0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]


def _bert_csv(tmp_path, rows=8, **section):
    d = tmp_path / "csv"
    d.mkdir()
    toks = ["[CLS]", "the", "cat", "sat", "on", "a", "mat", "zebra", "the", "cat", "[SEP]"]
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["tokens"])
        w.writeheader()
        w.writerows({"tokens": repr(toks)} for _ in range(rows))
    return {
        "train_input": {
            "data_processor": "BertCSVDynamicMaskDataProcessor",
            "data_dir": str(d),
            "vocab_file": str(vocab_file(tmp_path)),
            "batch_size": 4,
            "max_sequence_length": T,
            "max_predictions_per_seq": 3,
            "masked_lm_prob": 0.3,
            "shuffle": False,
            **section,
        },
        "model": {"vocab_size": len(VOCAB), "max_position_embeddings": T, "disable_nsp": True},
    }


def test_bert_csv_masks_are_redrawn_every_epoch_and_resume_exactly(tmp_path):
    p = _bert_csv(tmp_path)
    s = build_input(p, "train", "bert", 1)
    epochs = [[next(s) for _ in range(2)] for _ in range(3)]  # 8 rows, batch 4: 2 per epoch
    pos = [np.concatenate([b["masked_lm_positions"] for b in e]) for e in epochs]  # (8, 3)
    # the same rows, shuffle off: only the epoch differs, and the masks with it
    assert not np.array_equal(pos[0], pos[1]) and not np.array_equal(pos[1], pos[2])
    # deterministic per (seed, epoch, sample): a resumed stream and input workers agree
    state = {"epoch": 1, "index": 1, "batches_per_epoch": 2, "batch_size": 4}
    again = build_input(p, "train", "bert", 1)
    again.load_state_dict(state)
    b = next(again)
    for k in epochs[1][1]:
        assert np.array_equal(b[k], epochs[1][1][k]), k
    p["train_input"]["num_workers"] = 2
    with build_input(p, "train", "bert", 1) as w:
        w.load_state_dict(state)
        b = next(w)
    assert np.array_equal(b["masked_lm_positions"], epochs[1][1]["masked_lm_positions"])
    assert np.array_equal(b["input_ids"], epochs[1][1]["input_ids"])


def test_gpt_tfrecord_padding_comes_as_label_minus_one(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    ids = np.arange(T + 1)
    mask = np.ones(T, np.int64)
    mask[10:] = 0  # the last 6 positions are padding
    write_records(
        d / "a.tfrecords",
        [
            encode_example({"input_ids": ids[:-1], "input_mask": mask, "labels": ids[1:]})
            for _ in range(4)
        ],
    )
    b = next(build_input(gpt_params(d), "train", "gpt2", 1))
    assert b["labels"][:, :10].tolist() == [list(range(1, 11))] * 4
    assert (b["labels"][:, 10:] == -1).all() and b["input_ids"][0].tolist() == list(range(T))
