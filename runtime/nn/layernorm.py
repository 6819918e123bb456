"""Layer normalisation over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta.

Rows are independent: they run in blocks over the worker threads (parallel.for_rows).
"""

from __future__ import annotations

import numpy as np

from runtime.nn.module import FP32, Module
from runtime.nn.parallel import for_rows
from runtime.nn.spec import LayerSpec, make_spec
from runtime.precision import Policy

__all__ = ["LayerNorm"]


class LayerNorm(Module):
    """x (..., C) -> (..., C); gamma (C,) = 1, beta (C,) = 0 at init. Statistics stay fp32."""

    def __init__(self, dim: int, eps: float = 1e-5, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.dim, self.eps = dim, eps
        self.add_param("weight", np.ones(dim, dtype=np.float32))
        self.add_param("bias", np.zeros(dim, dtype=np.float32))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., C) -> y (..., C)."""
        C = self.dim
        x2 = x.reshape(-1, C)  # (N, C)
        N = x2.shape[0]
        xhat = self.buf("xhat", x2.shape, x2.dtype)  # (N, C)
        rstd = self.buf("rstd", (N,), x2.dtype)  # (N,)
        y = self.buf("y", x2.shape, x2.dtype)  # (N, C)
        gamma = self.half(self.p["weight"], "w")  # (C,)
        beta = self.half(self.p["bias"], "b")  # (C,)

        def rows(r0: int, r1: int) -> None:
            xs, xh, rs, ys = x2[r0:r1], xhat[r0:r1], rstd[r0:r1], y[r0:r1]
            # 1) centre and scale: xhat = (x - mu) * rstd
            np.subtract(xs, xs.mean(axis=1, keepdims=True), out=xh)  # (r, C)
            var = np.einsum("ij,ij->i", xh, xh)  # (r,) sum of squares, no (r, C) temporary
            var /= C
            np.divide(1.0, np.sqrt(var + self.eps), out=rs)  # (r,)
            xh *= rs[:, None]
            # 2) affine: y = xhat * gamma + beta
            np.multiply(xh, gamma, out=ys)
            ys += beta
            self.policy.cast(ys, out=ys)

        for_rows(rows, N, 3 * C * x2.itemsize)  # row blocks over the worker threads
        self.xhat, self.rstd, self.gamma = xhat, rstd, gamma
        return y.reshape(x.shape)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dy (..., C) -> dx (..., C); accumulates dgamma, dbeta."""
        C = self.dim
        dy2 = dy.reshape(-1, C)  # (N, C)
        xhat, rstd, gamma = self.xhat, self.rstd, self.gamma
        # 1) parameter gradients: sums over the rows, so over the whole array (not split)
        self.accumulate("weight", np.einsum("ij,ij->j", dy2, xhat))  # (C,) sum of dy * xhat
        self.accumulate("bias", dy2.sum(axis=0))  # (C,)
        dx = self.buf("dx", xhat.shape, xhat.dtype)  # (N, C)

        def rows(r0: int, r1: int) -> None:
            # 2) dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma
            xh, d = xhat[r0:r1], dx[r0:r1]  # (r, C)
            g = dy2[r0:r1] * gamma  # (r, C) one block: stays in cache
            m1 = g.mean(axis=1, keepdims=True)  # (r, 1)
            m2 = np.einsum("ij,ij->i", g, xh)  # (r,)
            m2 /= C
            np.multiply(xh, m2[:, None], out=d)  # (r, C)
            np.subtract(g, d, out=d)
            d -= m1
            d *= rstd[r0:r1, None]
            self.policy.cast(d, out=d)

        for_rows(rows, dy2.shape[0], 3 * C * dy2.itemsize)
        return dx.reshape(dy.shape)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "layernorm" kernel (~8 flops per element)."""
        arrays = tuple(self.p.values())
        return [
            make_spec(
                name, "layernorm", in_shape, 8 * self.dim, arrays, names, (("eps", self.eps),)
            )
        ]
