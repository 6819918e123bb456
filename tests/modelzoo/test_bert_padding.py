"""BERT's padding as the Model Zoo's: the batch's attention_mask (PyTorch) or input_mask (TF)
reaches the encoder, so what the padded positions hold changes nothing at the real ones -- the
hidden states, the masked-LM logits, the loss and every gradient."""

from __future__ import annotations

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.tfrecord import encode_example, write_records
from cs2sim.runtime.modelzoo.bert.model import BertModel
from cs2sim.runtime.modelzoo.bert_classifier.model import BertClassifierModel
from cs2sim.runtime.nn.module import FP32
from cs2sim.system.errors import ConfigError

B, T, P, V = 3, 12, 4, 50
LENGTHS = np.array([5, 12, 8])  # row 1 has no padding
MODEL = {
    "vocab_size": V,
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_heads": 2,
    "filter_size": 32,
    "max_position_embeddings": T,
    "dropout_rate": 0.0,
}


def batch(mask_key: str = "attention_mask") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    mask = (np.arange(T)[None] < LENGTHS[:, None]).astype(np.int32)  # (B, T)
    return {
        "input_ids": np.where(mask, rng.integers(5, V, (B, T)), 0).astype(np.int32),
        "token_type_ids": (np.arange(T)[None] >= 3).astype(np.int32) * mask,
        mask_key: mask,
        "masked_lm_positions": np.array([[1, 2, 3, 0], [1, 5, 9, 11], [2, 4, 6, 7]], np.int32),
        "masked_lm_ids": rng.integers(5, V, (B, P)).astype(np.int32),
        "masked_lm_weights": np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]], np.float32),
        "next_sentence_label": np.array([0, 1, 0], np.int32),
        "labels": np.array([0, 1, 1], np.int32),  # the classifier's
    }


def repad(b: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """The same batch with other ids and segments at its padded positions only."""
    rng = np.random.default_rng(7)
    out = dict(b)
    pad = mask == 0
    out["input_ids"] = np.where(pad, rng.integers(0, V, (B, T)), b["input_ids"]).astype(np.int32)
    out["token_type_ids"] = np.where(pad, 1, b["token_type_ids"]).astype(np.int32)
    return out


def run(model, b: dict[str, np.ndarray]):
    """(hidden states (B, T, C), MLM logits or None, loss, gradients) of one step."""
    x, _ = model.inputs(b)
    for block in model.blocks[:-1]:
        x = block.forward(x)
    h = x.copy()
    model.zero_grad()
    loss = model.forward_loss(b)
    head = model.loss_head
    logits = head.mlm_ce.probs.copy() if hasattr(head, "mlm_ce") else None
    model.backward()
    return h, logits, loss, {k: g.copy() for k, g in model.grads().items()}


@pytest.mark.parametrize("mask_key", ["attention_mask", "input_mask"])
def test_padded_ids_change_nothing_at_real_positions(mask_key: str) -> None:
    model = BertModel(MODEL, FP32, 1)
    b = batch(mask_key)
    real = b[mask_key].astype(bool)
    h0, p0, l0, g0 = run(model, b)
    h1, p1, l1, g1 = run(model, repad(b, b[mask_key]))
    np.testing.assert_allclose(h1[real], h0[real], rtol=0, atol=1e-6)
    np.testing.assert_allclose(p1, p0, rtol=0, atol=1e-6)  # MLM probabilities
    assert l1 == pytest.approx(l0, abs=1e-6)
    for k, g in g0.items():
        np.testing.assert_allclose(g1[k], g, rtol=0, atol=1e-6, err_msg=k)
    # the same batch without its mask: real positions attend to the padding and change
    nomask = {k: v for k, v in repad(b, b[mask_key]).items() if k != mask_key}
    h2, *_ = run(model, nomask)
    assert np.abs(h2[real] - h0[real]).max() > 1e-3


def test_a_padded_row_equals_the_same_row_alone_at_its_length() -> None:
    model = BertModel(MODEL, FP32, 1)
    b = batch()
    h, *_ = run(model, b)
    n = int(LENGTHS[0])
    alone = {"input_ids": b["input_ids"][:1, :n], "token_type_ids": b["token_type_ids"][:1, :n]}
    x, _ = model.inputs(alone)
    for block in model.blocks[:-1]:
        x = block.forward(x)
    np.testing.assert_allclose(x[0], h[0, :n], rtol=0, atol=1e-5)


def test_classifier_ignores_padding_too() -> None:
    model = BertClassifierModel({**MODEL, "task_dropout": 0.0}, FP32, 1)
    b = batch()
    _, _, l0, g0 = run(model, b)
    _, _, l1, g1 = run(model, repad(b, b["attention_mask"]))
    assert l1 == pytest.approx(l0, abs=1e-6)
    for k, g in g0.items():
        np.testing.assert_allclose(g1[k], g, rtol=0, atol=1e-6, err_msg=k)


def test_a_mask_of_the_wrong_shape_is_refused() -> None:
    model = BertModel(MODEL, FP32, 1)
    b = batch()
    b["attention_mask"] = b["attention_mask"][:, :-1]
    with pytest.raises(ConfigError, match=r"attention mask has shape \(3, 11\) but its input_ids"):
        model.forward_loss(b)


def test_bert_tfrecords_bring_input_mask_to_the_encoder(tmp_path):
    """BertTfRecordsProcessor: the records' input_mask is in the batch, and two files that
    differ only in their padded ids train to the same loss."""
    losses = []
    for fill in (0, 9):
        d = tmp_path / f"pad{fill}"
        d.mkdir()
        recs = []
        for i in range(4):
            n = 6 + i
            ids = np.where(np.arange(T) < n, np.arange(T) % 40 + 5, fill)
            recs.append(
                encode_example(
                    {
                        "input_ids": ids,
                        "input_mask": (np.arange(T) < n).astype(np.int64),
                        "segment_ids": (np.arange(T) >= 3).astype(np.int64),
                        "masked_lm_positions": np.array([1, 2, 4, 0]),
                        "masked_lm_ids": np.array([7, 8, 9, 0]),
                        "masked_lm_weights": np.array([1.0, 1.0, 1.0, 0.0], np.float32),
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
            "model": {"vocab_size": V, "max_position_embeddings": T},
        }
        b = next(build_input(p, "train", "bert", 1))
        assert b["input_mask"].sum(axis=1).tolist() == [6, 7, 8, 9]
        losses.append(BertModel(MODEL, FP32, 1).forward_loss(b))
    assert losses[0] == pytest.approx(losses[1], abs=1e-6)
