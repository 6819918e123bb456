"""The one base class of every layer and model: parameters, their gradients, train/eval mode.

Layers keep their own parameters in `self.p` and the matching gradients in `self.g` (same keys,
shapes and dtype). Sub-layers assigned as attributes are registered automatically (as in
PyTorch), so `parameters()` / `grads()` walk the tree with dotted names in registration order.
A weight shared by two layers (the tied embedding / output projection) is the SAME array in
both, is listed once (under the name of its first owner) and both uses accumulate into its one
gradient array.

Conventions every layer follows:
  * `forward(x)` caches what `backward` needs; `backward(dy) -> dx` ACCUMULATES (+=) into `self.g`.
  * neither method writes into its input arrays (a residual branch reuses them);
  * arrays returned by `forward`/`backward` may be buffers the layer reuses on its next call;
  * the math runs in the dtype of the input and parameters, so a layer converted with
    `astype(np.float64)` can be checked against finite differences.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cs2sim.runtime.numerics.precision import Policy

__all__ = ["Module", "FP32"]

FP32 = Policy("float32")  # the default policy: nothing is rounded, nothing is copied


class Module:
    """A layer or a group of layers (micrograd's `Module`, with manual forward/backward)."""

    training: bool = True
    children: dict[str, Module]  # set in __init__ past __setattr__ (which fills it)

    def __init__(self, policy: Policy = FP32) -> None:
        object.__setattr__(self, "children", {})  # name -> Module, in registration order
        self.p: dict[str, np.ndarray] = {}  # own parameters (float32 masters)
        self.g: dict[str, np.ndarray] = {}  # their gradients, accumulated by backward
        self.policy = policy
        self._bufs: dict[str, np.ndarray] = {}  # reusable scratch / output arrays

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, Module):
            self.children[name] = value
        object.__setattr__(self, name, value)

    # -- parameters ---------------------------------------------------------------------------
    def add_param(self, name: str, value: np.ndarray) -> np.ndarray:
        """Register a parameter and allocate its zeroed gradient."""
        self.p[name] = value
        self.g[name] = np.zeros_like(value)
        return value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """Every module of the tree once (first name wins), depth first, in registration order."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, m = stack.pop()
            if id(m) in seen:
                continue
            seen.add(id(m))
            yield name, m
            kids = [(f"{name}{k}.", c) for k, c in m.children.items()]
            stack.extend(reversed(kids))

    def _named(self, which: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        seen: set[int] = set()
        for prefix, m in self.named_modules():
            for k, v in m.p.items():
                if id(v) in seen:  # a tied weight is listed once
                    continue
                seen.add(id(v))
                out[prefix + k] = v if which == "p" else m.g[k]
        return out

    def parameters(self) -> dict[str, np.ndarray]:
        """Dotted name -> master array (updated in place by the optimizer; never rebind)."""
        return self._named("p")

    def grads(self) -> dict[str, np.ndarray]:
        """Dotted name -> gradient array, same keys and shapes as `parameters()`."""
        return self._named("g")

    def zero_grad(self) -> None:
        """Set every gradient to zero (in place)."""
        for g in self.grads().values():
            g.fill(0)

    def num_params(self) -> int:
        """Number of trainable scalars (a tied weight counts once)."""
        return int(sum(v.size for v in self.parameters().values()))

    # -- modes --------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Switch this module and every sub-module to training (dropout on) or eval mode."""
        for _, m in self.named_modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        """Switch to eval mode (dropout off)."""
        return self.train(False)

    def astype(self, dtype: type | np.dtype) -> Module:
        """Convert every parameter and gradient to `dtype` (float64 for gradient checks).

        This REBINDS the arrays (it is for tests); tied weights stay one array.
        """
        converted: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for _, m in self.named_modules():
            for k, v in list(m.p.items()):
                if id(v) not in converted:
                    converted[id(v)] = (v.astype(dtype), m.g[k].astype(dtype))
                m.p[k], m.g[k] = converted[id(v)]
            m._bufs.clear()
        return self

    # -- helpers for layers -------------------------------------------------------------------
    def buf(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A scratch array of `shape`, reused across steps (uninitialised)."""
        b = self._bufs.get(name)
        if b is None or b.shape != shape or b.dtype != dtype:
            b = np.empty(shape, dtype=dtype)
            self._bufs[name] = b
        return b

    def half(self, x: np.ndarray, name: str) -> np.ndarray:
        """`x` rounded to the policy's 16-bit format into a reused copy; `x` itself in fp32."""
        if not self.policy.enabled:
            return x
        return self.policy.cast(x, out=self.buf(name, x.shape, x.dtype))

    def accumulate(self, name: str, grad: np.ndarray) -> None:
        """Add a gradient contribution into `self.g[name]`, rounded as a CS-2 holds it."""
        self.g[name] += self.policy.cast(grad, out=grad) if self.policy.enabled else grad
