"""Every layer: gradients against float64 finite differences, forward against plain numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gradcheck import check_layer
from threadpoolctl import threadpool_limits

from cs2sim.runtime.nn import embedding as embedding_mod
from cs2sim.runtime.nn.activations import ACTIVATIONS, Activation
from cs2sim.runtime.nn.attention import CausalSelfAttention
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.embedding import (
    Embedding,
    LearnedPositions,
    TiedProjection,
    scatter_add_rows,
)
from cs2sim.runtime.nn.init import normal
from cs2sim.runtime.nn.layernorm import LayerNorm
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.module import Module
from cs2sim.runtime.nn.rotary import Rotary
from cs2sim.runtime.nn.transformer import Block, LMEmbedding, LMHead
from cs2sim.runtime.numerics.precision import Policy, round_to


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    """Tiny matmuls: extra BLAS threads only add wake-up latency (50x on a busy 2-core host)."""
    with threadpool_limits(1):
        yield


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# gradient checks
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_dense_gradients(bias: bool) -> None:
    check_layer(lambda: Dense(5, 4, rng(), bias=bias, init=normal(0.5)), [(2, 3, 5)])


def test_dense_without_dx_still_gives_weight_gradients() -> None:
    errs = check_layer(lambda: Dense(5, 4, rng(), needs_dx=False), [(3, 5)], grad_inputs=[])
    assert set(errs) == {"weight", "bias"}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_gradients(name: str) -> None:
    check_layer(lambda: Activation(name), [(4, 6)])


def test_dropout_gradients_with_a_fixed_mask() -> None:
    keep = rng(1).random((4, 6)) >= 0.3

    def make() -> Dropout:
        d = Dropout(0.3, rng())
        d.fixed_mask = keep
        return d

    check_layer(make, [(4, 6)])


def test_embedding_gradients_with_repeated_ids() -> None:
    ids = np.array([[0, 3, 3, 1], [6, 0, 3, 2]])
    check_layer(
        lambda: Embedding(7, 5, rng(), normal(1.0)),
        [],
        inputs=[ids],
        grad_inputs=[],
        backward=lambda layer, w: layer.backward(w) or (),
    )


def test_learned_positions_gradients() -> None:
    def make() -> Module:
        class Pos(Module):  # x (B, T, C) + P[:T]
            def __init__(self) -> None:
                super().__init__()
                self.pos = LearnedPositions(8, 3, rng(), normal(1.0))

            def forward(self, x: np.ndarray) -> np.ndarray:
                return x + self.pos.forward(x.shape[1])

            def backward(self, dy: np.ndarray) -> np.ndarray:
                self.pos.backward(dy)
                return dy

        return Pos()

    check_layer(make, [(2, 5, 3)])


@pytest.mark.parametrize("bias", [False, True])
def test_tied_projection_gradients(bias: bool) -> None:
    check_layer(lambda: TiedProjection(Embedding(7, 5, rng(), normal(1.0)), bias=bias), [(2, 3, 5)])


def test_tied_embedding_and_projection_accumulate_into_one_gradient() -> None:
    class EmbedProject(Module):  # logits = E[ids] @ E.T: both uses of E feed one gradient
        def __init__(self) -> None:
            super().__init__()
            self.emb = Embedding(6, 4, rng(), normal(1.0))
            self.out = TiedProjection(self.emb)

        def forward(self, ids: np.ndarray) -> np.ndarray:
            return self.out.forward(self.emb.forward(ids))

        def backward(self, dy: np.ndarray) -> tuple:
            self.emb.backward(self.out.backward(dy))
            return ()

    m = EmbedProject()
    assert list(m.parameters()) == ["emb.weight"]  # one array, listed once
    assert m.out.emb.p["weight"] is m.emb.p["weight"]
    errs = check_layer(EmbedProject, [], inputs=[np.array([[1, 5, 1], [0, 2, 3]])], grad_inputs=[])
    assert set(errs) == {"emb.weight"}


def test_layernorm_gradients() -> None:
    def make() -> LayerNorm:
        ln = LayerNorm(6, eps=1e-5)
        ln.p["weight"][:] = rng(2).uniform(0.5, 1.5, 6)  # non-trivial gain and shift
        ln.p["bias"][:] = rng(3).standard_normal(6)
        return ln

    check_layer(make, [(2, 3, 6)])


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"rotary_dim": 4},
        {"rotary_dim": 6, "qkv_bias": False, "out_bias": False},
        {"scaled": False},
    ],
    ids=["plain", "rotary", "rotary-partial-nobias", "dot_product"],
)
def test_attention_gradients(kwargs: dict) -> None:
    check_layer(
        lambda: CausalSelfAttention(12, 2, rng(), init=normal(0.3), out_init=normal(0.3), **kwargs),
        [(2, 5, 12)],
    )


@pytest.mark.parametrize("T", [33, 36])
@pytest.mark.parametrize("dropout", [0.0, 0.25], ids=["fused", "dropout"])
def test_attention_gradients_on_causal_parts(T: int, dropout: float) -> None:
    """From T = 32 the first half of the queries is computed against the first half of the keys
    only (CausalSelfAttention.parts): the gradients still match finite differences."""
    assert len(CausalSelfAttention(4, 2, rng()).parts(T)) == 2
    keep = rng(4).random((1, 2, T, T)) >= dropout

    def make() -> CausalSelfAttention:
        a = CausalSelfAttention(
            4, 2, rng(), rng(9), dropout=dropout, init=normal(0.3), out_init=normal(0.3)
        )
        if dropout:
            a.drop.fixed_mask = keep
        return a

    check_layer(make, [(1, T, 4)])


def test_attention_gradients_with_attention_dropout() -> None:
    keep = rng(4).random((2, 2, 5, 5)) >= 0.25

    def make() -> CausalSelfAttention:
        a = CausalSelfAttention(
            8, 2, rng(), rng(9), dropout=0.25, init=normal(0.3), out_init=normal(0.3)
        )
        a.drop.fixed_mask = keep
        return a

    check_layer(make, [(2, 5, 8)])


def test_softmax_cross_entropy_gradients() -> None:
    labels = np.array([[1, 0, 4], [2, 2, 3]])
    check_layer(
        SoftmaxCrossEntropy,
        [(2, 3, 5)],
        forward=lambda layer, xs: layer.forward(xs[0], labels),
        backward=lambda layer, w: layer.backward(w),
    )


@pytest.mark.parametrize(
    "parallel,untied", [(False, False), (True, False), (True, True)], ids=["gpt2", "gptj", "neox"]
)
def test_transformer_block_gradients(parallel: bool, untied: bool) -> None:
    def make() -> Block:
        return Block(
            8,
            2,
            12,
            "gelu",
            rng(),
            rng(1),
            parallel=parallel,
            untied_ln=untied,
            rotary_dim=2 if parallel else 0,
            init=normal(0.3),
            out_init=normal(0.3),
        )

    check_layer(make, [(2, 4, 8)])


def test_lm_embedding_and_head_gradients() -> None:
    ids, labels = np.array([[1, 2, 2], [0, 4, 1]]), np.array([[2, 2, 3], [4, 1, 0]])
    check_layer(
        lambda: LMEmbedding(5, 4, rng(), rng(1), normal(0.5), max_positions=6),
        [],
        inputs=[ids],
        grad_inputs=[],
        backward=lambda layer, w: layer.backward(w) or (),
    )
    for tied in (True, False):
        emb = Embedding(5, 4, rng(), normal(0.5))
        check_layer(
            lambda emb=emb, tied=tied: LMHead(
                4,
                5,
                rng(),
                eps=1e-5,
                tied_to=emb if tied else None,
                bias=not tied,
                init=normal(0.5),
            ),
            [(2, 3, 4)],
            forward=lambda layer, xs: layer.forward(xs[0], labels),
        )


# ---------------------------------------------------------------------------------------------
# forward against plain numpy
# ---------------------------------------------------------------------------------------------
def test_dense_forward_is_x_at_w_plus_b() -> None:
    d = Dense(5, 3, rng())
    d.p["bias"][:] = [1.0, -2.0, 0.5]
    x = rng(1).standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(d.forward(x), x @ d.p["weight"] + d.p["bias"], rtol=1e-6)


def test_activation_forwards_match_formulas() -> None:
    x = np.linspace(-3, 3, 13).astype(np.float32)
    a, s = 1.6732632423543772, 1.0507009873554805
    gelu_tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    expected = {
        "relu": np.maximum(x, 0),
        "tanh": np.tanh(x),
        "linear": x,
        "identity": x,
        "elu": np.where(x > 0, x, np.exp(x) - 1),
        "selu": s * np.where(x > 0, x, a * (np.exp(x) - 1)),
        "gelu": gelu_tanh,
        "gelu_new": gelu_tanh,
    }
    assert set(expected) == set(ACTIVATIONS)
    for name, want in expected.items():
        np.testing.assert_allclose(
            Activation(name).forward(x.copy()), want, rtol=1e-5, atol=1e-6, err_msg=name
        )
    # the tanh approximation stays within 1e-3 of the exact erf GELU
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert np.max(np.abs(gelu_tanh - exact)) < 1e-3


def test_layernorm_forward_matches_formula() -> None:
    x = rng().standard_normal((3, 7)).astype(np.float32) * 3 + 1
    ln = LayerNorm(7, eps=1e-5)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln.forward(x), want, rtol=1e-5, atol=1e-5)


def naive_attention(x: np.ndarray, a: CausalSelfAttention) -> np.ndarray:
    """Per sample, per head, per query position: the textbook loops."""
    B, T, C = x.shape
    nh, hs = a.nh, a.hs
    qkv = x @ a.qkv.p["weight"] + a.qkv.p.get("bias", 0)
    out = np.zeros((B, T, C))
    for b in range(B):
        for h in range(nh):
            q = qkv[b, :, h * hs : (h + 1) * hs].astype(np.float64)
            k = qkv[b, :, C + h * hs : C + (h + 1) * hs].astype(np.float64)
            v = qkv[b, :, 2 * C + h * hs : 2 * C + (h + 1) * hs]
            if a.rotary is not None:
                q, k = rotate_naive(q, a.rotary.dim), rotate_naive(k, a.rotary.dim)
            for t in range(T):
                s = np.array([q[t] @ k[j] for j in range(t + 1)]) * a.scale
                p = np.exp(s - s.max())
                p /= p.sum()
                out[b, t, h * hs : (h + 1) * hs] = p @ v[: t + 1]
    return out @ a.proj.p["weight"] + a.proj.p.get("bias", 0)


def rotate_naive(x: np.ndarray, rd: int) -> np.ndarray:
    """GPT-J rotary as complex multiplication: pair i of position t times exp(i t theta_i)."""
    T = x.shape[0]
    theta = 10000.0 ** (-np.arange(0, rd, 2) / rd)
    z = x[:, 0:rd:2] + 1j * x[:, 1:rd:2]
    z = z * np.exp(1j * np.arange(T)[:, None] * theta)
    y = x.copy()
    y[:, 0:rd:2], y[:, 1:rd:2] = z.real, z.imag
    return y


@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_attention_forward_matches_naive_loops(rotary_dim: int) -> None:
    a = CausalSelfAttention(
        16, 2, rng(), rotary_dim=rotary_dim, init=normal(0.3), out_init=normal(0.3)
    )
    x = rng(1).standard_normal((2, 6, 16)).astype(np.float32)
    np.testing.assert_allclose(a.forward(x), naive_attention(x, a), rtol=1e-4, atol=1e-5)


def test_attention_is_causal() -> None:
    a = CausalSelfAttention(8, 2, rng(), init=normal(0.3))
    x = rng(1).standard_normal((1, 6, 8)).astype(np.float32)
    y1 = a.forward(x).copy()
    x[:, 4:] += 10.0  # change the future
    y2 = a.forward(x)
    np.testing.assert_array_equal(y1[:, :4], y2[:, :4])
    assert not np.allclose(y1[:, 4:], y2[:, 4:])


def test_rotary_is_a_rotation_and_its_inverse_undoes_it() -> None:
    r = Rotary(4, 16)
    x = rng().standard_normal((2, 3, 10, 6)).astype(np.float32)
    y = r.rotate(x, out=np.empty_like(x))
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    np.testing.assert_array_equal(y[..., 4:], x[..., 4:])  # features past rotary_dim untouched
    np.testing.assert_array_equal(y[..., 0, :], x[..., 0, :])  # position 0: angle 0
    np.testing.assert_allclose(r.rotate(y, out=y, inverse=True), x, atol=1e-5)
    # relative positions: q_t . k_s depends on t - s only
    q, k = rng(1).standard_normal(4), rng(2).standard_normal(4)
    Q = r.rotate(np.tile(q, (16, 1)).astype(np.float32), out=np.empty((16, 4), np.float32))
    K = r.rotate(np.tile(k, (16, 1)).astype(np.float32), out=np.empty((16, 4), np.float32))
    assert abs(Q[5] @ K[3] - Q[9] @ K[7]) < 1e-4


def test_softmax_cross_entropy_forward_and_stability() -> None:
    z = rng().standard_normal((4, 5)).astype(np.float32)
    y = np.array([0, 4, 2, 2])
    ce = SoftmaxCrossEntropy()
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert ce.forward(z, y) == pytest.approx(-logp[np.arange(4), y].mean(), rel=1e-6)
    assert ce.forward(z, y, scale=1.0) == pytest.approx(-logp[np.arange(4), y].sum(), rel=1e-6)
    big = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)  # exp would overflow unshifted
    assert ce.forward(big, np.array([1])) == pytest.approx(1000.0)
    assert np.isfinite(ce.backward()).all()


def test_embedding_forward_gathers_rows_and_both_scatter_paths_match_add_at(monkeypatch) -> None:
    e = Embedding(50, 4, rng(), normal(1.0))
    ids = rng(1).integers(0, 50, (3, 7))
    np.testing.assert_array_equal(e.forward(ids), e.p["weight"][ids])
    rows = rng(2).standard_normal((21, 4)).astype(np.float32)
    for flat in (
        ids.reshape(-1),
        np.arange(21)[::-1],
        np.full(21, 3),
    ):  # mixed, all distinct, one id
        want = np.zeros((50, 4), np.float32)
        np.add.at(want, flat, rows)
        for limit in (1024, 0):  # one-hot matmul, then sort + reduceat
            monkeypatch.setattr(embedding_mod, "ONE_HOT_MAX_ROWS", limit)
            got = np.zeros((50, 4), np.float32)
            scatter_add_rows(got, flat, rows)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_dropout_is_inverted_seeded_and_off_in_eval() -> None:
    x = np.ones((200, 100), np.float32)
    d1, d2 = Dropout(0.25, rng(5)), Dropout(0.25, rng(5))
    y = d1.forward(x)
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert abs((y == 0).mean() - 0.25) < 0.01 and abs(y.mean() - 1.0) < 0.02
    np.testing.assert_array_equal(y, d2.forward(x))  # same seed, same mask
    np.testing.assert_array_equal(d1.backward(x), y)  # the same mask and scale going back
    d1.eval()
    assert d1.forward(x) is x and d1.backward(x) is x


# ---------------------------------------------------------------------------------------------
# mixed precision and the module base
# ---------------------------------------------------------------------------------------------
def representable(a: np.ndarray, fmt: str) -> bool:
    return bool(np.array_equal(round_to(a, fmt), a))


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "cbfloat16"])
def test_dense_rounds_outputs_and_gradients_but_not_the_master(fmt: str) -> None:
    d = Dense(6, 5, rng(), policy=Policy(fmt))
    master = d.p["weight"].copy()
    x = rng(1).standard_normal((4, 6)).astype(np.float32)
    y = d.forward(x)
    dx = d.backward(rng(2).standard_normal((4, 5)).astype(np.float32))
    assert representable(y, fmt) and representable(dx, fmt)
    assert representable(d.g["weight"], fmt)
    np.testing.assert_array_equal(d.p["weight"], master)  # the fp32 master is untouched
    assert not representable(master, fmt)  # ...and really is fp32
    np.testing.assert_allclose(y, x @ master + d.p["bias"], rtol=2e-2, atol=2e-2)


def test_fp32_policy_copies_nothing() -> None:
    d = Dense(6, 5, rng())
    d.forward(rng(1).standard_normal((2, 6)).astype(np.float32))
    assert d.w is d.p["weight"]


def test_module_names_modes_and_zero_grad() -> None:
    b = Block(8, 2, 16, "gelu", rng(), rng(1), resid_dropout=0.1)
    names = list(b.parameters())
    assert names[:4] == ["ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias"]
    assert list(b.grads()) == names
    assert all(b.grads()[k].shape == v.shape for k, v in b.parameters().items())
    b.eval()
    assert not b.drop_attn.training and not b.attn.drop.training
    b.train()
    assert b.drop_mlp.training
    b.forward(rng(2).standard_normal((1, 3, 8)).astype(np.float32))
    b.backward(np.ones((1, 3, 8), np.float32))
    assert any(np.abs(g).sum() > 0 for g in b.grads().values())
    b.zero_grad()
    assert all(np.abs(g).sum() == 0 for g in b.grads().values())


# ---------------------------------------------------------------------------------------------
# kernels split over the worker threads: the same bits whatever the thread count
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def workers_of():
    """Set the runtime's worker count inside a test; restored afterwards."""
    from cs2sim.runtime import threads

    yield threads.set_workers
    threads.set_workers(threads.available_cores())


