"""Elementwise activations as one table: name -> (forward, backward, exact, flops per element).

forward(x) -> (y, cache); backward(dy, cache) -> dx. `exact` marks functions whose output is
already representable in the 16-bit format when the input is (relu, linear), so mixed precision
need not round them again.

gelu is GPT-2's tanh approximation (Hendrycks & Gimpel 2016, as in OpenAI's GPT-2 code and
PyTorch's `gelu(approximate="tanh")`), not the exact erf form:
    gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))),  k = sqrt(2 / pi)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import Epilogue, for_rows
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["ACTIVATIONS", "Activation"]

# Rows of a product's block that a fused GELU epilogue takes at a time (Activation.fused_*):
# its ~10 passes then stay in the core's L2 (64 rows of 1,024 floats: 256 KB an array) instead
# of streaming a 2 MB block through L3 once per pass.
SUB_ROWS = 64
_K = math.sqrt(2.0 / math.pi)
_C = 0.044715
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _relu(x: np.ndarray) -> tuple[np.ndarray, Any]:
    y = np.maximum(x, 0)  # (..., n)
    return y, y


def _relu_back(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    dx: np.ndarray = np.multiply(dy, y > 0)  # (..., n) the gradient flows where the unit was on
    return dx


def _tanh(x: np.ndarray) -> tuple[np.ndarray, Any]:
    y = np.tanh(x)  # (..., n)
    return y, y


def _tanh_back(dy: np.ndarray, y: np.ndarray) -> np.ndarray:
    dx: np.ndarray = np.square(y)  # (..., n) y^2
    np.subtract(1, dx, out=dx)  # 1 - y^2
    dx *= dy
    return dx


def _elu(x: np.ndarray) -> tuple[np.ndarray, Any]:
    neg = np.expm1(np.minimum(x, 0))  # (..., n) exp(x) - 1 on the negative side, 0 elsewhere
    y = np.where(x > 0, x, neg)  # (..., n)
    return y, (x, y)


def _elu_back(dy: np.ndarray, cache: Any) -> np.ndarray:
    x, y = cache
    return dy * np.where(x > 0, 1, y + 1)  # d/dx (exp(x) - 1) = exp(x) = y + 1


def _selu(x: np.ndarray) -> tuple[np.ndarray, Any]:
    neg = np.expm1(np.minimum(x, 0))  # (..., n)
    neg *= _SELU_ALPHA
    y = np.where(x > 0, x, neg)  # (..., n)
    y *= _SELU_SCALE
    return y, (x, y)


def _selu_back(dy: np.ndarray, cache: Any) -> np.ndarray:
    x, y = cache
    return dy * np.where(x > 0, _SELU_SCALE, y + _SELU_SCALE * _SELU_ALPHA)  # (..., n)


def _linear(x: np.ndarray) -> tuple[np.ndarray, Any]:
    return x, None


def _linear_back(dy: np.ndarray, cache: Any) -> np.ndarray:
    return dy


def _gelu(x: np.ndarray) -> tuple[np.ndarray, Any]:
    t, y = np.empty_like(x), np.empty_like(x)  # (..., n)
    _gelu_into(x, t, y)
    return y, (x, t)  # backward needs x and t


def _gelu_back(dy: np.ndarray, cache: Any) -> np.ndarray:
    x, t = cache
    u: np.ndarray = np.empty_like(x)  # (..., n)
    _gelu_back_into(dy, x, t, u)
    return u


def _gelu_into(x: np.ndarray, t: np.ndarray, y: np.ndarray) -> None:
    """gelu(x) into y, and t = tanh(k (x + c x^3)) (kept for backward) into t."""
    # 1) t = tanh(k (x + c x^3)), built in t with in-place passes
    np.square(x, out=t)  # (r, n) x^2
    t *= _C * _K
    t += _K  # k (1 + c x^2)
    t *= x  # k (x + c x^3)
    np.tanh(t, out=t)
    # 2) y = 0.5 x (1 + t)
    np.add(t, 1, out=y)
    y *= x
    y *= 0.5


def _gelu_derivative_into(x: np.ndarray, t: np.ndarray, u: np.ndarray) -> None:
    """gelu'(x) into u, from x and the forward's t."""
    # d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
    np.square(x, out=u)  # (r, n) x^2
    u *= 3 * _C * _K
    u += _K  # k (1 + 3 c x^2)
    u *= x  # x k (1 + 3 c x^2)
    v = np.square(t)  # (r, n) t^2 (one block: stays in cache)
    np.subtract(1, v, out=v)  # 1 - t^2
    u *= v
    u += t
    u += 1
    u *= 0.5


def _gelu_back_into(dy: np.ndarray, x: np.ndarray, t: np.ndarray, u: np.ndarray) -> None:
    """dy * gelu'(x) into u (rows of the layer's dx buffer)."""
    _gelu_derivative_into(x, t, u)
    u *= dy


def _gelu_grad_inplace(d: np.ndarray, x: np.ndarray, t: np.ndarray) -> None:
    """d *= gelu'(x), t = tanh(k (x + c x^3)) from the forward; d may be a product's block."""
    u = np.empty_like(d)  # (r, n)
    _gelu_derivative_into(x, t, u)
    d *= u


Fwd = Callable[[np.ndarray], tuple[np.ndarray, Any]]
Bwd = Callable[[np.ndarray, Any], np.ndarray]

# name -> (forward, backward, exact in 16 bits, forward flops per element)
ACTIVATIONS: dict[str, tuple[Fwd, Bwd, bool, int]] = {
    "relu": (_relu, _relu_back, True, 1),
    "tanh": (_tanh, _tanh_back, False, 4),
    "elu": (_elu, _elu_back, False, 4),
    "selu": (_selu, _selu_back, False, 5),
    "linear": (_linear, _linear_back, True, 0),
    "identity": (_linear, _linear_back, True, 0),
    "gelu": (_gelu, _gelu_back, False, 10),
    "gelu_new": (
        _gelu,
        _gelu_back,
        False,
        10,
    ),  # Hugging Face's name for the same tanh approximation
}

# The kernel kind a name compiles to (the aliases share one kernel).
_KIND = {"identity": "linear", "gelu_new": "gelu"}


class Activation(Module):
    """An elementwise activation from ACTIVATIONS."""

    def __init__(self, name: str, policy: Policy = FP32) -> None:
        super().__init__(policy)
        if name not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {name!r}; expected one of {', '.join(ACTIVATIONS)}"
            )
        self.name = name
        self._fwd, self._bwd, self._exact, self._flops = ACTIVATIONS[name]

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (...) -> y (...)."""
        if self._fwd is _gelu and x.ndim >= 2:
            return self._gelu_forward(x)
        y, self.cache = self._fwd(x)  # (...)
        if not self._exact:
            self.policy.cast(y, out=y)
        return y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dy (...) -> dx (...)."""
        if self._bwd is _gelu_back and dy.ndim >= 2:
            return self._gelu_backward(dy)
        dx = self._bwd(dy, self.cache)  # (...)
        if dx is not dy:
            self.policy.cast(dx, out=dx)
        return dx

    # GELU, the widest elementwise work of a transformer, runs in row blocks over the worker
    # threads (parallel.for_rows): the same passes and values as _gelu / _gelu_back, but each
    # block's ~10 passes stay in cache, and the buffers are reused from step to step.
    # Fused with the products around it (transformer.MLP): GELU's forward runs on each block of
    # the fc product as BLAS writes it, its backward on each block of the next layer's dx, while
    # the block is in cache and on the thread that computed it; no pass of its own over the
    # threads. Same passes and values as the unfused kernels.
    @property
    def fusable(self) -> bool:
        """Whether `fused_forward` / `fused_backward` exist for this activation (GELU)."""
        return self._fwd is _gelu

    def fused_forward(
        self, shape: tuple[int, int], dtype: np.dtype
    ) -> tuple[Epilogue, np.ndarray, np.ndarray]:
        """-> (epilogue for the blocks of the (N, n) pre-activation, y (N, n)): the epilogue
        computes y = gelu(block) for each block; forward's cache is set once all have run."""
        t = self.buf("t", shape, dtype)  # (N, n) tanh(k (x + c x^3)), kept for backward
        y = self.buf("y", shape, dtype)  # (N, n)
        cast = self.policy.cast if self.policy.enabled else None

        def epilogue(blk: np.ndarray, rows: slice, cols: slice) -> None:
            yb, tb = y[rows, cols], t[rows, cols]
            for r0 in range(0, len(blk), SUB_ROWS):  # sub-blocks of the product's block
                r1 = r0 + SUB_ROWS
                _gelu_into(blk[r0:r1], tb[r0:r1], yb[r0:r1])
                if cast is not None:
                    cast(yb[r0:r1], out=yb[r0:r1])

        return epilogue, y, t

    def fused_backward(self, x2: np.ndarray, t: np.ndarray) -> Epilogue:
        """-> epilogue turning each block of dL/dy (N, n) into dL/dx in place; x2 and t are the
        forward's pre-activation and tanh buffers."""
        cast = self.policy.cast if self.policy.enabled else None

        def epilogue(blk: np.ndarray, rows: slice, cols: slice) -> None:
            xb, tb = x2[rows, cols], t[rows, cols]
            for r0 in range(0, len(blk), SUB_ROWS):
                r1 = r0 + SUB_ROWS
                _gelu_grad_inplace(blk[r0:r1], xb[r0:r1], tb[r0:r1])
                if cast is not None:
                    cast(blk[r0:r1], out=blk[r0:r1])

        return epilogue

    def _gelu_forward(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        x2 = x.reshape(-1, n)  # (N, n)
        t = self.buf("t", x2.shape, x.dtype)  # (N, n) tanh(k (x + c x^3)), kept for backward
        y = self.buf("y", x2.shape, x.dtype)  # (N, n)

        def rows(r0: int, r1: int) -> None:
            _gelu_into(x2[r0:r1], t[r0:r1], y[r0:r1])
            self.policy.cast(y[r0:r1], out=y[r0:r1])

        for_rows(rows, x2.shape[0], n * x.itemsize)
        self.cache = (x2, t)
        return y.reshape(x.shape)

    def _gelu_backward(self, dy: np.ndarray) -> np.ndarray:
        x2, t = self.cache
        dy2 = dy.reshape(x2.shape)  # (N, n)
        dx = self.buf("dx", x2.shape, dy.dtype)  # (N, n)

        def rows(r0: int, r1: int) -> None:
            _gelu_back_into(dy2[r0:r1], x2[r0:r1], t[r0:r1], dx[r0:r1])
            self.policy.cast(dx[r0:r1], out=dx[r0:r1])

        for_rows(rows, x2.shape[0], x2.shape[1] * dy.itemsize)
        return dx.reshape(dy.shape)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One elementwise kernel."""
        kind = _KIND.get(self.name, self.name)
        return [make_spec(name, kind, in_shape, self._flops * in_shape[-1])]
