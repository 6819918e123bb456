"""Where a training step's time goes: exclusive wall time per kind of layer (host measurement).

    from bench.layer_profile import profile_step
    shares = profile_step(model, optimizer, step, steps=5)   # {"attention core": 0.012, ...}

Every module's forward and backward (and the optimizer's step) are wrapped, on the instances
only, with a timer that charges its EXCLUSIVE time (its own minus its children's) to the module's
category, so the categories add up to the step. Categories follow the issue's list: attention
(the core: q k^T, causal softmax, att v), the attention and MLP dense layers, layer norm, GELU,
the output projection, the loss (softmax cross-entropy), embeddings, the optimizer. A GELU fused
into the MLP's products (transformer.MLP: it runs on each block of the fc product as BLAS writes
it, and its backward on each block of proj's dx) is part of "dense (MLP + fused GELU)"; only an
unfused activation has its own row. Likewise the layer-norm rows and residual adds that GPT-2's
block runs inside a product (transformer.Block: ln_2 forward in the attention's output
projection, ln_2 and ln_1 backward in the MLP's and attention's dx products) are charged to that
product's row; "layer norm" is what still runs on its own (ln_1 and ln_f forward, ln_f
backward, and every layer norm of blocks that cannot fuse). The rest of
the step (residual adds, zero_grad, unscale/norm, Python) is "other". The wrappers cost ~2 us a
call, a fraction of a percent of a GPT step; they are removed afterwards.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from cs2sim.runtime.nn.activations import Activation
from cs2sim.runtime.nn.attention import CausalSelfAttention
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.embedding import Embedding, TiedProjection
from cs2sim.runtime.nn.layernorm import LayerNorm
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.module import Module

__all__ = ["profile_step", "category"]


def category(path: str, m: Module) -> str | None:
    """The profile category of module `m` at dotted `path`, or None (charged to its parent)."""
    if isinstance(m, CausalSelfAttention):
        return "attention core (qk^T, softmax, att v)"
    if isinstance(m, TiedProjection) or (isinstance(m, Dense) and path.endswith("out.")):
        return "output projection"
    if isinstance(m, Dense):
        return "attention dense (qkv, proj)" if ".attn." in path else "dense (MLP + fused GELU)"
    if isinstance(m, LayerNorm):
        return "layer norm"
    if isinstance(m, Activation):
        return m.name if m.name != "gelu_new" else "gelu"
    if isinstance(m, SoftmaxCrossEntropy):
        return "softmax cross-entropy"
    if isinstance(m, Embedding):
        return "embedding"
    return None


class _Clock:
    """A stack of running timers: a callee's time is subtracted from its caller's."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self.stack: list[float] = []  # child time accumulated by each running frame

    def wrap(self, label: str, fn: Callable) -> Callable:
        def timed(*a: Any, **k: Any) -> Any:
            self.stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                dt = time.perf_counter() - t0
                child = self.stack.pop()
                self.total[label] += dt - child
                if self.stack:
                    self.stack[-1] += dt

        return timed


def profile_step(
    model: Module, optimizer: Any, step: Callable[[], object], steps: int = 5
) -> dict[str, float]:
    """Mean exclusive seconds per step by category over `steps` runs of `step` (after 1 warm-up)."""
    step()
    clock = _Clock()
    patched: list[tuple[Any, str]] = []
    for path, m in model.named_modules():
        label = category(path, m)
        if label is None:
            continue
        for meth in ("forward", "backward"):
            setattr(m, meth, clock.wrap(label, getattr(m, meth)))
            patched.append((m, meth))
    optimizer.step = clock.wrap("optimizer", optimizer.step)
    patched.append((optimizer, "step"))
    try:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - t0) / steps
    finally:
        for obj, meth in patched:
            delattr(obj, meth)  # the class's method shows through again
    out = {k: v / steps for k, v in clock.total.items()}
    out["other (adds, zero_grad, unscale, Python)"] = max(0.0, wall - sum(out.values()))
    out["step (wall)"] = wall
    return out