@pytest.mark.parametrize(
    "shape", [(1024, 256, 768), (256, 1024, 256), (256, 64, 3000), (300, 256, 10), (5, 7, 3)]
)
def test_parallel_gemm_is_one_threads_matmul_bit_for_bit(shape, workers_of) -> None:
    from cs2sim.runtime.nn.parallel import gemm

    M, K, N = shape
    a = rng(1).standard_normal((M, K), dtype=np.float32)
    b = rng(2).standard_normal((K, N), dtype=np.float32)
    ref = np.matmul(a, b)  # one BLAS thread (the module's fixture)
    for n in (1, 2, 3):
        workers_of(n)
        out = np.full((M, N), np.nan, np.float32)
        assert np.array_equal(gemm(a, b, out), ref)
        out_t = np.full((N, M), np.nan, np.float32)  # transposed operands, as backward uses
        assert np.array_equal(gemm(b.T, a.T, out_t), np.matmul(b.T, a.T))


def test_row_bounds_cover_the_rows_once() -> None:
    from cs2sim.runtime.nn.parallel import row_bounds

    for n, chunks, align in [(1024, 8, 8), (1000, 7, 8), (3, 5, 1), (50257, 13, 16)]:
        b = row_bounds(n, chunks, align)
        assert b[0] == 0 and b[-1] == n and all(x < y for x, y in zip(b, b[1:], strict=False))
        assert all(x % align == 0 for x in b[:-1])


