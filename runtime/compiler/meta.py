"""Build a model WITHOUT its weights: shape-only arrays, for graph extraction ("meta" mode).

The compiler reads the graph from the runtime's own model (`model.layer_graph(batch)`), never
from a second description of it. Building GPT-J 6B for real would allocate and draw 6e9 random
weights (tens of GB, minutes); a CS-2 compile needs only shapes. So the model is constructed
with two stand-ins, as PyTorch's `device="meta"` does:

* `MetaGenerator` replaces the model's random generators: every draw returns a `MetaArray`.
* `MetaArray` is an ndarray subclass over ONE zero-stride element (`np.broadcast_to`): it has
  the real shape and size, costs 4 bytes, and its ufuncs (`w *= std`, `abs(z) > 2`) return
  meta arrays without computing; `zeros_like` and friends return meta arrays too.

Small arrays the layers build directly with numpy (layer-norm gains, sinusoid/rotary tables of
max_positions rows) stay real: they are tiny. Nothing in a meta model may be trained.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

__all__ = ["MetaArray", "MetaGenerator", "meta_models", "is_meta"]


def _meta(shape: Any, dtype: Any = np.float32) -> MetaArray:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape or ())
    return np.broadcast_to(np.zeros((), dtype=dtype), shape).view(MetaArray)


class MetaArray(np.ndarray):
    """A shape with no data (one shared zero element, all strides 0)."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if out:  # in place (w *= s): nothing to compute
            return out[0] if len(out) == 1 else out
        if method != "__call__":
            return _meta(())
        shapes = [np.shape(x) for x in inputs]
        dtype = np.result_type(
            *[x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype for x in inputs]
        )
        return _meta(np.broadcast_shapes(*shapes), dtype)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in (np.zeros_like, np.ones_like, np.empty_like, np.full_like):
            a = args[0]
            return _meta(a.shape, kwargs.get("dtype") or a.dtype)
        if func is np.flatnonzero:
            return np.zeros(0, dtype=np.intp)  # a meta array holds only zeros
        if func is np.copyto:
            return None
        return super().__array_function__(func, types, args, kwargs)

    def reshape(self, *shape: Any, **kwargs: Any) -> Any:
        """A meta array of the new shape (no copy ever)."""
        new = shape[0] if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)) else shape
        flat = np.lib.stride_tricks.as_strided(np.zeros(1), (self.size,), (0,))  # a view
        return _meta(flat.reshape(new).shape, self.dtype)

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        """A meta array of the new dtype."""
        return _meta(self.shape, dtype)

    def copy(self, *args: Any, **kwargs: Any) -> Any:
        """Itself: there is nothing to copy."""
        return _meta(self.shape, self.dtype)


def is_meta(a: Any) -> bool:
    """True for an array built in meta mode."""
    return isinstance(a, MetaArray)


class MetaGenerator:
    """Stands in for `np.random.Generator`: every draw is a MetaArray of the asked shape."""

    def _draw(self, *args: Any, size: Any = None, dtype: Any = np.float32, **kw: Any) -> Any:
        shape = size if size is not None else (args[0] if args else ())
        return _meta(shape, dtype)

    def standard_normal(self, size: Any = None, dtype: Any = np.float32, out: Any = None) -> Any:
        """A meta array."""
        return _meta(size if size is not None else (), dtype)

    def random(self, size: Any = None, dtype: Any = np.float32, out: Any = None) -> Any:
        """A meta array."""
        return _meta(size if size is not None else (), dtype)

    def normal(self, loc: float = 0.0, scale: float = 1.0, size: Any = None) -> Any:
        """A meta array."""
        return _meta(size if size is not None else (), np.float64)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        """A meta array."""
        return _meta(size if size is not None else (), np.float64)

    def integers(
        self,
        low: int,
        high: int | None = None,
        size: Any = None,
        dtype: Any = np.int64,
        endpoint: bool = False,
    ) -> Any:
        """A meta array."""
        return _meta(size if size is not None else (), dtype)

    @property
    def bit_generator(self) -> Any:
        """A real (unused) bit generator, so rng_state() still works."""
        return np.random.PCG64(0)


@contextlib.contextmanager
def meta_models() -> Iterator[None]:
    """Within the block, models built get MetaGenerators (no weight is drawn or stored)."""
    import cs2sim.runtime.nn.model as model_module

    real = model_module._generator
    # a MetaGenerator stands in for np.random.Generator (duck-typed: it draws meta arrays)
    model_module._generator = lambda seed, stream: cast(np.random.Generator, MetaGenerator())
    try:
        yield
    finally:
        model_module._generator = real
