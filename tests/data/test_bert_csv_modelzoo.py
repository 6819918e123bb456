"""BERT CSV as the Model Zoo's BertCSVDynamicMaskDataProcessor reads it: do_lower off by default
(and a vocabulary that does not suit it warned with the shares measured), is_random_next needed
for next-sentence prediction, meta.dat deciding the files and rows, each sample's
attention_mask. Files written by the test in the layout of the Model Zoo's create_csv.py."""

from __future__ import annotations

import csv
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.data import build_input, tabular
from cs2sim.system.errors import ConfigError

T = 16
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CASED_WORDS = ["The", "Cat", "Sat", "On", "A", "Mat", "the", "cat", "sat", "on", "a", "mat"]
UNCASED_WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog"]
SENTENCE = ["The", "cat", "Sat", "on", "A", "mat"]


@pytest.fixture(autouse=True)
def fresh_warnings():
    """Each test sees its own casing warnings (they are said once per process)."""
    tabular.CASING_WARNED.clear()
    yield
    tabular.CASING_WARNED.clear()


def write_vocab(d: Path, words: list[str]) -> Path:
    path = d / "vocab.txt"
    path.write_text("\n".join(SPECIALS + words) + "\n")
    return path


def write_csv(
    path: Path,
    rows: int,
    *,
    words: list[str] = SENTENCE,
    columns: tuple[str, ...] = ("tokens", "segment_ids", "is_random_next"),
    first: int = 0,
) -> None:
    """`rows` rows of [CLS] A [SEP] B [SEP] of growing length (row i has 2 + i % 4 words in
    B), is_random_next i % 2; `first` numbers the rows for the meta.dat tests."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns))
        w.writeheader()
        for i in range(first, first + rows):
            b = words[: 2 + i % 4]
            toks = ["[CLS]", *words[:3], "[SEP]", *b, "[SEP]"]
            row = {
                "tokens": repr(toks),
                "segment_ids": repr([0] * 5 + [1] * (len(b) + 1)),
                "is_random_next": i % 2,
            }
            w.writerow({k: row[k] for k in columns})


def params(d: Path, vocab: Path, **section) -> dict:
    return {
        "train_input": {
            "data_processor": "BertCSVDynamicMaskDataProcessor",
            "data_dir": str(d),
            "vocab_file": str(vocab),
            "batch_size": 2,
            "max_sequence_length": T,
            "max_predictions_per_seq": 3,
            "shuffle": False,
            **section,
        },
        "model": {"vocab_size": 64, "max_position_embeddings": T},
    }


def one_epoch(p: dict) -> dict[str, np.ndarray]:
    s = build_input(p, "train", "bert", 1)
    batches = [next(s) for _ in range(s.plan.batches_per_epoch)]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def unmasked_ids(b: dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with the masked positions given back their labels (the original ids)."""
    ids = b["input_ids"].copy()
    for r in range(len(ids)):
        real = b["masked_lm_weights"][r] > 0
        ids[r, b["masked_lm_positions"][r][real]] = b["masked_lm_ids"][r][real]
    return ids


def test_do_lower_is_off_by_default_and_a_cased_vocabulary_keeps_its_tokens(tmp_path, caplog):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 4)
    (d / "meta.dat").write_text("part0.csv 4\n")
    vocab = write_vocab(tmp_path, CASED_WORDS)
    index = {t: i for i, t in enumerate(SPECIALS + CASED_WORDS)}
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = one_epoch(params(d, vocab))
    ids = unmasked_ids(b)
    assert ids[0, :5].tolist() == [index[t] for t in ["[CLS]", "The", "cat", "Sat", "[SEP]"]]
    assert not (ids == index["[UNK]"]).any()  # every masked-LM target is a real word piece
    assert (b["masked_lm_ids"][b["masked_lm_weights"] > 0] != index["[UNK]"]).all()
    assert not caplog.records
    # do_lower true lower-cases tokens and vocabulary as the Model Zoo's build_vocab: "The"
    # is read as "the", and one warning says the cased vocabulary loses its capitals
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = one_epoch(params(d, vocab, do_lower=True))
    assert unmasked_ids(b)[0, 1] == index["the"]
    (rec,) = caplog.records
    msg = rec.getMessage()
    assert "is cased" in msg and "do_lower is true" in msg and "set do_lower: false" in msg
    # rows 0-3: A = The cat Sat (2 capitals of 3), B = the first 2-5 words (1, 2, 2, 3 of
    # 2, 3, 4, 5): 16 of the 26 word pieces, measured on the data
    assert re.search(r"so (\d+)% of the word pieces", msg).group(1) == "62"


