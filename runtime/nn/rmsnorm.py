"""RMS normalisation over the last axis (Zhang & Sennrich 2019; LLaMA): y = x / rms(x) * gamma.

rms(x) = sqrt(mean(x^2) + eps); no centring and no bias. The same three phases as LayerNorm
(begin / rows / end), so a block can run its rows inside the product that writes its input
(transformer.Block), and the same reused buffers: 4 passes forward, 6 backward.
"""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.layernorm import RowNorm
from cs2sim.runtime.nn.module import FP32
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["RMSNorm"]


class RMSNorm(RowNorm):
    """x (..., C) -> (..., C); gamma (C,) = 1 at init. Statistics stay fp32."""

    def __init__(self, dim: int, eps: float = 1e-6, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.dim, self.eps = dim, eps
        self.add_param("weight", np.ones(dim, dtype=np.float32))

    def begin_forward(self, x2: np.ndarray) -> np.ndarray:
        """Set up forward of x2 (N, C) (its rows may still be written); -> y (N, C)."""
        N, C = x2.shape
        self._x2 = x2
        self.xhat = self.buf("xhat", x2.shape, x2.dtype)  # (N, C) x / rms(x)
        self.rstd = self.buf("rstd", (N,), x2.dtype)  # (N,)
        self._y = self.buf("y", x2.shape, x2.dtype)  # (N, C)
        self.gamma = self.half(self.p["weight"], "w")  # (C,)
        self._mean_of = self._vector("mean_of", C, 1.0 / C, x2.dtype)  # (C,) all 1/C
        return self._y

    def forward_rows(self, r0: int, r1: int) -> None:
        """y[r0:r1] from x2[r0:r1] (begin_forward first)."""
        xs, xh, rs, ys = self._x2[r0:r1], self.xhat[r0:r1], self.rstd[r0:r1], self._y[r0:r1]
        np.multiply(xs, xs, out=ys)  # (r, C) squares, in y until the end
        ms = ys @ self._mean_of  # (r,) mean of squares
        ms += self.eps
        np.sqrt(ms, out=ms)
        np.divide(1.0, ms, out=rs)  # (r,) 1 / rms
        np.multiply(xs, rs[:, None], out=xh)  # (r, C)
        np.multiply(xh, self.gamma, out=ys)
        self.policy.cast(ys, out=ys)

    def begin_backward(self, dy2: np.ndarray) -> np.ndarray:
        """Set up backward of dy2 (N, C) (its rows may still be written); -> dx (N, C)."""
        self._dy2 = dy2
        self._dx = self.buf("dx", self.xhat.shape, self.xhat.dtype)  # (N, C)
        self._g = self.buf("g", self.xhat.shape, self.xhat.dtype)  # (N, C) scratch
        return self._dx

    def backward_rows(self, r0: int, r1: int) -> None:
        """dx[r0:r1] from dy2[r0:r1]: rstd * (g - xhat * mean(g * xhat)), g = dy * gamma."""
        xh, d, gs, dys = self.xhat[r0:r1], self._dx[r0:r1], self._g[r0:r1], self._dy2[r0:r1]
        np.multiply(dys, self.gamma, out=gs)  # (r, C)
        m = np.einsum("ij,ij->i", gs, xh)  # (r,) sum(g * xhat)
        m *= 1.0 / self.dim
        np.multiply(xh, m[:, None], out=d)  # (r, C)
        np.subtract(gs, d, out=d)
        np.multiply(d, self.rstd[r0:r1, None], out=d)
        self.policy.cast(d, out=d)
        np.multiply(dys, xh, out=gs)  # (r, C) dy * xhat, summed over the rows by end_backward

    def end_backward(self) -> None:
        """Accumulate dgamma: the column sums of dy * xhat over all rows (one product)."""
        ones = self._vector("ones", len(self._dy2), 1.0, self._dy2.dtype)  # (N,)
        self.accumulate("weight", ones @ self._g)  # (C,)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "rmsnorm" kernel (~5 flops per element)."""
        arrays = tuple(self.p.values())
        return [
            make_spec(name, "rmsnorm", in_shape, 5 * self.dim, arrays, names, (("eps", self.eps),))
        ]
