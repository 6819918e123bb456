"""Dense (fully connected) layer: y = x @ W + b, over the last axis of x.

The three products go through parallel.gemms (split over the runtime's worker threads). The
bias is added to each block of y as soon as BLAS has written it (in cache, on that block's
thread), and backward's two products (dW, dx) and the bias gradient share one pass over the
threads, dW's blocks added into the gradient as they come.
"""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.init import Init, glorot_uniform, zeros
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import Epilogue, Product, gemms, needs_rows
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Cast, Policy

__all__ = ["Dense"]


def _finisher(
    bias: np.ndarray | None, cast: Cast | None, epilogue: Epilogue | None
) -> Epilogue | None:
    """The epilogue of a product's blocks: + bias, the 16-bit rounding (activations and
    gradients leave a layer in 16 bits), then the caller's epilogue; None when there is nothing
    to do. Whole rows when the caller's epilogue needs them."""
    if bias is None and cast is None and epilogue is None:
        return None

    def finish(blk: np.ndarray, rows: slice, cols: slice) -> None:
        if bias is not None:
            blk += bias[cols]  # (r, c) + (c,)
        if cast is not None:
            cast(blk, out=blk)
        if epilogue is not None:
            epilogue(blk, rows, cols)

    return needs_rows(finish) if getattr(epilogue, "whole_rows", False) else finish


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

    def forward(self, x: np.ndarray, epilogue: Epilogue | None = None) -> np.ndarray:
        """x (..., n_in) -> y (..., n_out); `epilogue` (parallel.gemms) runs on each finished
        block of y (N, n_out), bias added, e.g. the next activation fused in."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.n_in)  # (N, n_in)  N = all leading positions
        w = self.half(self.p["weight"], "w")  # (n_in, n_out) the weights as the kernel uses them
        y = self.buf("y", (x2.shape[0], self.n_out), x2.dtype)  # (N, n_out)
        b = self.half(self.p["bias"], "b") if "bias" in self.p else None  # (n_out,)
        gemms([(x2, w, y, _finisher(b, self._cast(), epilogue))])
        self.x2, self.w = x2, w  # cache for backward
        return y.reshape(*lead, self.n_out)

    def backward(self, dy: np.ndarray, dx_epilogue: Epilogue | None = None) -> np.ndarray | None:
        """dy (..., n_out) -> dx (..., n_in); accumulates dW, db. `dx_epilogue` runs on each
        finished block of dx (N, n_in), e.g. the previous activation's backward, in place."""
        dy2 = dy.reshape(-1, self.n_out)  # (N, n_out)
        dw = self.buf("dw", self.p["weight"].shape, dy2.dtype)  # (n_in, n_out)
        gw, cast = self.g["weight"], self._cast()

        def add_dw(blk: np.ndarray, rows: slice, cols: slice) -> None:
            if cast is not None:
                cast(blk, out=blk)  # rounded as a CS-2 holds it (Module.accumulate)
            gw[rows, cols] += blk  # (r, c) into the gradient: blocks are disjoint

        products: list[Product] = [(self.x2.T, dy2, dw, add_dw)]  # dW (n_in, n_out) = x^T dy
        if "bias" in self.p:  # db (1, n_out) = 1^T dy: a product too, in the same pass
            db = self.buf("db", (1, self.n_out), dy2.dtype)
            products.append((self._ones(dy2.shape[0], dy2.dtype), dy2, db, None))
        dx: np.ndarray | None = None
        if self.needs_dx:  # dx (N, n_in) = dy W^T
            dx = self.dx_buffer(len(dy2), dy2.dtype)
            products.append((dy2, self.w.T, dx, _finisher(None, cast, dx_epilogue)))
        gemms(products)
        if "bias" in self.p:
            self.accumulate("bias", db[0])  # (n_out,)
        if dx is None:
            return None
        return dx.reshape(*dy.shape[:-1], self.n_in)

    def backward_dx(self, dy: np.ndarray, dx_epilogue: Epilogue | None = None) -> np.ndarray:
        """`backward` inside a network, where the input gradient is always wanted."""
        dx = self.backward(dy, dx_epilogue)
        if dx is None:
            raise RuntimeError("a Dense built with needs_dx=False has no input gradient")
        return dx

    def _cast(self) -> Cast | None:
        """The policy's 16-bit rounding, or None in fp32 (nothing to do)."""
        return self.policy.cast if self.policy.enabled else None

    def dx_buffer(self, n: int, dtype: np.dtype) -> np.ndarray:
        """The (n, n_in) array backward writes dx into (a caller may set up work on it first)."""
        return self.buf("dx", (n, self.n_in), dtype)

    def _ones(self, n: int, dtype: np.dtype) -> np.ndarray:
        """(1, n) ones: the bias gradient is the product 1^T dy (a BLAS sum over the rows)."""
        ones = self._bufs.get("ones")
        if ones is None or ones.shape != (1, n) or ones.dtype != dtype:
            ones = self._bufs["ones"] = np.ones((1, n), dtype)
        return ones

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "dense" kernel."""
        flops = 2 * self.n_in * self.n_out + (self.n_out if "bias" in self.p else 0)
        attrs = (("n_in", self.n_in), ("n_out", self.n_out), ("bias", "bias" in self.p))
        out = (*in_shape[:-1], self.n_out)
        return [make_spec(name, "dense", out, flops, tuple(self.p.values()), names, attrs)]
