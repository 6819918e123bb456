"""Decoder blocks shared by gpt2, gptj and llama: embedding block, transformer block, LM head.

GPT-2 (sequential, pre-LN):  x = x + drop(attn(ln_1(x)));  x = x + drop(mlp(ln_2(x)))
GPT-J (parallel, one LN):    x = x + drop(attn(ln_1(x))) + drop(mlp(ln_1(x)))
(GPT-NeoX's "untied" variant of the parallel form gives the MLP its own ln_2.)
LLaMA is GPT-2's sequential block with RMSNorm for the layer norms (`norm="rmsnorm"`), the
SwiGLU feed-forward (`act="swiglu"`, glu.py) and, in LLaMA-2 70B, grouped-query attention.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cs2sim.runtime.nn.activations import Activation
from cs2sim.runtime.nn.attention import CausalSelfAttention
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.embedding import Embedding, FixedPositions, LearnedPositions, TiedProjection
from cs2sim.runtime.nn.glu import GatedMLP
from cs2sim.runtime.nn.init import GPT_INIT, Init
from cs2sim.runtime.nn.layernorm import LayerNorm, RowNorm
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import Epilogue, needs_rows
from cs2sim.runtime.nn.rmsnorm import RMSNorm
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["MLP", "Block", "LMEmbedding", "LMHead", "POSITIONS", "NORMS", "make_mlp"]

# norm name -> layer class (both have the begin / rows / end phases the fused block uses)
NORMS: dict[str, Callable[[int, float, Policy], RowNorm]] = {
    "layernorm": LayerNorm,
    "rmsnorm": RMSNorm,
}


class MLP(Module):
    """x (B, T, C) -> proj(act(fc(x))) (B, T, C); fc widens to the filter size."""

    def __init__(
        self,
        dim: int,
        filter_size: int,
        act: str,
        rng: np.random.Generator,
        bias: bool,
        init: Init,
        out_init: Init,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.fc = Dense(dim, filter_size, rng, bias=bias, init=init, policy=policy)
        self.act = Activation(act, policy)
        self.proj = Dense(filter_size, dim, rng, bias=bias, init=out_init, policy=policy)

    def forward(self, x: np.ndarray, epilogue: Epilogue | None = None) -> np.ndarray:
        """(B, T, C) -> (B, T, C); `epilogue` runs on each block of proj's product."""
        if not (self.act.fusable and x.ndim >= 2):
            self._fused = None
            h = self.act.forward(self.fc.forward(x))  # (B, T, F)
            return self.proj.forward(h, epilogue=epilogue)
        # GELU fused into fc's product: each block of the (N, F) pre-activation goes through it
        # as soon as BLAS writes it (Activation.fused_forward)
        N = x.size // x.shape[-1]
        act_epilogue, y, t = self.act.fused_forward((N, self.fc.n_out), x.dtype)
        h = self.fc.forward(x, epilogue=act_epilogue)  # (B, T, F) pre-activation
        self._fused = (h.reshape(N, -1), t)
        return self.proj.forward(y.reshape(h.shape), epilogue=epilogue)  # (B, T, C)

    def backward(self, dy: np.ndarray, dx_epilogue: Epilogue | None = None) -> np.ndarray:
        """(B, T, C) -> (B, T, C); `dx_epilogue` runs on each block of dx as fc's product
        writes it."""
        fused, self._fused = getattr(self, "_fused", None), None
        if fused is None:
            return self.fc.backward_dx(self.act.backward(self.proj.backward_dx(dy)), dx_epilogue)
        # GELU's backward on each block of proj's dx, in place (Activation.fused_backward)
        dh = self.proj.backward_dx(dy, dx_epilogue=self.act.fused_backward(*fused))  # (B, T, F)
        return self.fc.backward_dx(dh, dx_epilogue)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """fc "dense", activation, proj "dense"."""
        fc = self.fc.specs(f"{name}.fc", in_shape, names)
        act = self.act.specs(f"{name}.act", fc[-1].out_shape, names)
        return [*fc, *act, *self.proj.specs(f"{name}.proj", act[-1].out_shape, names)]


def make_mlp(
    dim: int,
    filter_size: int,
    act: str,
    rng: np.random.Generator,
    bias: bool,
    init: Init,
    out_init: Init,
    policy: Policy,
) -> MLP | GatedMLP:
    """The feed-forward of a block: SwiGLU's gated form for act "swiglu", else fc-act-proj."""
    if act == "swiglu":
        return GatedMLP(dim, filter_size, rng, bias, init, out_init, policy)
    return MLP(dim, filter_size, act, rng, bias, init, out_init, policy)