def test_an_uncased_vocabulary_with_do_lower_false_is_warned_with_the_unk_share(tmp_path, caplog):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 4)
    (d / "meta.dat").write_text("part0.csv 4\n")
    vocab = write_vocab(tmp_path, UNCASED_WORDS)
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = one_epoch(params(d, vocab))
    unk = SPECIALS.index("[UNK]")
    words = unmasked_ids(b)[:, 1:4]  # The cat Sat of every row: the capitalised ones [UNK]
    assert (words[:, [0, 2]] == unk).all() and (words[:, 1] != unk).all()
    (rec,) = caplog.records  # the mismatch said once, with the share: 16 of 26 pieces
    msg = rec.getMessage()
    assert msg.startswith("62% of the word pieces of CSV file")
    assert "uncased vocab_file" in msg and "(0% with do_lower true); set do_lower: true." in msg
    caplog.clear()
    tabular.CASING_WARNED.clear()
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = one_epoch(params(d, vocab, do_lower=True))
    assert not (unmasked_ids(b) == unk).any() and not caplog.records


def test_a_csv_without_is_random_next_is_refused_naming_file_and_column(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 4, columns=("tokens", "segment_ids"))
    (d / "meta.dat").write_text("part0.csv 4\n")
    vocab = write_vocab(tmp_path, CASED_WORDS)
    with pytest.raises(ConfigError) as e:
        build_input(params(d, vocab), "train", "bert", 1)
    msg = str(e.value)
    assert f"CSV file {d / 'part0.csv'} has no column 'is_random_next'" in msg
    assert "disable_nsp: true" in msg and msg.count(". ") == 0  # one sentence
    # MLM-only data (the Model Zoo's create_csv_mlm_only.py) needs tokens alone
    p = params(d, vocab)
    p["model"]["disable_nsp"] = True
    assert one_epoch(p)["input_ids"].shape == (4, T)


def test_is_random_next_is_the_label_and_must_be_0_or_1(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 4)
    (d / "meta.dat").write_text("part0.csv 4\n")
    vocab = write_vocab(tmp_path, CASED_WORDS)
    assert one_epoch(params(d, vocab))["next_sentence_label"].tolist() == [0, 1, 0, 1]
    text = (d / "part0.csv").read_text().replace('",1\n', '",yes\n', 1)
    (d / "part0.csv").write_text(text)
    with pytest.raises(ConfigError, match=r"row 2 has is_random_next 'yes'; it must be 0 or 1"):
        build_input(params(d, vocab), "train", "bert", 1)


def test_meta_dat_decides_which_files_and_how_many_rows(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "a.csv", 6, first=0)
    write_csv(d / "b.csv", 6, first=100)  # not listed: never read
    write_csv(d / "c.csv", 6, first=200)
    (d / "meta.dat").write_text("c.csv 2\na.csv 4\n")
    vocab = write_vocab(tmp_path, CASED_WORDS)
    b = one_epoch(params(d, vocab))
    assert len(b["input_ids"]) == 6  # 2 of c.csv, then 4 of a.csv
    lengths = b["attention_mask"].sum(axis=1).tolist()
    # row i has 5 + 2 + i % 4 + 1 tokens: c.csv rows 200, 201, then a.csv rows 0-3
    assert lengths == [8 + i % 4 for i in (200, 201, 0, 1, 2, 3)]
    assert tabular.find_csv_files(d) == [d / "c.csv", d / "a.csv"]
    # without a meta.dat every .csv file is read whole
    (d / "meta.dat").unlink()
    assert len(one_epoch(params(d, vocab))["input_ids"]) == 18


def test_a_meta_dat_declaring_more_rows_than_the_file_holds_is_refused_before_allocating(
    tmp_path,
):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 5)
    vocab = write_vocab(tmp_path, CASED_WORDS)
    # 10^12 rows of 16 ids would be 64 TB: the count is checked against the file first
    for declared in (6, 10**12):
        (d / "meta.dat").write_text(f"part0.csv {declared}\n")
        with pytest.raises(ConfigError) as e:
            build_input(params(d, vocab), "train", "bert", 1)
        assert str(e.value) == (
            f"CSV file {d / 'part0.csv'} holds 5 rows but {d / 'meta.dat'} declares "
            f"{declared}; correct meta.dat (the Model Zoo's create_csv.py writes it with the "
            "files) or re-create the data."
        )