def _step_outputs(make, xs, workers_of, n):
    workers_of(n)
    layer = make()
    y = np.array(layer.forward(*xs), copy=True)
    w = rng(9).standard_normal(y.shape).astype(np.float32) if y.ndim else 1.0
    dx = layer.backward(w) if y.ndim else layer.backward(1.0)
    grads = {k: v.copy() for k, v in layer.grads().items()}
    return y, np.array(dx, copy=True), grads


@pytest.mark.parametrize("kind", ["gelu", "layernorm", "attention", "attention_dropout", "ce"])
def test_split_kernels_give_the_same_bits_on_one_or_several_threads(kind, workers_of) -> None:
    x = rng(3).standard_normal((8, 128, 96), dtype=np.float32)  # 32 (T, T) problems: 8 blocks
    xs = [x]
    if kind == "gelu":
        make = lambda: Activation("gelu")  # noqa: E731
        xs = [rng(3).standard_normal((512, 1024), dtype=np.float32)]  # several row blocks
    elif kind == "layernorm":
        make = lambda: LayerNorm(96)  # noqa: E731
        xs = [rng(3).standard_normal((4096, 96), dtype=np.float32)]
    elif kind.startswith("attention"):
        rate = 0.2 if kind.endswith("dropout") else 0.0
        make = lambda: CausalSelfAttention(96, 4, rng(4), rng(5), dropout=rate)  # noqa: E731
    else:
        make = SoftmaxCrossEntropy
        xs = [rng(3).standard_normal((64, 3000), dtype=np.float32), rng(4).integers(0, 3000, 64)]
    one = _step_outputs(make, xs, workers_of, 1)
    for n in (2, 3):
        many = _step_outputs(make, xs, workers_of, n)
        assert np.array_equal(one[0], many[0]) and np.array_equal(one[1], many[1])
        assert one[2].keys() == many[2].keys()
        assert all(np.array_equal(one[2][k], many[2][k]) for k in one[2])


