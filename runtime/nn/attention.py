"""Multi-head self-attention: fused qkv, optional rotary, causal or bidirectional softmax, output.

Causal (GPT-2, GPT-J, LLaMA: each position sees itself and the positions before it) or
bidirectional (BERT's encoder: every position sees every position). A batch with padding (BERT's
attention_mask / input_mask) also hides its padded keys from every query, as the Model Zoo's
BERT does (make_key_padding_mask_broadcastable adds -inf to their scores; here -1e9, the same
for any row with a real key): their probabilities are exactly 0, so a real
position's output, and every gradient reaching a real position, does not depend on what the
padded positions hold (KeyPadding, shared by the attention layers of one model).

Grouped-query attention (LLaMA-2 70B's `num_kv_groups`): the qkv projection makes nh query heads
but only g key and value heads; query head j reads key/value head j // (nh / g). The g heads are
repeated into the per-head buffer after the projection (their gradients summed back before it),
so the score and value products below are the same for every form.

All heads and samples go through batched matmuls on (B, nh, T, hs) arrays: no Python loop over
batch or heads. The B * nh independent (sample, head) problems are split into groups that the
runtime's worker threads take in turn (parallel.for_rows), each group's scores, softmax and
products done while its (g, T, T) block is in cache. numpy only hands a stacked matmul to BLAS
when each matrix is contiguous, so the heads are copied once into a (3, B, nh, T, hs) buffer
rather than used as strided views (about 15x slower here). The 1/sqrt(hs) scale is folded into
q (T*hs multiplies instead of T*T).

Causal skipping: the first half of the queries attends only to the first half of the keys, so
the scores, the softmax and every product run on two parts, queries [0, T/2) against keys
[0, T/2) and queries [T/2, T) against all keys: 3/4 of the T x T work (measured: 1.19x faster
forward). The score buffer's block [0, T/2) x [T/2, T) is never computed or read (its
probabilities are 0); it is kept at 0 for the dropout path, which masks the whole array.
"""

from __future__ import annotations

import math

import numpy as np

from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.init import GPT_INIT, Init
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import Epilogue, for_rows
from cs2sim.runtime.nn.rotary import Rotary
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["SelfAttention", "CausalSelfAttention", "KeyPadding"]

# Added to the score of a padded key. Finite, so a row whose keys are all padding stays a
# uniform softmax instead of NaN; exp(-1e9 - max) is exactly 0 in float32 and float64.
PADDED_SCORE = -1.0e9


class KeyPadding:
    """Which keys of the current batch are real, for the attention layers of one model: the
    embedding block sets it from the batch, each attention layer reads it in its forward (one
    object they share; a replica's deep copy shares its own copy)."""

    def __init__(self) -> None:
        self.real: np.ndarray | None = None  # (B, T) bool; None: no padding in the batch

    def set(self, mask: np.ndarray | None) -> None:
        """mask (B, T): nonzero at real tokens (attention_mask / input_mask), or None."""
        real = None if mask is None else np.asarray(mask) != 0
        self.real = None if real is None or bool(real.all()) else real

    def bias(self, heads: int, dtype: np.dtype) -> np.ndarray | None:
        """(B * heads, 1, T) additive score mask: 0 at real keys, PADDED_SCORE at padding."""
        if self.real is None:
            return None
        B, T = self.real.shape
        b = np.where(self.real, 0.0, PADDED_SCORE).astype(dtype)  # (B, T)
        return np.repeat(b[:, None, None, :], heads, axis=1).reshape(B * heads, 1, T)