class Block(Module):
    """One transformer block, sequential (GPT-2, LLaMA) or parallel (GPT-J)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        filter_size: int,
        act: str,
        rng: np.random.Generator,
        drop_rng: np.random.Generator,
        *,
        parallel: bool = False,
        untied_ln: bool = False,
        eps: float = 1e-5,
        qkv_bias: bool = True,
        attn_out_bias: bool = True,
        ffn_bias: bool = True,
        rotary_dim: int = 0,
        max_positions: int = 1024,
        attn_dropout: float = 0.0,
        resid_dropout: float = 0.0,
        scaled: bool = True,
        init: Init = GPT_INIT,
        out_init: Init = GPT_INIT,
        policy: Policy = FP32,
        norm: str = "layernorm",
        kv_heads: int | None = None,
        rotary_interleaved: bool = True,
    ) -> None:
        super().__init__(policy)
        self.parallel = parallel
        Norm = NORMS[norm]
        self.ln_1 = Norm(dim, eps, policy)
        self.attn = CausalSelfAttention(
            dim,
            num_heads,
            rng,
            drop_rng,
            qkv_bias=qkv_bias,
            out_bias=attn_out_bias,
            rotary_dim=rotary_dim,
            max_positions=max_positions,
            dropout=attn_dropout,
            scaled=scaled,
            init=init,
            out_init=out_init,
            policy=policy,
            kv_heads=kv_heads,
            rotary_interleaved=rotary_interleaved,
        )
        # the sequential block always has ln_2; the parallel one only when "untied"
        self.ln_2 = Norm(dim, eps, policy) if (untied_ln or not parallel) else None
        self.mlp = make_mlp(dim, filter_size, act, rng, ffn_bias, init, out_init, policy)
        self.drop_attn = Dropout(resid_dropout, drop_rng, policy)
        self.drop_mlp = Dropout(resid_dropout, drop_rng, policy)

    @property
    def _seq_ln_2(self) -> RowNorm:
        """ln_2 where the block is sequential (which always has one)."""
        assert self.ln_2 is not None, "a sequential block has ln_2"
        return self.ln_2

    def _fusable(self) -> bool:
        """Whether the residual adds and ln_2 can run inside the products (sequential block,
        no residual dropout: its mask is drawn for the whole array at once)."""
        return not self.parallel and not self.drop_attn.active and not self.drop_mlp.active

    def forward(self, x: np.ndarray) -> np.ndarray:
        """(B, T, C) -> (B, T, C)."""
        if self._fusable():
            return self._forward_fused(x)
        h = self.ln_1.forward(x)  # (B, T, C)
        a = self.drop_attn.forward(self.attn.forward(h))  # (B, T, C)
        out = self.buf("out", x.shape, x.dtype)  # (B, T, C)
        np.add(x, a, out=out)  # residual 1
        if self.parallel:  # the MLP reads x too: through ln_1's output, or its own ln_2
            h2 = self.ln_2.forward(x) if self.ln_2 is not None else h  # (B, T, C)
        else:
            h2 = self._seq_ln_2.forward(out)  # (B, T, C) after the attention residual
        out += self.drop_mlp.forward(self.mlp.forward(h2))  # residual 2
        self.policy.cast(out, out=out)
        return out

    # GPT-2's block with the layer norms' rows run inside the products before them: forward,
    # the attention residual and ln_2 on each row block of the attention's output projection;
    # backward, ln_2's backward and the residual on each row block of the MLP's last dx product,
    # ln_1's on each of the attention's. Same arithmetic per row as the separate layers (their
    # column sums, dgamma and dbeta, still over all rows at once), in cache and split over the
    # threads with the product instead of in passes of their own on one thread.
    def _forward_fused(self, x: np.ndarray) -> np.ndarray:
        ln_2 = self._seq_ln_2
        h = self.ln_1.forward(x)  # (B, T, C)
        C = x.shape[-1]
        x2 = x.reshape(-1, C)  # (N, C)
        out = self.buf("out", x.shape, x.dtype)  # (B, T, C)
        out2 = out.reshape(-1, C)
        h2 = ln_2.begin_forward(out2)  # (N, C), filled row block by row block

        def residual_ln(blk: np.ndarray, rows: slice, cols: slice) -> None:
            np.add(x2[rows], blk, out=out2[rows])  # residual 1
            ln_2.forward_rows(rows.start, rows.stop)

        self.attn.forward(h, epilogue=needs_rows(residual_ln))
        out += self.mlp.forward(h2.reshape(x.shape))  # residual 2
        self.policy.cast(out, out=out)
        return out

    def _backward_fused(self, dout: np.ndarray) -> np.ndarray:
        ln_2 = self._seq_ln_2
        C = dout.shape[-1]
        dout2 = dout.reshape(-1, C)  # (N, C)
        dx = self.buf("dx", dout.shape, dout.dtype)  # (B, T, C)
        dx2 = dx.reshape(-1, C)

        # ln_2's input gradient is the MLP's dx, ln_1's the attention's: their layer norms read
        # those buffers row block by row block as the products write them
        ln2_dx = ln_2.begin_backward(self.mlp.fc.dx_buffer(len(dout2), dout.dtype))
        ln1_dx: np.ndarray | None = None  # set before the attention's product calls ln_1_back

        def ln_2_back(blk: np.ndarray, rows: slice, cols: slice) -> None:
            ln_2.backward_rows(rows.start, rows.stop)
            np.add(dout2[rows], ln2_dx[rows], out=dx2[rows])  # + the residual path

        def ln_1_back(blk: np.ndarray, rows: slice, cols: slice) -> None:
            assert ln1_dx is not None
            self.ln_1.backward_rows(rows.start, rows.stop)
            dx2[rows] += ln1_dx[rows]

        self.mlp.backward(dout, dx_epilogue=needs_rows(ln_2_back))
        ln_2.end_backward()
        ln1_dx = self.ln_1.begin_backward(self.attn.qkv.dx_buffer(len(dout2), dout.dtype))
        self.attn.backward(dx, dx_epilogue=needs_rows(ln_1_back))
        self.ln_1.end_backward()
        self.policy.cast(dx, out=dx)
        return dx

    def backward(self, dout: np.ndarray) -> np.ndarray:
        """(B, T, C) -> (B, T, C)."""
        if self._fusable():
            return self._backward_fused(dout)
        dh2 = self.mlp.backward(self.drop_mlp.backward(dout))  # (B, T, C)
        dx = self.buf("dx", dout.shape, dout.dtype)  # (B, T, C)
        if self.parallel:
            dh = self.attn.backward(self.drop_attn.backward(dout))  # (B, T, C)
            if self.ln_2 is not None:  # untied: two layer norms of x
                np.add(self.ln_1.backward(dh), self.ln_2.backward(dh2), out=dx)  # (B, T, C)
                dx += dout  # the residual path
            else:  # one layer norm feeds both branches: add their gradients first
                np.add(dh, dh2, out=dx)  # (B, T, C)
                np.add(self.ln_1.backward(dx), dout, out=dx)  # + the residual path
        else:
            np.add(dout, self._seq_ln_2.backward(dh2), out=dx)  # gradient at the attention residual
            dh = self.attn.backward(self.drop_attn.backward(dx))  # (B, T, C)
            dx += self.ln_1.backward(dh)
        self.policy.cast(dx, out=dx)
        return dx

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """The block's kernels in execution order."""
        C = in_shape[-1]
        s = [
            *self.ln_1.specs(f"{name}.ln_1", in_shape, names),
            *self.attn.specs(f"{name}.attn", in_shape, names),
        ]
        s += self.drop_attn.specs(f"{name}.drop_attn", in_shape, names)
        if not self.parallel:
            s.append(make_spec(f"{name}.add_attn", "add", in_shape, C))
        if self.ln_2 is not None:
            s += self.ln_2.specs(f"{name}.ln_2", in_shape, names)
        s += self.mlp.specs(f"{name}.mlp", in_shape, names)
        s += self.drop_mlp.specs(f"{name}.drop_mlp", in_shape, names)
        s.append(make_spec(f"{name}.add", "add", in_shape, 2 * C if self.parallel else C))
        return s