def test_gemms_with_epilogues_run_each_block_once(workers_of) -> None:
    """Several products in one pass over the threads: every output is the plain matmul, and each
    product's epilogue sees every element of its output exactly once, in blocks of it."""
    from cs2sim.runtime.nn.parallel import gemms

    shapes = [(1024, 256, 768), (256, 1024, 256), (7, 5, 3)]
    ops = [
        (
            rng(i).standard_normal((M, K), dtype=np.float32),
            rng(i + 10).standard_normal((K, N), dtype=np.float32),
        )
        for i, (M, K, N) in enumerate(shapes)
    ]
    for n in (1, 2, 3):
        workers_of(n)
        outs = [np.full((a.shape[0], b.shape[1]), np.nan, np.float32) for a, b in ops]
        seen = [np.zeros(o.shape, np.int64) for o in outs]

        def mark(out, count):
            def epilogue(blk, rows, cols):
                assert np.shares_memory(blk, out) and blk.shape == out[rows, cols].shape
                count[rows, cols] += 1
                blk *= 2.0  # an epilogue may change its block in place

            return epilogue

        gemms([(a, b, o, mark(o, s)) for (a, b), o, s in zip(ops, outs, seen, strict=True)])
        for (a, b), o, s in zip(ops, outs, seen, strict=True):
            assert np.array_equal(o, 2.0 * np.matmul(a, b)) and (s == 1).all()


