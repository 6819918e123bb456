"""`data_dir` as a string or a list, and a list sharded across input workers in order.

Model Zoo's published GPT-2 (weight streaming), GPT-3 and GPT-J configs give `data_dir` as a list
of directories, one per shard of the data set. Here:

* `data_dirs(value)` -> the list (a string is a list of one; None is empty);
* in-process (no input workers) the stream reads every directory, in list order, as one data
  set: the samples of data_dir[0] first, then data_dir[1], ...;
* with n input workers and a list of m >= 2 directories, the list is SHARDED across the workers
  in order, as Model Zoo's data processors assign files to workers: worker k of
  n' = min(n, m) reads only directories k, k + n', k + 2n', ... (`shard`), shuffles and batches
  its own shard, and the consumer takes the workers' batches round-robin: global batch g is
  local batch g // n' of shard g % n' (`ShardPlan`). The sequence is still a pure function of
  (params, number of workers), so a resumed run with the same workers continues exactly; with
  a different number of workers it continues at the same global batch of a different sharding
  (as in Model Zoo). One epoch is n' x the smallest shard's batches, so no shard runs dry first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cs2sim.runtime.data.stream import Plan

__all__ = ["data_dirs", "shard", "ShardPlan", "LocalPlan", "ConcatRecipe", "ConcatDataset"]


def data_dirs(value: str | Sequence[str] | None) -> list[str]:
    """`data_dir` as a list: None -> [], "a" -> ["a"], ["a", "b"] -> ["a", "b"]."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def shard(items: Sequence[Any], n: int) -> list[list[Any]]:
    """`items` dealt to n workers in order: worker k gets items k, k + n, k + 2n, ..."""
    if n < 1:
        raise ValueError(f"n must be >= 1, not {n}")
    return [list(items[k::n]) for k in range(n)]


@dataclass(frozen=True)
class LocalPlan:
    """What one worker needs: its shard's Plan, addressed by GLOBAL batch numbers."""

    plan: Plan
    n: int
    total_batches: int | None  # of the whole stream: a worker stops below it (None: forever)

    def epoch_of(self, g: int) -> int:
        """The epoch of global batch g in its shard."""
        return self.plan.epoch_of(g // self.n)

    def indices(self, g: int) -> np.ndarray:
        """Local sample indices of global batch g (which must belong to this shard)."""
        return self.plan.indices(g // self.n)


@dataclass(frozen=True)
class ShardPlan:
    """The batch sequence of n shards read round-robin (see the module docstring)."""

    plans: tuple[Plan, ...]

    @property
    def n(self) -> int:
        """Number of shards (= input workers)."""
        return len(self.plans)

    @property
    def batch_size(self) -> int:
        """Samples per batch (the same in every shard)."""
        return self.plans[0].batch_size

    @property
    def batches_per_epoch(self) -> int:
        """n x the smallest shard's batches: every shard contributes equally to an epoch."""
        return self.n * min(p.batches_per_epoch for p in self.plans)

    @property
    def samples_per_epoch(self) -> int:
        """Samples served per epoch."""
        return self.batches_per_epoch * self.batch_size

    @property
    def total_batches(self) -> int | None:
        """Batches in the whole stream; None when it repeats forever."""
        return None if self.plans[0].repeat else self.batches_per_epoch

    def shard_of(self, g: int) -> int:
        """The shard (worker) that makes global batch g."""
        return g % self.n

    def local(self, k: int) -> LocalPlan:
        """Shard k's plan in global batch numbers (for its worker)."""
        return LocalPlan(self.plans[k], self.n, self.total_batches)


class ConcatDataset:
    """Datasets one after another: sample i of the whole is sample i - start[j] of part j."""

    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in self.parts])])  # (P+1,)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def close(self) -> None:
        """Close the parts that hold files."""
        for p in self.parts:
            close = getattr(p, "close", None)
            if close is not None:
                close()

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The samples `idx` (B,) in that order, gathered from their parts."""
        return self.epoch_batch(idx, None)

    def epoch_batch(self, idx: np.ndarray, epoch: int | None) -> dict[str, np.ndarray]:
        """`batch`, passing the epoch on to parts whose samples depend on it."""

        def of(part: Any, local: np.ndarray) -> dict[str, np.ndarray]:
            if epoch is not None and hasattr(part, "epoch_batch"):
                return part.epoch_batch(local, epoch)
            return part.batch(local)

        if len(self.parts) == 1:
            return of(self.parts[0], idx)
        part = np.searchsorted(self.starts, idx, side="right") - 1  # (B,)
        pieces: dict[int, dict[str, np.ndarray]] = {}
        for j in np.unique(part):
            rows = part == j
            pieces[int(j)] = of(self.parts[j], idx[rows] - self.starts[j])
        keys = next(iter(pieces.values())).keys()
        out: dict[str, np.ndarray] = {}
        for key in keys:
            first = pieces[int(part[0])][key]
            arr = np.empty((len(idx), *first.shape[1:]), dtype=first.dtype)  # (B, ...)
            for j, piece in pieces.items():
                arr[part == j] = piece[key]
            out[key] = arr
        return out


@dataclass(frozen=True)
class ConcatRecipe:
    """Recipe: several recipes' datasets, concatenated in order (also run inside a worker)."""

    parts: tuple[Any, ...]

    def load(self) -> ConcatDataset:
        """Load every part."""
        return ConcatDataset([p.load() for p in self.parts])