class SelfAttention(Module):
    """x (B, T, C) -> (B, T, C): causal (each position attends to itself and the positions
    before it) unless `causal` is False (every position attends to all)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        rng: np.random.Generator,
        drop_rng: np.random.Generator | None = None,
        qkv_bias: bool = True,
        out_bias: bool = True,
        rotary_dim: int = 0,
        max_positions: int = 1024,
        dropout: float = 0.0,
        scaled: bool = True,
        init: Init = GPT_INIT,
        out_init: Init = GPT_INIT,
        policy: Policy = FP32,
        causal: bool = True,
        kv_heads: int | None = None,
        rotary_interleaved: bool = True,
        padding: KeyPadding | None = None,
    ) -> None:
        super().__init__(policy)
        self.padding = padding  # the batch's padded keys (None: the model never pads)
        if dim % num_heads:
            raise ValueError(f"hidden size {dim} is not divisible by {num_heads} heads")
        self.dim, self.nh, self.hs = dim, num_heads, dim // num_heads
        self.causal = causal
        self.kv = kv_heads or num_heads  # key/value heads (grouped-query attention: fewer)
        if num_heads % self.kv:
            raise ValueError(f"{num_heads} heads cannot share {self.kv} key/value groups evenly")
        if rotary_dim > self.hs:
            raise ValueError(f"rotary_dim {rotary_dim} exceeds the head size {self.hs}")
        # fused q, k, v projection; output projection; dropout on the attention probabilities
        kv_width = 2 * self.kv * self.hs
        self.qkv = Dense(dim, dim + kv_width, rng, bias=qkv_bias, init=init, policy=policy)
        self.proj = Dense(dim, dim, rng, bias=out_bias, init=out_init, policy=policy)
        self.drop = Dropout(dropout, drop_rng or np.random.default_rng(0), policy)
        self.rotary = (
            Rotary(rotary_dim, max_positions, interleaved=rotary_interleaved)
            if rotary_dim
            else None
        )
        # attention_type "scaled_dot_product" divides the scores by sqrt(hs); "dot_product" not
        self.scale = 1.0 / math.sqrt(self.hs) if scaled else 1.0
        self._masks: dict[int, np.ndarray] = {}

    def parts(self, T: int) -> list[tuple[slice, int]]:
        """(query rows, keys they see) of the causal parts: queries [0, T/2) see keys [0, T/2),
        the rest see all T keys (one part for short sequences or bidirectional attention)."""
        if T < 32 or not self.causal:
            return [(slice(0, T), T)]
        h = T // 2
        return [(slice(0, h), h), (slice(h, T), T)]

    def mask(self, T: int) -> np.ndarray | None:
        """(T, T) additive causal mask: 0 on and below the diagonal, -inf above (None when
        bidirectional)."""
        if not self.causal:
            return None
        if T not in self._masks:
            self._masks[T] = np.triu(np.full((T, T), -np.inf, dtype=np.float32), k=1)
        return self._masks[T]

    def _split_heads(self, qkv: np.ndarray, heads: np.ndarray) -> None:
        """qkv (B, T, C + 2 g hs) -> heads (3, B, nh, T, hs), the g key/value heads repeated."""
        B, T, _ = qkv.shape
        nh, hs, g = self.nh, self.hs, self.kv
        if g == nh:
            np.copyto(heads, qkv.reshape(B, T, 3, nh, hs).transpose(2, 0, 3, 1, 4))
            return
        C, r = nh * hs, nh // g
        np.copyto(heads[0], qkv[..., :C].reshape(B, T, nh, hs).transpose(0, 2, 1, 3))
        for i in (1, 2):  # k, v: (B, T, g, hs) -> each of the r query heads of a group
            part = qkv[..., C + (i - 1) * g * hs : C + i * g * hs].reshape(B, T, g, hs)
            np.copyto(heads[i].reshape(B, g, r, T, hs), part.transpose(0, 2, 1, 3)[:, :, None])

    def _merge_heads(self, dheads: np.ndarray, dqkv: np.ndarray) -> None:
        """dheads (3, B, nh, T, hs) -> dqkv (B, T, C + 2 g hs), a group's heads summed."""
        _, B, nh, T, hs = dheads.shape
        g = self.kv
        if g == nh:
            np.copyto(dqkv.reshape(B, T, 3, nh, hs), dheads.transpose(1, 3, 0, 2, 4))
            return
        C, r = nh * hs, nh // g
        np.copyto(dqkv[..., :C].reshape(B, T, nh, hs), dheads[0].transpose(0, 2, 1, 3))
        for i in (1, 2):
            summed = dheads[i].reshape(B, g, r, T, hs).sum(axis=2)  # (B, g, T, hs)
            np.copyto(
                dqkv[..., C + (i - 1) * g * hs : C + i * g * hs].reshape(B, T, g, hs),
                summed.transpose(0, 2, 1, 3),
            )

    def forward(self, x: np.ndarray, epilogue: Epilogue | None = None) -> np.ndarray:
        """x (B, T, C) -> (B, T, C); `epilogue` runs on each block of the output projection's
        product (parallel.gemms), e.g. the block's residual add and next layer norm."""
        B, T, C = x.shape  # batch, sequence length, embedding dimensionality
        nh, hs = self.nh, self.hs
        G = B * nh  # independent (sample, head) attention problems
        # 1) project to q, k, v for all heads and move the heads next to the batch dim
        qkv = self.qkv.forward(x)  # (B, T, 3C)
        heads = self.buf("heads", (3, B, nh, T, hs), qkv.dtype)  # (3, B, nh, T, hs)
        self._split_heads(qkv, heads)
        q, k, v = heads  # each (B, nh, T, hs), contiguous
        # 2) rotary position embedding on q and k (GPT-J), then the 1/sqrt(hs) scale on q
        if self.rotary is not None:
            self.rotary.rotate(q, out=q)
            self.rotary.rotate(k, out=k)
        q *= self.scale
        att = self.buf("att", (B, nh, T, T), q.dtype)  # (B, nh, T, T)
        yh = self.buf("yh", (B, nh, T, hs), v.dtype)  # (B, nh, T, hs)
        qg, kg, vg = (a.reshape(G, T, hs) for a in (q, k, v))  # (G, T, hs) views
        attg, yhg = att.reshape(G, T, T), yh.reshape(G, T, hs)
        mask = self.mask(T)
        pad = self.padding.bias(nh, q.dtype) if self.padding is not None else None  # (G, 1, T)
        if pad is not None and pad.shape != (G, 1, T):
            raise ValueError(f"padding mask {pad.shape} for {G} problems of {T} keys")
        fused = not self.drop.active  # dropout draws from one generator: it runs unsplit

        parts = self.parts(T)

        def scores(g0: int, g1: int) -> None:
            # 3) causal softmax(q k^T) of problems g0..g1, in place in their rows of att
            for rows, n in parts:
                a = attg[g0:g1, rows, :n]  # (g, r, n) queries `rows` against keys [0, n)
                np.matmul(qg[g0:g1, rows], kg[g0:g1, :n].swapaxes(-1, -2), out=a)
                if mask is not None:
                    a += mask[rows, :n]  # future positions -> -inf
                if pad is not None:
                    a += pad[g0:g1, :, :n]  # padded keys -> PADDED_SCORE
                a -= a.max(axis=-1, keepdims=True)  # the row max is finite (the diagonal)
                np.exp(a, out=a)
                a *= 1.0 / a.sum(axis=-1, keepdims=True)  # rows sum to 1 (fp32 sums)
                self.policy.cast(a, out=a)
            if fused:
                values(g0, g1)

        def values(g0: int, g1: int) -> None:
            # 4) weighted sum of the values
            for rows, n in parts:
                np.matmul(attg_d[g0:g1, rows, :n], vg[g0:g1, :n], out=yhg[g0:g1, rows])

        attg_d = attg
        if not fused and len(parts) > 1:  # dropout masks the whole array: the skipped block is 0
            att[:, :, parts[0][0], parts[0][1] :] = 0
        for_rows(scores, G, T * T * att.itemsize)
        att_d = att
        if not fused:
            att_d = self.drop.forward(att)  # (B, nh, T, T) attention dropout
            attg_d = att_d.reshape(G, T, T)
            for_rows(values, G, T * T * att.itemsize)
        # 5) heads back side by side, output projection
        y = self.buf("y", (B, T, nh, hs), v.dtype)  # (B, T, nh, hs)
        np.copyto(y, yh.transpose(0, 2, 1, 3))
        self.policy.cast(y, out=y)
        self.heads, self.att, self.att_d = heads, att, att_d
        return self.proj.forward(y.reshape(B, T, C), epilogue=epilogue)  # (B, T, C)

    def backward(self, dout: np.ndarray, dx_epilogue: Epilogue | None = None) -> np.ndarray:
        """dout (B, T, C) -> dx (B, T, C); `dx_epilogue` runs on each block of dx as the qkv
        projection's product writes it."""
        B, T, C = dout.shape
        nh, hs = self.nh, self.hs
        G = B * nh
        q, k, v = self.heads  # q rotated and scaled, k rotated
        att, att_d = self.att, self.att_d
        # 1) through the output projection, heads to the batch dims again
        dy = self.proj.backward_dx(dout)  # (B, T, C)
        dyh = self.buf("dyh", (B, nh, T, hs), dy.dtype)  # (B, nh, T, hs)
        np.copyto(dyh, dy.reshape(B, T, nh, hs).transpose(0, 2, 1, 3))
        dheads = self.buf("dheads", (3, B, nh, T, hs), dy.dtype)  # (3, B, nh, T, hs)
        datt = self.buf("datt", att.shape, dy.dtype)  # (B, nh, T, T)
        qg, kg, vg, dyg = (a.reshape(G, T, hs) for a in (q, k, v, dyh))  # (G, T, hs)
        dqg, dkg, dvg = (a.reshape(G, T, hs) for a in dheads)  # (G, T, hs)
        attg, attg_d, dattg = (a.reshape(G, T, T) for a in (att, att_d, datt))  # (G, T, T)
        fused = self.drop.keep is None  # no dropout mask: one split pass
        scale = self.scale

        parts = self.parts(T)[::-1]  # the part seeing all keys first: it writes dv, dk whole

        def values(g0: int, g1: int) -> None:
            # 2) y = att_d @ v: dv = att_d^T dy, datt = dy v^T, part by part
            for i, (rows, n) in enumerate(parts):
                at, dyr = attg_d[g0:g1, rows, :n].swapaxes(-1, -2), dyg[g0:g1, rows]
                if i == 0:
                    np.matmul(at, dyr, out=dvg[g0:g1, :n])  # (g, n, hs)
                else:
                    dvg[g0:g1, :n] += np.matmul(at, dyr)
                np.matmul(dyr, vg[g0:g1, :n].swapaxes(-1, -2), out=dattg[g0:g1, rows, :n])
            if fused:
                softmax(g0, g1)

        def softmax(g0: int, g1: int) -> None:
            for i, (rows, n) in enumerate(parts):
                # 3) ds = att * (datt - rowsum(datt * att)); masked att = 0 -> ds = 0 (causal
                # and padded keys alike: the padding needs nothing more here)
                d, a = dattg[g0:g1, rows, :n], attg[g0:g1, rows, :n]  # (g, r, n)
                rowdot = np.einsum("gij,gij->gi", d, a)  # (g, r)
                d -= rowdot[..., None]
                d *= a
                self.policy.cast(d, out=d)
                # 4) scores = q k^T with q already scaled
                np.matmul(d, kg[g0:g1, :n], out=dqg[g0:g1, rows])  # (g, r, hs) of the scaled q
                if i == 0:
                    np.matmul(d.swapaxes(-1, -2), qg[g0:g1, rows], out=dkg[g0:g1, :n])
                else:
                    dkg[g0:g1, :n] += np.matmul(d.swapaxes(-1, -2), qg[g0:g1, rows])
            dqg[g0:g1] *= scale

        if not fused and len(parts) > 1:  # the dropout pass reads the whole array
            datt[:, :, parts[-1][0], parts[-1][1] :] = 0
        for_rows(values, G, T * T * att.itemsize)
        if not fused:
            np.copyto(datt, self.drop.backward(datt))  # (B, nh, T, T) through the dropout mask
            for_rows(softmax, G, T * T * att.itemsize)
        dq, dk, _ = dheads
        if self.rotary is not None:  # the inverse rotation carries the gradient back
            self.rotary.rotate(dq, out=dq, inverse=True)
            self.rotary.rotate(dk, out=dk, inverse=True)
        # 5) back to the fused (B, T, C + 2 g hs) layout and through the qkv projection
        dqkv = self.buf("dqkv", (B, T, self.qkv.n_out), dy.dtype)  # (B, T, C + 2 g hs)
        self._merge_heads(dheads, dqkv)
        self.policy.cast(dqkv, out=dqkv)
        return self.qkv.backward_dx(dqkv, dx_epilogue)  # (B, T, C)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """qkv "dense", the "attention" core, output "dense"."""
        B, T, C = in_shape
        rd = self.rotary.dim if self.rotary is not None else 0
        # per position: q k^T and att v (2 * 2 * T * C), softmax (~5 a score), rotary (~6 a feature)
        core_flops = 4 * T * C + 5 * self.nh * T + 6 * rd * self.nh * 2
        attrs: tuple[tuple[str, int | bool | float], ...] = (
            ("heads", self.nh),
            ("head_dim", self.hs),
            ("seq", T),
            ("rotary_dim", rd),
            ("causal", self.causal),
            ("dropout", self.drop.rate),
            ("scale", self.scale),
        )
        if self.kv != self.nh:
            attrs += (("kv_heads", self.kv),)
        return [
            *self.qkv.specs(f"{name}.qkv", in_shape, names),
            make_spec(f"{name}.core", "attention", (B, T, C), core_flops, attrs=attrs),
            *self.proj.specs(f"{name}.proj", in_shape, names),
        ]


CausalSelfAttention = SelfAttention  # the decoders' name for it (causal by default)