@pytest.mark.parametrize("half", ["float32", "cbfloat16"])
def test_mlp_with_gelu_fused_into_its_products_matches_the_unfused_layers(half, monkeypatch):
    """GELU run on the blocks of the fc product (and its backward on proj's dx blocks) gives the
    same bits as the separate layers, outputs and every gradient, in fp32 and mixed precision."""
    from cs2sim.runtime.nn.transformer import MLP

    x = rng(3).standard_normal((4, 64, 96), dtype=np.float32)
    dy = rng(4).standard_normal((4, 64, 96), dtype=np.float32)

    def run(fused: bool):
        monkeypatch.setattr(Activation, "fusable", property(lambda self: fused))
        mlp = MLP(96, 384, "gelu", rng(5), True, normal(0.3), normal(0.3), Policy(half))
        y = mlp.forward(x).copy()
        dx = mlp.backward(dy).copy()
        return y, dx, {k: v.copy() for k, v in mlp.grads().items()}

    fused, plain = run(True), run(False)
    assert np.array_equal(fused[0], plain[0]) and np.array_equal(fused[1], plain[1])
    assert fused[2].keys() == plain[2].keys()
    assert all(np.array_equal(fused[2][k], plain[2][k]) for k in plain[2])
    assert not np.array_equal(plain[1], np.zeros_like(plain[1]))  # the check compares something


