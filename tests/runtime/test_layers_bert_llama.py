"""BERT's and LLaMA's layers: gradients against float64 finite differences (gradcheck.py), and
the fused paths bit for bit against the separate layers."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import check_layer
from threadpoolctl import threadpool_limits

from cs2sim.runtime.nn.attention import KeyPadding, SelfAttention
from cs2sim.runtime.nn.embedding import Embedding
from cs2sim.runtime.nn.encoder import (
    BertEmbedding,
    BertHead,
    ClassifierHead,
    EncoderBlock,
    MLMHead,
    NSPHead,
)
from cs2sim.runtime.nn.glu import GatedMLP
from cs2sim.runtime.nn.init import normal
from cs2sim.runtime.nn.rmsnorm import RMSNorm
from cs2sim.runtime.nn.rotary import Rotary
from cs2sim.runtime.nn.transformer import Block


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    with threadpool_limits(1):
        yield


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_rmsnorm_gradients() -> None:
    def make() -> RMSNorm:
        n = RMSNorm(6, eps=1e-6)
        n.p["weight"][:] = rng(3).uniform(0.5, 1.5, 6)
        return n

    check_layer(make, [(2, 3, 6)])


def test_rmsnorm_forward_is_x_over_rms() -> None:
    x = rng(1).standard_normal((4, 8)).astype(np.float32)
    y = RMSNorm(8, eps=1e-6).forward(x)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y, want, rtol=1e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_mlp_gradients(bias: bool) -> None:
    check_layer(lambda: GatedMLP(6, 5, rng(), bias, normal(0.5), normal(0.5)), [(2, 3, 6)])


def test_swiglu_forward_is_silu_gate_times_up() -> None:
    m = GatedMLP(4, 3, rng(), False, normal(0.5), normal(0.5))
    x = rng(2).standard_normal((5, 4)).astype(np.float32)
    w = m.fc.p["weight"].astype(np.float64)
    a, b = x @ w[:, :3], x @ w[:, 3:]
    want = (a / (1 + np.exp(-a)) * b) @ m.proj.p["weight"]
    np.testing.assert_allclose(m.forward(x), want, rtol=1e-5, atol=1e-6)


def padding_of(lengths: list[int], T: int) -> KeyPadding:
    """A KeyPadding with rows of the given real lengths, the rest padding."""
    p = KeyPadding()
    p.set(np.arange(T)[None] < np.array(lengths)[:, None])
    return p


@pytest.mark.parametrize("T", [5, 36])
@pytest.mark.parametrize("dropout", [0.0, 0.25], ids=["fused", "dropout"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_bidirectional_attention_gradients(T: int, dropout: float, padded: bool) -> None:
    B = 2 if padded else 1
    keep = rng(4).random((B, 2, T, T)) >= dropout

    def make() -> SelfAttention:
        a = SelfAttention(
            4,
            2,
            rng(),
            rng(9),
            dropout=dropout,
            init=normal(0.3),
            out_init=normal(0.3),
            causal=False,
            padding=padding_of([T - 2, 3], T) if padded else None,
        )
        if dropout:
            a.drop.fixed_mask = keep
        return a

    check_layer(make, [(B, T, 4)])


def test_padded_keys_change_nothing_at_real_positions() -> None:
    T = 8
    pad = padding_of([5, 8], T)
    a = SelfAttention(4, 2, rng(), causal=False, init=normal(0.5), out_init=normal(0.5))
    a.padding = pad
    x = rng(1).standard_normal((2, T, 4))
    dy = rng(2).standard_normal((2, T, 4))
    dy[0, 5:] = 0  # nothing downstream reads a padded position
    y0 = a.forward(x).copy()
    dx0 = a.backward(dy).copy()
    g0 = {k: g.copy() for k, g in a.grads().items()}
    x[0, 5:] = rng(3).standard_normal((3, 4)) * 10  # only the padding of row 0 changes
    a.zero_grad()
    y1 = a.forward(x).copy()
    dx1 = a.backward(dy).copy()
    np.testing.assert_allclose(y1[0, :5], y0[0, :5], rtol=0, atol=1e-12)
    np.testing.assert_allclose(y1[1], y0[1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(dx1[:, :5], dx0[:, :5], rtol=0, atol=1e-12)
    for k, g in a.grads().items():
        np.testing.assert_allclose(g, g0[k], rtol=0, atol=1e-12, err_msg=k)
    a.padding = None  # without the mask the real positions see the padding
    y2 = a.forward(x).copy()
    x[0, 5:] = 0
    assert np.abs(a.forward(x)[0, :5] - y2[0, :5]).max() > 1e-3


def test_bidirectional_attention_sees_the_future() -> None:
    a = SelfAttention(4, 2, rng(), causal=False, init=normal(0.5), out_init=normal(0.5))
    x = rng(1).standard_normal((1, 6, 4)).astype(np.float32)
    y0 = a.forward(x).copy()
    x[0, -1] += 1.0  # change only the last position
    assert not np.allclose(a.forward(x)[0, 0], y0[0, 0])  # the first position sees it
    c = SelfAttention(4, 2, rng(), init=normal(0.5), out_init=normal(0.5))  # causal
    y1 = c.forward(x).copy()
    x[0, -1] -= 1.0
    np.testing.assert_array_equal(c.forward(x)[0, :-1], y1[0, :-1])


@pytest.mark.parametrize("T", [5, 33])
def test_grouped_query_attention_gradients(T: int) -> None:
    check_layer(
        lambda: SelfAttention(
            8,
            4,
            rng(),
            init=normal(0.3),
            out_init=normal(0.3),
            kv_heads=2,
            qkv_bias=False,
            rotary_dim=2,
            max_positions=40,
            rotary_interleaved=False,
        ),
        [(1, T, 8)],
    )


def test_grouped_query_attention_equals_repeated_key_value_heads() -> None:
    """g key/value heads shared by nh/g query heads = full attention whose k, v weights repeat
    each group's columns."""
    gqa = SelfAttention(8, 4, rng(), kv_heads=2, init=normal(0.3), out_init=normal(0.3))
    full = SelfAttention(8, 4, rng(), init=normal(0.3), out_init=normal(0.3))
    w, b = gqa.qkv.p["weight"], gqa.qkv.p["bias"]
    hs, C = 2, 8
    for i in (1, 2):  # k, v: head j of the full layer reads group j // 2
        cols = [C + (i - 1) * 2 * hs + (j // 2) * hs + d for j in range(4) for d in range(hs)]
        full.qkv.p["weight"][:, i * C : (i + 1) * C] = w[:, cols]
        full.qkv.p["bias"][i * C : (i + 1) * C] = b[cols]
    full.qkv.p["weight"][:, :C], full.qkv.p["bias"][:C] = w[:, :C], b[:C]
    full.proj.p["weight"][:] = gqa.proj.p["weight"]
    x = rng(5).standard_normal((2, 7, 8)).astype(np.float32)
    np.testing.assert_allclose(gqa.forward(x), full.forward(x), rtol=1e-5, atol=1e-6)


def test_rotary_halves_rotate_first_with_second_half() -> None:
    r = Rotary(4, 8, interleaved=False)
    x = np.zeros((1, 2, 6), np.float32)
    x[0, 1, 0] = 1.0  # feature 0 at position 1 pairs with feature 2 (half of 4)
    y = r.rotate(x, out=np.empty_like(x))
    assert y[0, 1, 0] == pytest.approx(np.cos(1.0)) and y[0, 1, 2] == pytest.approx(np.sin(1.0))
    assert y[0, 1, 1] == 0 and y[0, 1, 3] == 0
    back = r.rotate(y, out=np.empty_like(y), inverse=True)
    np.testing.assert_allclose(back, x, atol=1e-6)


def test_segment_and_position_embeddings_gradients() -> None:
    ids = np.array([[0, 3, 3, 1], [6, 0, 3, 2]])
    seg = np.array([[0, 0, 1, 1], [0, 1, 1, 1]])

    def fwd(layer, xs):
        return layer.forward({"input_ids": ids, "token_type_ids": seg})

    def bwd(layer, w):
        layer.backward(w)
        return ()

    errs = check_layer(
        lambda: BertEmbedding(7, 5, rng(), rng(1), normal(1.0), max_positions=6, eps=1e-5),
        [],
        inputs=[ids],
        grad_inputs=[],
        forward=fwd,
        backward=bwd,
    )
    assert {"tte.weight", "wpe.weight", "wte.weight", "ln.weight"} <= set(errs)


@pytest.mark.parametrize("dropout", [0.0, 0.2], ids=["fused", "dropout"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_encoder_block_gradients(dropout: float, padded: bool) -> None:
    B = 2 if padded else 1

    def make() -> EncoderBlock:
        b = EncoderBlock(
            6,
            2,
            8,
            "gelu",
            rng(),
            rng(2),
            eps=1e-5,
            attn_dropout=dropout,
            resid_dropout=dropout,
            init=normal(0.4),
            out_init=normal(0.4),
            padding=padding_of([3, 5], 5) if padded else None,
        )
        for i, d in enumerate((b.attn.drop, b.drop_attn, b.drop_mlp)):
            if dropout:
                shape = (B, 2, 5, 5) if d is b.attn.drop else (B, 5, 6)
                d.fixed_mask = rng(10 + i).random(shape) >= dropout
        return b

    check_layer(make, [(B, 5, 6)])


def test_encoder_block_fused_path_is_bit_identical_to_the_layers() -> None:
    x = rng(3).standard_normal((2, 40, 16)).astype(np.float32)
    dy = rng(4).standard_normal((2, 40, 16)).astype(np.float32)
    out = {}
    for fused in (True, False):
        b = EncoderBlock(
            16, 2, 32, "gelu", rng(), rng(2), eps=1e-5, init=normal(0.3), out_init=normal(0.3)
        )
        b._fusable = lambda fused=fused: fused  # type: ignore[method-assign]
        y = b.forward(x).copy()
        dx = b.backward(dy).copy()
        out[fused] = (y, dx, {k: g.copy() for k, g in b.grads().items()})
    np.testing.assert_array_equal(out[True][0], out[False][0])
    np.testing.assert_array_equal(out[True][1], out[False][1])
    for k, g in out[True][2].items():
        np.testing.assert_array_equal(g, out[False][2][k], err_msg=k)


def test_llama_block_fused_path_is_bit_identical_to_the_layers() -> None:
    x = rng(3).standard_normal((2, 40, 16)).astype(np.float32)
    dy = rng(4).standard_normal((2, 40, 16)).astype(np.float32)
    out = {}
    for fused in (True, False):
        b = Block(
            16,
            4,
            24,
            "swiglu",
            rng(),
            rng(2),
            norm="rmsnorm",
            kv_heads=2,
            rotary_dim=4,
            max_positions=40,
            rotary_interleaved=False,
            qkv_bias=False,
            attn_out_bias=False,
            ffn_bias=False,
            init=normal(0.3),
            out_init=normal(0.3),
        )
        b._fusable = lambda fused=fused: fused  # type: ignore[method-assign]
        out[fused] = (
            b.forward(x).copy(),
            b.backward(dy).copy(),
            {k: g.copy() for k, g in b.grads().items()},
        )
    np.testing.assert_array_equal(out[True][0], out[False][0])
    np.testing.assert_array_equal(out[True][1], out[False][1])
    for k, g in out[True][2].items():
        np.testing.assert_array_equal(g, out[False][2][k], err_msg=k)


def test_llama_block_gradients() -> None:
    check_layer(
        lambda: Block(
            8,
            4,
            6,
            "swiglu",
            rng(),
            rng(2),
            norm="rmsnorm",
            kv_heads=2,
            rotary_dim=2,
            max_positions=8,
            rotary_interleaved=False,
            qkv_bias=False,
            attn_out_bias=False,
            ffn_bias=False,
            init=normal(0.4),
            out_init=normal(0.4),
        ),
        [(1, 5, 8)],
    )


def test_mlm_head_gradients_with_a_position_gathered_twice() -> None:
    positions = np.array([[1, 3, 0], [2, 2, 0]])  # row 1 gathers position 2 twice

    def fwd(layer, xs):
        return layer.forward(xs[0], positions)

    check_layer(
        lambda: MLMHead(
            5,
            7,
            rng(),
            act="gelu",
            eps=1e-5,
            tied_to=None,
            ffn_bias=True,
            out_bias=True,
            init=normal(0.5),
        ),
        [(2, 4, 5)],
        forward=fwd,
    )


def test_nsp_head_gradients() -> None:
    check_layer(lambda: NSPHead(5, rng(), init=normal(0.5)), [(3, 4, 5)])


@pytest.mark.parametrize("nsp", [True, False])
def test_bert_head_loss_gradients_tied_and_weighted(nsp: bool) -> None:
    labels = {
        "masked_lm_positions": np.array([[1, 3], [2, 0]]),
        "masked_lm_ids": np.array([[4, 1], [6, 0]]),
        "masked_lm_weights": np.array([[1.5, 0.5], [2.0, 0.0]]),
        "next_sentence_label": np.array([1, 0]),
    }

    class Head(BertHead):  # the tied embedding lives in the embedding block; own it here
        def __init__(self) -> None:
            emb = Embedding(7, 5, rng(), normal(1.0))
            mlm = MLMHead(
                5,
                7,
                rng(1),
                act="gelu",
                eps=1e-5,
                tied_to=emb,
                ffn_bias=True,
                out_bias=True,
                init=normal(0.5),
            )
            super().__init__(mlm, NSPHead(5, rng(2), init=normal(0.5)) if nsp else None)
            self.emb = emb

    def fwd(layer, xs):
        return layer.forward(xs[0], labels)

    errs = check_layer(Head, [(2, 4, 5)], forward=fwd)
    assert any(k.endswith("emb.weight") for k in errs)  # the tied table: its one gradient


def test_bert_head_padding_predictions_do_not_count() -> None:
    """A weight-0 prediction adds nothing to the loss or to any gradient."""
    h = rng(1).standard_normal((1, 4, 5)).astype(np.float32)
    base = {
        "masked_lm_positions": np.array([[1, 0]]),
        "masked_lm_ids": np.array([[4, 0]]),
        "masked_lm_weights": np.array([[1.0, 0.0]], np.float32),
        "next_sentence_label": np.array([1]),
    }
    other = dict(base, masked_lm_ids=np.array([[4, 6]]))
    losses = []
    for labels in (base, other):
        head = BertHead(
            MLMHead(
                5,
                7,
                rng(),
                act="gelu",
                eps=1e-5,
                tied_to=None,
                ffn_bias=True,
                out_bias=True,
                init=normal(0.5),
            ),
            NSPHead(5, rng(2), init=normal(0.5)),
        )
        losses.append((head.forward(h, labels), head.backward(1.0).copy()))
    assert losses[0][0] == losses[1][0]
    np.testing.assert_array_equal(losses[0][1], losses[1][1])


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["plain", "dropout"])
def test_classifier_head_gradients(dropout: float) -> None:
    labels = np.array([2, 0, 1])

    def make() -> ClassifierHead:
        h = ClassifierHead(5, 3, rng(), rng(1), init=normal(0.5), dropout=dropout)
        if dropout:
            h.drop.fixed_mask = rng(7).random((3, 5)) >= dropout
        return h

    check_layer(make, [(3, 4, 5)], forward=lambda layer, xs: layer.forward(xs[0], labels))
