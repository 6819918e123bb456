"""Dense (fully connected) layer: y = x @ W + b, over the last axis of x.

The three products go through parallel.gemm (split over the runtime's worker threads).
"""

from __future__ import annotations

import numpy as np

from runtime.nn.init import Init, glorot_uniform, zeros
from runtime.nn.module import FP32, Module
from runtime.nn.parallel import gemm
from runtime.nn.spec import LayerSpec, make_spec
from runtime.precision import Policy

__all__ = ["Dense"]


class Dense(Module):
    """x (..., n_in) -> (..., n_out); W (n_in, n_out), optional b (n_out,)."""

    def __init__(
        self,
        n_in: int,
        n_out: int,
        rng: np.random.Generator,
        bias: bool = True,
        init: Init = glorot_uniform,
        policy: Policy = FP32,
        needs_dx: bool = True,
    ) -> None:
        super().__init__(policy)
        self.n_in, self.n_out = n_in, n_out
        # needs_dx False for a first layer: its input is data, so skip the dx matmul (1/3 of it)
        self.needs_dx = needs_dx
        self.add_param("weight", init(rng, (n_in, n_out)))
        if bias:
            self.add_param("bias", zeros(rng, (n_out,)))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., n_in) -> y (..., n_out)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.n_in)  # (N, n_in)  N = all leading positions
        w = self.half(self.p["weight"], "w")  # (n_in, n_out) the weights as the kernel uses them
        y = gemm(x2, w, self.buf("y", (x2.shape[0], self.n_out), x2.dtype))  # (N, n_out)
        if "bias" in self.p:
            y += self.half(self.p["bias"], "b")  # (N, n_out) + (n_out,)
        self.policy.cast(y, out=y)  # activations leave the layer in 16 bits
        self.x2, self.w = x2, w  # cache for backward
        return y.reshape(*lead, self.n_out)

    def backward(self, dy: np.ndarray) -> np.ndarray | None:
        """dy (..., n_out) -> dx (..., n_in); accumulates dW, db."""
        dy2 = dy.reshape(-1, self.n_out)  # (N, n_out)
        dw = self.buf("dw", self.p["weight"].shape, dy2.dtype)  # (n_in, n_out)
        gemm(self.x2.T, dy2, dw)
        self.accumulate("weight", dw)
        if "bias" in self.p:
            self.accumulate("bias", dy2.sum(axis=0))  # (n_out,)
        if not self.needs_dx:
            return None
        dx = gemm(dy2, self.w.T, self.buf("dx", self.x2.shape, dy2.dtype))  # (N, n_in)
        self.policy.cast(dx, out=dx)
        return dx.reshape(*dy.shape[:-1], self.n_in)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "dense" kernel."""
        flops = 2 * self.n_in * self.n_out + (self.n_out if "bias" in self.p else 0)
        attrs = (("n_in", self.n_in), ("n_out", self.n_out), ("bias", "bias" in self.p))
        out = (*in_shape[:-1], self.n_out)
        return [make_spec(name, "dense", out, flops, tuple(self.p.values()), names, attrs)]