@pytest.mark.parametrize("half", ["float32", "cbfloat16"])
def test_block_with_layer_norms_inside_the_products_matches_the_separate_layers(
    half, monkeypatch, workers_of
):
    """GPT-2's block runs its residual adds and layer norms on the row blocks of the products
    before them: outputs and every gradient are the bits of the separate layers, on 1 or 2
    threads (2 row blocks here)."""
    x = rng(3).standard_normal((4, 128, 128), dtype=np.float32)
    dy = rng(4).standard_normal((4, 128, 128), dtype=np.float32)

    def run(fused: bool, n: int):
        workers_of(n)
        monkeypatch.setattr(Block, "_fusable", lambda self: fused)
        b = Block(
            128,
            4,
            512,
            "gelu",
            rng(5),
            rng(6),
            init=normal(0.1),
            out_init=normal(0.1),
            policy=Policy(half),
        )
        y = b.forward(x).copy()
        dx = b.backward(dy).copy()
        return y, dx, {k: v.copy() for k, v in b.grads().items()}

    plain = run(False, 1)
    for n in (1, 2):
        fused = run(True, n)
        assert np.array_equal(fused[0], plain[0]) and np.array_equal(fused[1], plain[1])
        assert all(np.array_equal(fused[2][k], plain[2][k]) for k in plain[2])
    assert np.abs(plain[2]["ln_2.weight"]).sum() > 0  # the layer norms' gradients are compared
