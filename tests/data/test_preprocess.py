"""cs2sim-preprocess: raw text -> the GPT HDF5 / BERT CSV layouts, read back bit for bit by the
processors, and trained on."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

h5py = pytest.importorskip("h5py")
pytest.importorskip("tokenizers")

from cs2sim.runtime.cli.main import main, model_home  # noqa: E402
from cs2sim.runtime.data import build_input  # noqa: E402
from cs2sim.runtime.data.preprocess import GPT2_VOCAB_DIR  # noqa: E402
from cs2sim.scripts.preprocess import main as preprocess  # noqa: E402

TEXT = (
    "The quick brown fox jumps over the lazy dog. " * 20,
    "Hello world\n\nA second paragraph, with punctuation: isn't it?\n" * 15,
)


def raw_dir(tmp_path):
    d = tmp_path / "raw"
    d.mkdir()
    (d / "a.txt").write_text(TEXT[0])
    with open(d / "b.jsonl", "w") as f:
        for i in range(5):
            f.write(json.dumps({"text": f"{TEXT[1]} document {i}", "meta": i}) + "\n")
    return d


def test_gpt2_hdf5_layout_tokens_and_read_back_bit_for_bit(tmp_path, capsys):
    from tokenizers import ByteLevelBPETokenizer

    out = tmp_path / "h5"
    code = preprocess(
        [
            "gpt2-hdf5",
            "--input_dir",
            str(raw_dir(tmp_path)),
            "--output_dir",
            str(out),
            "--max_seq_length",
            "32",
            "--files_per_record",
            "16",
            "--seed",
            "3",
        ]
    )
    said = capsys.readouterr().out
    assert code == 0 and "tokens/s on this host" in said
    files = sorted(out.glob("*.h5"))
    assert len(files) >= 2 and (out / "data_params.json").is_file()
    rows = []
    for p in files:
        with h5py.File(p) as f:
            data = f["data"]
            assert data.dtype == np.int32 and data.shape[1:] == (3, 32)
            assert data.chunks == (1, 3, 32) and data.compression == "gzip"
            assert f.attrs["n_examples"] == data.shape[0]
            rows.append(data[:])
    rows = np.concatenate(rows)  # (N, 3, 32)
    # the token stream: every document's GPT-2 BPE then the end-of-text id 50256
    tok = ByteLevelBPETokenizer(
        str(GPT2_VOCAB_DIR / "gpt2-encoder.json"), str(GPT2_VOCAB_DIR / "gpt2-vocab.bpe")
    )
    docs = [TEXT[0]] + [f"{TEXT[1]} document {i}" for i in range(5)]
    stream = [t for d in docs for t in [*tok.encode(d).ids, 50256]]
    assert stream[:2] == [464, 2068]  # "The quick"
    full = rows[rows[:, 1].all(axis=1)]  # the windows without padding
    for k, r in enumerate(full):
        assert r[0].tolist() == stream[k * 33 : k * 33 + 32]
        assert r[2].tolist() == stream[k * 33 + 1 : k * 33 + 33]
    # the processor serves exactly these rows, in file order
    p = {
        "train_input": {
            "data_processor": "GptHDF5DataProcessor",
            "data_dir": str(out),
            "batch_size": len(rows),
            "max_sequence_length": 32,
            "vocab_size": 50257,
            "shuffle": False,
        },
        "model": {"vocab_size": 50257, "max_position_embeddings": 32},
    }
    b = next(build_input(p, "train", "gpt2", 1))
    # the labels of padded positions (attention mask 0) come as -1: the loss skips them
    assert (rows[:, 1] == 0).any()
    assert np.array_equal(b["input_ids"], rows[:, 0])
    assert np.array_equal(b["labels"], np.where(rows[:, 1] == 0, -1, rows[:, 2]))


def test_errors_are_one_line(tmp_path, capsys):
    assert (
        preprocess(
            [
                "gpt2-hdf5",
                "--input_dir",
                str(tmp_path / "nope"),
                "--output_dir",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert err.startswith("error: --input_dir") and err.count("\n") == 1
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.jsonl").write_text('{"body": "no text field"}\n')
    assert (
        preprocess(["gpt2-hdf5", "--input_dir", str(bad), "--output_dir", str(tmp_path / "o")]) == 1
    )
    assert "has no text field 'text'; set --jsonl_key" in capsys.readouterr().err
    assert (
        preprocess(
            [
                "gpt2-hdf5",
                "--input_dir",
                str(raw_dir(tmp_path)),
                "--output_dir",
                str(tmp_path / "o"),
                "--eos_id",
                "60000",
            ]
        )
        == 1
    )
    assert "--eos_id 60000 is outside the vocabulary" in capsys.readouterr().err


def test_bert_csv_reads_back(tmp_path, capsys):
    words = [
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
        "ran",
        "far",
        "away",
        ".",
        "##s",
    ]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    raw = tmp_path / "raw"
    raw.mkdir()
    doc = "the cat sat on the mat .\na dog ran far away .\nthe cats sat .\n"
    (raw / "a.txt").write_text("\n".join([doc] * 6))
    out = tmp_path / "csv"
    assert (
        preprocess(
            [
                "bert-csv",
                "--input_dir",
                str(raw),
                "--output_dir",
                str(out),
                "--vocab_file",
                str(vocab),
                "--max_seq_length",
                "24",
            ]
        )
        == 0
    )
    meta = (out / "meta.dat").read_text().split()
    assert meta[0].endswith(".csv") and int(meta[1]) > 0
    p = {
        "train_input": {
            "data_processor": "BertCSVDynamicMaskDataProcessor",
            "data_dir": str(out),
            "vocab_file": str(vocab),
            "batch_size": 2,
            "max_sequence_length": 24,
            "max_predictions_per_seq": 4,
            "shuffle": False,
        },
        "model": {"vocab_size": len(words), "max_position_embeddings": 24},
    }
    b = next(build_input(p, "train", "bert", 1))
    assert b["input_ids"][:, 0].tolist() == [2, 2]  # [CLS]
    assert (b["input_ids"] != 1).all()  # every piece is in the vocabulary: no [UNK]


@pytest.mark.slow
def test_preprocessed_data_trains_gpt2_tiny(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    out = tmp_path / "h5"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cs2sim.scripts.preprocess",
            "gpt2-hdf5",
            "--input_dir",
            str(raw_dir(tmp_path)),
            "--output_dir",
            str(out),
            "--max_seq_length",
            "32",
            "--files_per_record",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    with open(model_home("gpt2") / "configs" / "params_tiny.yaml") as f:
        doc = yaml.safe_load(f)
    doc["model"].update(vocab_size=50257, max_position_embeddings=32)
    for section in ("train_input", "eval_input"):
        doc[section].pop("stand_in_data", None)
        doc[section].update(
            data_processor="GptHDF5DataProcessor",
            data_dir=str(out),
            vocab_size=50257,
            max_sequence_length=32,
            batch_size=4,
        )
    cfg = tmp_path / "p.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    code = main(
        "gpt2", ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md"), "--max_steps", "4"]
    )
    out_, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "HDF5 files (.h5)" in out_ + err and "STAND-IN" not in out_ + err