def test_a_meta_dat_naming_a_missing_file_or_malformed_is_refused(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 5)
    vocab = write_vocab(tmp_path, CASED_WORDS)
    (d / "meta.dat").write_text("part0.csv 5\npart9.csv 3\n")
    with pytest.raises(ConfigError, match=r"lists part9.csv, which is not in .*; remove the line"):
        build_input(params(d, vocab), "train", "bert", 1)
    (d / "meta.dat").write_text("part0.csv five\n")
    with pytest.raises(ConfigError, match=r"line 1 is 'part0.csv five', not '<file>.csv <rows>'"):
        build_input(params(d, vocab), "train", "bert", 1)


def test_each_sample_carries_its_attention_mask(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    write_csv(d / "part0.csv", 4)
    (d / "meta.dat").write_text("part0.csv 4\n")
    vocab = write_vocab(tmp_path, CASED_WORDS)
    b = one_epoch(params(d, vocab))
    pad = SPECIALS.index("[PAD]")
    for r in range(4):
        n = 8 + r % 4  # [CLS] 3 words [SEP] 2 + r % 4 words [SEP]
        assert b["attention_mask"][r].tolist() == [1] * n + [0] * (T - n)
        assert (b["input_ids"][r, n:] == pad).all()


def test_glue_tsv_with_an_uncased_vocabulary_and_do_lower_false_is_warned(tmp_path, caplog):
    sst = tmp_path / "SST-2"
    sst.mkdir()
    (sst / "train.tsv").write_text(
        "sentence\tlabel\nThe cat sat on a mat .\t1\nA dog sat .\t0\nthe cat .\t1\n"
    )
    vocab = write_vocab(tmp_path, [*UNCASED_WORDS, "."])
    p = {
        "train_input": {
            "data_processor": "SST2DataProcessor",
            "data_dir": str(sst),
            "vocab_file": str(vocab),
            "batch_size": 3,
            "max_sequence_length": T,
            "shuffle": False,
        },
        "model": {"vocab_size": 64, "max_position_embeddings": T, "num_labels": 2},
    }
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = next(build_input(p, "train", "bert_classifier", 1))
    unk = SPECIALS.index("[UNK]")
    assert (b["input_ids"][:2, 1] == unk).all()  # "The", "A": [UNK] with do_lower false
    assert b["attention_mask"].sum(axis=1).tolist() == [9, 6, 5]  # [CLS] words [SEP]
    (rec,) = caplog.records
    # 2 of the 14 word pieces ("The", "A") are [UNK]; none would be with do_lower true
    assert rec.getMessage().startswith("14% of the word pieces of TSV file")
    assert "become [UNK] (0% with do_lower true); set do_lower: true." in rec.getMessage()
    caplog.clear()
    p["train_input"]["do_lower"] = True
    with caplog.at_level(logging.WARNING, logger="cs2sim.data"):
        b = next(build_input(p, "train", "bert_classifier", 1))
    assert not (b["input_ids"] == unk).any() and not caplog.records


def test_long_rows_mlm_only_cut_with_nsp_refused_and_a_huge_field_refused_unparsed(tmp_path):
    d = tmp_path / "csv"
    d.mkdir()
    vocab = write_vocab(tmp_path, CASED_WORDS)
    long = ["[CLS]", *(["the"] * (T + 4)), "[SEP]"]
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens", "segment_ids", "is_random_next"])
        w.writerow([repr(long), repr([0] * len(long)), 0])
        w.writerow([repr(long), repr([0] * len(long)), 1])
    (d / "meta.dat").write_text("part0.csv 2\n")
    p = params(d, vocab)
    with pytest.raises(ConfigError, match=r"row 1 has 22 tokens, more than max_sequence_length 16"):
        build_input(p, "train", "bert", 1)
    p["model"]["disable_nsp"] = True  # the Model Zoo cuts MLM-only rows to the length
    b = one_epoch(p)
    assert b["attention_mask"].sum(axis=1).tolist() == [T, T]
    # a field far longer than T tokens can be is refused before it is parsed
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens"])
        w.writerow([repr(["the"] * 10**5)])
    (d / "meta.dat").write_text("part0.csv 1\n")
    with pytest.raises(ConfigError, match=r"row 1 has 700000 characters in column 'tokens'"):
        build_input(p, "train", "bert", 1)
