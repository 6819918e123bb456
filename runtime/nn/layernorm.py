"""Layer normalisation over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta.

Rows are independent: large arrays run in blocks over the worker threads (parallel.for_rows);
a GPT's (1024, 256) runs whole on one thread, where splitting costs more than it gains. Row
means and the parameter gradients' column sums are BLAS products with a constant vector, and
every pass writes into a reused buffer: 6 passes forward and 7 backward, no temporaries.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import for_rows
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["LayerNorm", "RowNorm"]


class RowNorm(Module):
    """A normalisation over the last axis whose rows are independent (LayerNorm, RMSNorm): the
    whole forward and backward drive the three phases a subclass defines, so that a block can
    also run them itself (transformer.Block): begin (the buffers), rows (any disjoint row
    ranges, any thread), end (backward's column sums, over all rows at once)."""

    dim: int
    # each subclass names its one kernel (the compiler's "layernorm" or "rmsnorm")
    specs: Callable[[str, tuple[int, ...], dict[int, str]], list[LayerSpec]]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., C) -> y (..., C)."""
        x2 = x.reshape(-1, self.dim)  # (N, C)
        y = self.begin_forward(x2)
        for_rows(lambda r0, r1: self.forward_rows(r0, r1), len(x2), x2.itemsize * self.dim)
        return y.reshape(x.shape)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dy (..., C) -> dx (..., C); accumulates the parameters' gradients."""
        dy2 = dy.reshape(-1, self.dim)  # (N, C)
        dx = self.begin_backward(dy2)
        for_rows(lambda r0, r1: self.backward_rows(r0, r1), len(dy2), dy2.itemsize * self.dim)
        self.end_backward()
        return dx.reshape(dy.shape)

    def begin_forward(self, x2: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def forward_rows(self, r0: int, r1: int) -> None:
        raise NotImplementedError

    def begin_backward(self, dy2: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def backward_rows(self, r0: int, r1: int) -> None:
        raise NotImplementedError

    def end_backward(self) -> None:
        raise NotImplementedError

    def _vector(self, name: str, n: int, value: float, dtype: np.dtype) -> np.ndarray:
        """(n,) all `value`, kept: `a @ v` with 1/C is each row's mean of a (C columns), a BLAS
        product (a third of the time of a.mean(axis=1) here); `v @ a` with ones sums a's rows."""
        v = self._bufs.get(name)
        if v is None or v.shape != (n,) or v.dtype != dtype:
            v = self._bufs[name] = np.full(n, value, dtype)
        return v


class LayerNorm(RowNorm):
    """x (..., C) -> (..., C); gamma (C,) = 1, beta (C,) = 0 at init. Statistics stay fp32."""

    def __init__(self, dim: int, eps: float = 1e-5, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.dim, self.eps = dim, eps
        self.add_param("weight", np.ones(dim, dtype=np.float32))
        self.add_param("bias", np.zeros(dim, dtype=np.float32))

    def begin_forward(self, x2: np.ndarray) -> np.ndarray:
        """Set up forward of x2 (N, C) (its rows may still be written); -> y (N, C), filled by
        forward_rows."""
        N, C = x2.shape
        self._x2 = x2
        self.xhat = self.buf("xhat", x2.shape, x2.dtype)  # (N, C)
        self.rstd = self.buf("rstd", (N,), x2.dtype)  # (N,)
        self._y = self.buf("y", x2.shape, x2.dtype)  # (N, C)
        self.gamma = self.half(self.p["weight"], "w")  # (C,)
        self._beta = self.half(self.p["bias"], "b")  # (C,)
        self._mean_of = self._vector("mean_of", C, 1.0 / C, x2.dtype)  # (C,) all 1/C
        return self._y

    def forward_rows(self, r0: int, r1: int) -> None:
        """y[r0:r1] from x2[r0:r1] (begin_forward first)."""
        xs, xh, rs, ys = self._x2[r0:r1], self.xhat[r0:r1], self.rstd[r0:r1], self._y[r0:r1]
        mean_of = self._mean_of
        # 1) centre and scale: xhat = (x - mu) * rstd
        np.subtract(xs, (xs @ mean_of)[:, None], out=xh)  # (r, C) - (r, 1)
        np.multiply(xh, xh, out=ys)  # (r, C) squares, in y until step 2 writes it
        var = ys @ mean_of  # (r,)
        var += self.eps
        np.sqrt(var, out=var)
        np.divide(1.0, var, out=rs)  # (r,)
        np.multiply(xh, rs[:, None], out=xh)
        # 2) affine: y = xhat * gamma + beta
        np.multiply(xh, self.gamma, out=ys)
        np.add(ys, self._beta, out=ys)
        self.policy.cast(ys, out=ys)

    def begin_backward(self, dy2: np.ndarray) -> np.ndarray:
        """Set up backward of dy2 (N, C) (its rows may still be written); -> dx (N, C), filled by
        backward_rows."""
        self._dy2 = dy2
        self._dx = self.buf("dx", self.xhat.shape, self.xhat.dtype)  # (N, C)
        self._g = self.buf("g", self.xhat.shape, self.xhat.dtype)  # (N, C) scratch
        self._mean_of = self._vector("mean_of", self.dim, 1.0 / self.dim, dy2.dtype)  # (C,)
        return self._dx

    def backward_rows(self, r0: int, r1: int) -> None:
        """dx[r0:r1] from dy2[r0:r1] (begin_backward first)."""
        # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma
        xh, d, gs, dys = self.xhat[r0:r1], self._dx[r0:r1], self._g[r0:r1], self._dy2[r0:r1]
        np.multiply(dys, self.gamma, out=gs)  # (r, C)
        m1 = gs @ self._mean_of  # (r,) mean(g)
        m2 = np.einsum("ij,ij->i", gs, xh)  # (r,) sum(g * xhat), no temporary
        m2 *= 1.0 / self.dim
        np.multiply(xh, m2[:, None], out=d)  # (r, C)
        np.add(d, m1[:, None], out=d)
        np.subtract(gs, d, out=d)
        np.multiply(d, self.rstd[r0:r1, None], out=d)
        self.policy.cast(d, out=d)
        np.multiply(dys, xh, out=gs)  # (r, C) dy * xhat, summed over the rows by end_backward

    def end_backward(self) -> None:
        """Accumulate dgamma, dbeta: sums over all rows, as products with a ones vector (after
        every row is done, never per block: the sums' order must not depend on the blocks)."""
        ones = self._vector("ones", len(self._dy2), 1.0, self._dy2.dtype)  # (N,)
        self.accumulate("weight", ones @ self._g)  # (C,) sum of dy * xhat
        self.accumulate("bias", ones @ self._dy2)  # (C,)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "layernorm" kernel (~8 flops per element)."""
        arrays = tuple(self.p.values())
        return [
            make_spec(
                name, "layernorm", in_shape, 8 * self.dim, arrays, names, (("eps", self.eps),)
            )
        ]