# position -> builder of the position table module (None: no position table, e.g. rotary)
PositionTable = LearnedPositions | FixedPositions
POSITIONS: dict[str, Callable[[int, int, np.random.Generator, Init, Policy], PositionTable]] = {
    "learned": lambda T, C, rng, init, policy: LearnedPositions(T, C, rng, init, policy),
    "fixed": lambda T, C, rng, init, policy: FixedPositions(T, C, policy),
}


class LMEmbedding(Module):
    """ids (B, T) -> token embedding (+ position embedding) -> dropout: (B, T, C)."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        rng: np.random.Generator,
        drop_rng: np.random.Generator,
        init: Init,
        position: str | None = "learned",
        max_positions: int = 1024,
        dropout: float = 0.0,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.wte = Embedding(vocab, dim, rng, init, policy)
        make = POSITIONS.get(position or "")
        self.wpe = make(max_positions, dim, rng, init, policy) if make else None
        self.drop = Dropout(dropout, drop_rng, policy)

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """(B, T) int -> (B, T, C)."""
        x = self.wte.forward(ids)  # (B, T, C)
        if self.wpe is not None:
            T = ids.shape[1]
            if T > self.wpe.max_positions:
                raise ValueError(
                    f"sequence length {T} exceeds max_position_embeddings {self.wpe.max_positions}"
                )
            pos = self.wpe.forward(T)  # (T, C), broadcast over the batch
            x = np.add(x, pos, out=self.buf("x", x.shape, x.dtype))  # (B, T, C)
            self.policy.cast(x, out=x)
        return self.drop.forward(x)

    def backward(self, dx: np.ndarray) -> None:
        """Accumulate the embedding gradients; token ids have none."""
        dx = self.drop.backward(dx)  # (B, T, C)
        if self.wpe is not None:
            self.wpe.backward(dx)
        self.wte.backward(dx)
        return None

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """Token "embedding", position "embedding" (gather + add), dropout."""
        s = self.wte.specs(f"{name}.wte", in_shape, names)
        out = s[-1].out_shape
        if self.wpe is not None:
            attrs = (("vocab", self.wpe.max_positions), ("dim", self.wpe.dim), ("positions", True))
            arrays = tuple(self.wpe.p.values())  # none for the fixed sinusoidal table
            s.append(make_spec(f"{name}.wpe", "embedding", out, 1, arrays, names, attrs))
        return s + self.drop.specs(f"{name}.drop", out, names)


class LMHead(Module):
    """The loss head: final layer norm, output projection (tied or untied), cross-entropy.

    loss_scaling "num_tokens": loss = sum CE / (B * T);
    loss_scaling "batch_size": loss = sum CE * loss_weight / B
    (with loss_weight = 1 / max_sequence_length and T = max_sequence_length the two are equal).
    """

    def __init__(
        self,
        dim: int,
        vocab: int,
        rng: np.random.Generator,
        *,
        eps: float,
        tied_to: Embedding | None,
        bias: bool,
        init: Init,
        loss_scaling: str = "num_tokens",
        loss_weight: float = 1.0,
        policy: Policy = FP32,
        norm: str = "layernorm",
    ) -> None:
        super().__init__(policy)
        self.ln_f = NORMS[norm](dim, eps, policy)
        if tied_to is not None:
            self.out: TiedProjection | Dense = TiedProjection(tied_to, bias=bias, policy=policy)
        else:
            self.out = Dense(dim, vocab, rng, bias=bias, init=init, policy=policy)
        self.ce = SoftmaxCrossEntropy(policy)
        self.loss_scaling, self.loss_weight = loss_scaling, loss_weight

    def loss_scale_factor(self, B: int, T: int) -> float:
        """The factor applied to the summed token cross-entropy."""
        return {"num_tokens": 1.0 / (B * T), "batch_size": self.loss_weight / B}[self.loss_scaling]

    def forward(self, h: np.ndarray, labels: np.ndarray) -> float:
        """h (B, T, C), labels (B, T) -> loss."""
        B, T, _ = h.shape
        logits = self.out.forward(self.ln_f.forward(h))  # (B, T, V)
        return self.ce.forward(logits, labels, self.loss_scale_factor(B, T))

    def backward(self, loss_scale: float = 1.0) -> np.ndarray:
        """-> dh (B, T, C)."""
        dlogits = self.ce.backward(loss_scale)  # (B, T, V)
        out = self.out
        dh = out.backward_dx(dlogits) if isinstance(out, Dense) else out.backward(dlogits)
        return self.ln_f.backward(dh)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """Final "layernorm" (or "rmsnorm"), output "dense" (tied or not), "softmax_ce"."""
        s = self.ln_f.specs(f"{name}.ln_f", in_shape, names)
        s += self.out.specs(f"{name}.out", in_shape, names)
        return s + self.ce.specs(f"{name}.ce", s[-1].out_shape, names)
