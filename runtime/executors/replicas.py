"""Replicas of a model for the CS-2 executors: shards of a batch, computed block by block.

Both CS-2 executors split a global batch into shards (pipelined: micro-batches in flight through
the stages; weight streaming: one shard per CS-X) and run the model's blocks on each shard
(runtime/nn/model.py: `block.forward(x)` / `block.backward(dy)`, the last block the loss head).
A layer caches its activations for backward, so every shard in flight needs its own layer
instances: a *replica* is a deep copy of the model's module tree whose parameter and gradient
arrays are REPLACED by arrays the executor chooses (the wafer's copy, the SwarmX receive buffer),
never copied per replica. Replicas share the model's dropout generator.

Same numbers as the host (CPU) executor, which runs the whole batch at once:
  * loss: the loss heads normalise by their own rows (1/b, or 1/(b*T)); shard i's loss is
    weighted by b_i / B and its backward seeded with loss_scale * b_i / B, so the summed shard
    gradients are the full-batch gradient (up to the order of float additions);
  * dropout: the host draws one mask of the whole batch per dropout layer, layer after layer.
    `MaskBank` draws exactly that mask (same shape, same order of draws from the same generator)
    the first time any shard reaches the layer, and hands each shard its rows. Shards reach a
    layer's first use in the model's layer order on both schedules (a pipeline stage sees
    micro-batch 0 before any later stage does), so the draws happen in the host's order.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from cs2sim.runtime.nn.dropout import Dropout

__all__ = ["Shard", "MaskBank", "make_replica", "shard_batch", "block_param_names"]


@dataclass
class Shard:
    """Rows [lo, hi) of the global batch of B rows."""

    lo: int = 0
    hi: int = 0
    total: int = 1

    @property
    def weight(self) -> float:
        """This shard's share of the batch mean: b / B."""
        return (self.hi - self.lo) / self.total


def shard_batch(
    batch: dict[str, np.ndarray], n: int
) -> tuple[list[dict[str, np.ndarray]], list[Shard]]:
    """Split every array of `batch` along axis 0 into n near-equal contiguous shards (views)."""
    B = len(next(iter(batch.values())))
    n = max(1, min(n, B))
    bounds = [(B * i) // n for i in range(n + 1)]  # contiguous, sizes differ by at most one
    shards = [Shard(bounds[i], bounds[i + 1], B) for i in range(n)]
    parts = [{k: v[s.lo : s.hi] for k, v in batch.items()} for s in shards]
    return parts, shards


class MaskBank:
    """Whole-batch dropout masks of the current step, drawn on first use, sliced per shard."""

    def __init__(self) -> None:
        self.batch = 0
        self.masks: dict[str, np.ndarray] = {}

    def reset(self, batch_size: int) -> None:
        """Forget the previous step's masks (call before each step's forward)."""
        self.batch = batch_size
        self.masks.clear()

    def mask(self, name: str, layer: Dropout, row_shape: tuple[int, ...]) -> np.ndarray:
        """keep (B, *row_shape) bool of layer `name`, drawn as the host draws it."""
        keep = self.masks.get(name)
        if keep is None:
            u = layer.rng.random((self.batch, *row_shape), dtype=np.float32)  # (B, ...)
            keep = self.masks[name] = u >= layer.rate
        return keep


def _install_masks(replica: Any, bank: MaskBank, shard: Shard) -> None:
    """Make every Dropout of `replica` take its mask rows from `bank` (instance-level forward)."""
    for name, m in replica.named_modules():
        if not isinstance(m, Dropout):
            continue

        def forward(x: np.ndarray, m: Dropout = m, name: str = name) -> np.ndarray:
            if not m.active or m.fixed_mask is not None:
                return Dropout.forward(m, x)
            m.fixed_mask = bank.mask(name, m, x.shape[1:])[shard.lo : shard.hi]
            try:
                return Dropout.forward(m, x)
            finally:
                m.fixed_mask = None

        m.forward = forward  # type: ignore[method-assign]  # this replica's module only


# Scratch buffers a layer writes and consumes inside ONE backward call (the weight-gradient
# products before they are added into the gradient): replicas that run one after another can
# share them, which saves one weight-sized array per layer and replica.
WEIGHT_SCRATCH = frozenset({"dw", "de"})


class _SharedScratch(dict[str, Any]):
    """A layer's scratch buffers where the WEIGHT_SCRATCH ones live in a dict shared by all
    replicas of that layer (Module.buf only uses get and item assignment)."""

    def __init__(self, shared: dict[str, Any]) -> None:
        super().__init__()
        self.shared = shared

    def get(self, key: Any, default: Any = None) -> Any:
        return self.shared.get(key, default) if key in WEIGHT_SCRATCH else super().get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        if key in WEIGHT_SCRATCH:
            self.shared[key] = value
        else:
            super().__setitem__(key, value)

    def clear(self) -> None:
        super().clear()
        self.shared.clear()


def make_replica(
    model: Any,
    params: dict[int, np.ndarray] | None,
    grads: dict[int, np.ndarray] | None,
    *,
    bank: MaskBank | None = None,
    shard: Shard | None = None,
    share_rng: bool = True,
    scratch: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """A copy of `model`'s module tree for one shard.

    params / grads map id(original array) -> the array the replica uses instead (None: copy
    them, i.e. a separate memory holding the same values). Scratch buffers start empty; with
    `scratch` (one dict for all replicas that run one after another, never concurrently) their
    WEIGHT_SCRATCH buffers are shared. The dropout generator is shared with `model` unless
    share_rng is False.
    """
    memo: dict[int, Any] = {}
    for path, m in model.named_modules():
        memo[id(m._bufs)] = {} if scratch is None else _SharedScratch(scratch.setdefault(path, {}))
        for k, v in m.p.items():
            if params is not None:
                memo[id(v)] = params[id(v)]
            if grads is not None:
                memo[id(m.g[k])] = grads[id(v)]
    if share_rng:
        for attr in ("drop_rng", "init_rng"):
            rng = getattr(model, attr, None)
            if rng is not None:
                memo[id(rng)] = rng
    replica = copy.deepcopy(model, memo)
    if bank is not None:
        _install_masks(replica, bank, shard if shard is not None else Shard())
    return replica


def block_param_names(model: Any) -> list[list[str]]:
    """For each block, the model-level names of every array it reads (a tied weight appears in
    each block that uses it, under the name model.parameters() gives it)."""
    by_id = {id(a): n for n, a in model.parameters().items()}
    return [[by_id[id(a)] for a in block.parameters().values()] for block in model.blocks]
