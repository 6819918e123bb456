"""BERT's input: vocabularies (fallback, WordPiece vocab_file), masking as Model Zoo's BERT
processors do it, the batch's loss weights, the classifier's stand-in labels."""

from __future__ import annotations

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.classify import indent_depth
from cs2sim.runtime.data.vocab import BYTE_OFFSET, fallback_vocab, read_vocab, wordpiece_ids
from cs2sim.runtime.params import validate_params
from cs2sim.system.errors import ConfigError


def params(tmp_path, model="bert", train=None, mp=None):
    raw = {
        "train_input": {
            "batch_size": 8,
            "max_sequence_length": 32,
            "max_predictions_per_seq": 5,
            **(train or {}),
        },
        "model": {
            "vocab_size": 300,
            "hidden_size": 8,
            "num_heads": 2,
            "num_hidden_layers": 1,
            "filter_size": 8,
            "max_position_embeddings": 32,
            **(mp or {}),
        },
        "optimizer": {"learning_rate": 0.01},
        "runconfig": {"max_steps": 1, "seed": 3},
    }
    p, warnings = validate_params(raw, model)
    return p, warnings


def test_masking_as_the_model_zoo_processors(tmp_path):
    p, _ = params(tmp_path)
    stream = build_input(p, "train", "bert", 3)
    b = next(stream)
    v = fallback_vocab()
    ids, seg, pos, w = (
        b[k] for k in ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_weights")
    )
    assert ids.shape == (8, 32) and pos.shape == (8, 5) and b["next_sentence_label"].shape == (8,)
    assert (ids[:, 0] == v.cls).all() and (ids[:, -1] == v.sep).all()
    assert ((ids == v.sep).sum(axis=1) == 2).all()  # [CLS] A [SEP] B [SEP]
    assert (seg[:, 0] == 0).all() and (seg[:, -1] == 1).all()
    real = w > 0
    # round(29 content tokens * 0.15) = 4 predictions each, padding (weight 0) after them
    assert (real.sum(axis=1) == 4).all() and (pos[~real] == 0).all()
    masked = np.take_along_axis(ids, pos, axis=1)[real]
    assert (masked == v.mask).mean() > 0.5  # 80% [MASK]
    labels = b["masked_lm_ids"][real]
    assert ((labels >= BYTE_OFFSET) & (labels < v.size)).all()  # bytes: never [CLS] / [SEP]
    # dynamic scaling off, mlm_loss_weight 1: the weights are the mask
    assert set(np.unique(w)) == {0.0, 1.0}


def test_a_sample_is_the_same_in_any_batch(tmp_path):
    p8, _ = params(tmp_path, train={"shuffle": False})
    p2, _ = params(tmp_path, train={"shuffle": False, "batch_size": 2})
    big = next(build_input(p8, "train", "bert", 3))
    s2 = build_input(p2, "train", "bert", 3)
    small = [next(s2) for _ in range(4)]
    for k in big:
        np.testing.assert_array_equal(np.concatenate([s[k] for s in small]), big[k])


@pytest.mark.parametrize(
    ("train", "mp", "total"),
    [
        ({"dynamic_mlm_scale": True}, {"mlm_loss_weight": 0.5}, 8.0),  # B / masked; weight unused
        ({"scale_mlm_weights": True}, {"mlm_loss_weight": 0.5}, 4.0),  # TF: B / masked * weight
        ({}, {"mlm_loss_weight": 0.5}, 0.5 * 32),  # mask * weight (32 predictions in the batch)
    ],
)
def test_batch_loss_weights_fold_every_scaling(tmp_path, train, mp, total):
    p, _ = params(tmp_path, train=train, mp=mp)
    w = next(build_input(p, "train", "bert", 3))["masked_lm_weights"]
    assert w.sum() == pytest.approx(total, rel=1e-6)


def test_wordpiece_vocab_file(tmp_path):
    f = tmp_path / "vocab.txt"
    f.write_text(
        "\n".join(
            [
                "[PAD]",
                "[unused0]",
                "[UNK]",
                "[CLS]",
                "[SEP]",
                "[MASK]",
                "def",
                "un",
                "##able",
                "(",
                ")",
                ":",
                "x",
                "##y",
            ]
        )
        + "\n"
    )
    vocab, index = read_vocab(f)
    assert (vocab.size, vocab.pad, vocab.cls, vocab.sep, vocab.mask) == (14, 0, 3, 4, 5)
    assert vocab.pool == (6, 14)  # random replacements never draw a special token
    assert wordpiece_ids("def Unable(xy):", index, True) == [6, 7, 8, 9, 12, 13, 10, 11]
    assert wordpiece_ids("zzz", index, True) == [2]  # [UNK]
    bad = tmp_path / "bad.txt"
    bad.write_text("a\nb\n")
    with pytest.raises(ConfigError, match="no \\[PAD\\] token"):
        read_vocab(bad)


def test_vocab_file_sets_the_vocab_size_and_a_missing_one_is_one_warning(tmp_path):
    f = tmp_path / "vocab.txt"
    f.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    p, warnings = params(tmp_path, train={"vocab_file": str(f)}, mp={"vocab_size": None})
    assert p["model"]["vocab_size"] == 7 and not warnings
    p, warnings = params(
        tmp_path, train={"vocab_file": str(tmp_path / "gone.txt")}, mp={"vocab_size": None}
    )
    assert p["model"]["vocab_size"] == 30522
    assert len(warnings) == 1 and "gone.txt is not there" in warnings[0]


def test_whole_word_masking_is_refused_in_one_sentence(tmp_path):
    p, _ = params(tmp_path, train={"whole_word_masking": True})
    with pytest.raises(ConfigError, match="whole_word_masking is not implemented"):
        build_input(p, "train", "bert", 3)


def test_classifier_labels_are_the_texts_indentation(tmp_path):
    assert indent_depth(np.frombuffer(b"def f():\n    x = 1\n        y\n", np.uint8)) == 1.0
    assert indent_depth(np.frombuffer(b"a\n\n  \nb", np.uint8)) == 0.0
    p, _ = params(tmp_path, model="bert_classifier", mp={"num_labels": 3})
    b = next(build_input(p, "train", "bert_classifier", 3))
    assert b["labels"].shape == (8,) and set(np.unique(b["labels"])) <= {0, 1, 2}
    for row, label in zip(b["input_ids"], b["labels"], strict=True):
        text = row[(row >= BYTE_OFFSET)] - BYTE_OFFSET  # the window without [CLS]/[SEP]
        depth = indent_depth(text)
        assert label == (0 if depth < 0.5 else 1 if depth < 1.5 else 2)
