"""SwiGLU feed-forward (Shazeer 2020; LLaMA): proj(silu(x W_gate) * (x W_up)).

The gate and up projections are ONE product into a (N, 2F) buffer (columns [0, F) the gate a,
[F, 2F) the up value b), and the gating runs on each row block of that product as BLAS writes
it (parallel.gemms epilogue, whole rows so a block holds both halves):
    s = sigmoid(a) = (1 + tanh(a / 2)) / 2      (tanh: no overflow for any a)
    h = a * s * b                               (N, F), the input of proj
Backward, on each block of proj's dx (dh) as it is written, into the (N, 2F) gradient of fc:
    da = dh * b * s * (1 + a (1 - s))           d silu(a) / da = s (1 + a (1 - s))
    db = dh * a * s
Sub-blocks of SUB_ROWS rows keep the passes in the core's L2, as the fused GELU does.
"""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.init import Init
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import Epilogue, needs_rows
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["GatedMLP", "swiglu_into", "swiglu_grad_into"]

SUB_ROWS = 64


def swiglu_into(a: np.ndarray, b: np.ndarray, s: np.ndarray, h: np.ndarray) -> None:
    """s = sigmoid(a), h = silu(a) * b; all (r, F)."""
    np.multiply(a, 0.5, out=s)
    np.tanh(s, out=s)
    s += 1.0
    s *= 0.5  # sigmoid(a)
    np.multiply(a, s, out=h)  # silu(a)
    h *= b


def swiglu_grad_into(
    dh: np.ndarray, a: np.ndarray, b: np.ndarray, s: np.ndarray, da: np.ndarray, db: np.ndarray
) -> None:
    """da, db from dh and the forward's a, b, s; all (r, F)."""
    np.multiply(a, s, out=db)  # silu(a)
    np.subtract(1.0, s, out=da)  # 1 - s
    da *= a
    da += 1.0
    da *= s  # silu'(a)
    da *= b
    da *= dh
    db *= dh


class GatedMLP(Module):
    """x (B, T, C) -> proj(silu(x Wg) * (x Wu)) (B, T, C); no biases unless asked (LLaMA)."""

    def __init__(
        self,
        dim: int,
        filter_size: int,
        rng: np.random.Generator,
        bias: bool,
        init: Init,
        out_init: Init,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.filter_size = filter_size
        self.fc = Dense(dim, 2 * filter_size, rng, bias=bias, init=init, policy=policy)
        self.proj = Dense(filter_size, dim, rng, bias=bias, init=out_init, policy=policy)

    def forward(self, x: np.ndarray, epilogue: Epilogue | None = None) -> np.ndarray:
        """(B, T, C) -> (B, T, C); `epilogue` runs on each block of proj's product."""
        F = self.filter_size
        N = x.size // x.shape[-1]
        s = self.buf("s", (N, F), x.dtype)  # (N, F) sigmoid(gate), kept for backward
        h = self.buf("h", (N, F), x.dtype)  # (N, F) the gated value
        cast = self.policy.cast if self.policy.enabled else None

        def gate(blk: np.ndarray, rows: slice, cols: slice) -> None:
            sb, hb = s[rows], h[rows]
            for r0 in range(0, len(blk), SUB_ROWS):
                r1 = r0 + SUB_ROWS
                swiglu_into(blk[r0:r1, :F], blk[r0:r1, F:], sb[r0:r1], hb[r0:r1])
                if cast is not None:
                    cast(hb[r0:r1], out=hb[r0:r1])

        ab = self.fc.forward(x, epilogue=needs_rows(gate))  # (B, T, 2F) gate | up
        self._ab = ab.reshape(N, 2 * F)
        return self.proj.forward(h.reshape(*x.shape[:-1], F), epilogue=epilogue)  # (B, T, C)

    def backward(self, dy: np.ndarray, dx_epilogue: Epilogue | None = None) -> np.ndarray:
        """(B, T, C) -> (B, T, C); `dx_epilogue` runs on each block of dx as fc writes it."""
        F = self.filter_size
        ab, s = self._ab, self._bufs["s"]
        dab = self.buf("dab", ab.shape, dy.dtype)  # (N, 2F) gradient of gate | up
        cast = self.policy.cast if self.policy.enabled else None

        def ungate(blk: np.ndarray, rows: slice, cols: slice) -> None:
            # blk: rows x cols of dh (N, F); cols index both halves of ab and dab
            c0, c1 = cols.start or 0, cols.stop if cols.stop is not None else F
            a, b, sb = ab[rows, c0:c1], ab[rows, F + c0 : F + c1], s[rows, c0:c1]
            da, db = dab[rows, c0:c1], dab[rows, F + c0 : F + c1]
            for r0 in range(0, len(blk), SUB_ROWS):
                r1 = r0 + SUB_ROWS
                swiglu_grad_into(blk[r0:r1], a[r0:r1], b[r0:r1], sb[r0:r1], da[r0:r1], db[r0:r1])
                if cast is not None:
                    cast(da[r0:r1], out=da[r0:r1])
                    cast(db[r0:r1], out=db[r0:r1])

        self.proj.backward(dy, dx_epilogue=ungate)  # dh (N, F), turned into dab block by block
        return self.fc.backward_dx(dab.reshape(*dy.shape[:-1], 2 * F), dx_epilogue)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """fc "dense" (gate and up), the "swiglu" gating, proj "dense"."""
        fc = self.fc.specs(f"{name}.fc", in_shape, names)
        out = (*in_shape[:-1], self.filter_size)
        gate = make_spec(f"{name}.act", "swiglu", out, 6 * self.filter_size)
        return [*fc, gate, *self.proj.specs(f"{name}.proj", out, names)]
