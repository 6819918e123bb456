"""One helper: analytic gradients of a layer vs float64 central finite differences (tinygrad style).

The scalar checked is L = sum(w * layer(x)) with a fixed random w (or, for a loss layer whose
forward returns a float, L = w * loss with w passed to backward as the loss scale). The layer is
converted to float64 first (`Module.astype`), so the finite differences are accurate to ~1e-9.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cs2sim.runtime.nn.module import Module

Forward = Callable[[Module, list[np.ndarray]], Any]
Backward = Callable[[Module, Any], Any]


def _default_forward(layer: Module, xs: list[np.ndarray]) -> Any:
    return layer.forward(*xs)


def _default_backward(layer: Module, w: Any) -> Any:
    return layer.backward(w)


def _objective(layer: Module, xs: list[np.ndarray], w: Any, forward: Forward) -> float:
    y = forward(layer, xs)
    return float(np.sum(np.asarray(y, dtype=np.float64) * w))


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """|a - b| / (|a| + |b|) in the 2-norm (0 when both are 0)."""
    den = np.linalg.norm(a) + np.linalg.norm(b)
    return 0.0 if den == 0 else float(np.linalg.norm(a - b) / den)


def numeric_grad(f: Callable[[], float], x: np.ndarray, eps: float) -> np.ndarray:
    """Central differences of f() with respect to every element of x (perturbed in place)."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        up = f()
        flat[i] = old - eps
        down = f()
        flat[i] = old
        gflat[i] = (up - down) / (2 * eps)
    return g


def check_layer(
    layer_factory: Callable[[], Module],
    input_shapes: Sequence[tuple[int, ...]],
    *,
    inputs: Sequence[np.ndarray] | None = None,
    grad_inputs: Sequence[int] | None = None,
    forward: Forward = _default_forward,
    backward: Backward = _default_backward,
    eps: float = 1e-6,
    tol: float = 1e-6,
    seed: int = 0,
) -> dict[str, float]:
    """Assert the layer's input and parameter gradients match finite differences; return the errors.

    input_shapes: shapes of random float64 inputs (ignored when `inputs` is given, e.g. int ids).
    grad_inputs: which inputs backward returns gradients for (default: every float input, in order;
    backward's result is one array or a tuple of them).
    """
    rng = np.random.default_rng(seed)
    layer = layer_factory().astype(np.float64)
    if inputs is None:
        xs = [rng.standard_normal(s) for s in input_shapes]
    else:
        xs = [
            np.array(x, dtype=np.float64)
            if np.issubdtype(np.asarray(x).dtype, np.floating)
            else np.asarray(x)
            for x in inputs
        ]
    if grad_inputs is None:
        grad_inputs = [i for i, x in enumerate(xs) if np.issubdtype(x.dtype, np.floating)]
    # 1) the weighting of the outputs
    y = forward(layer, xs)
    w = rng.standard_normal(np.shape(y)) if np.ndim(y) else float(rng.uniform(0.5, 2.0))
    # 2) analytic gradients
    layer.zero_grad()
    forward(layer, xs)
    dxs = backward(layer, w)
    if not isinstance(dxs, tuple):
        dxs = (dxs,)
    analytic = {  # copies: layers reuse their output buffers
        f"input{i}": np.array(dxs[k], dtype=np.float64).reshape(xs[i].shape)
        for k, i in enumerate(grad_inputs)
    }
    analytic.update({k: g.copy() for k, g in layer.grads().items()})
    # 3) numeric gradients, one array at a time
    errors: dict[str, float] = {}
    targets = {f"input{i}": xs[i] for i in grad_inputs} | layer.parameters()
    for name, arr in targets.items():
        num = numeric_grad(lambda: _objective(layer, xs, w, forward), arr, eps)
        errors[name] = rel_error(analytic[name], num)
        assert errors[name] < tol, f"{name}: relative error {errors[name]:.2e} >= {tol:.0e}"
    return errors
