"""`data_dir` as a string or a list, and the samples cut into equal parts for input workers.

Model Zoo's published GPT-2 (weight streaming), GPT-3 and GPT-J configs give `data_dir` as a list
of directories, one per shard of the data set. Here:

* `data_dirs(value)` -> the list (a string is a list of one; None is empty);
* in-process (no input workers) the stream reads every directory, in list order, as one data
  set: the samples of data_dir[0] first, then data_dir[1], ...;
* with n input workers over several files (or directories) the SAMPLES, not the files, are cut
  into n' <= n contiguous parts (`part_sizes`): a worker may read part of a file, and files of
  any sizes give parts that differ by at most one sample. Each part is shuffled and batched on
  its own, and the consumer takes the workers' batches round-robin: global batch g is local
  batch g // n' of part g % n' (`ShardPlan`). The sizes are chosen so every part has the same
  number of batches per epoch, so one epoch serves every sample exactly once (with
  drop_last_batch: false; with true each part drops its own last partial batch, fewer than
  batch_size samples, as the Model Zoo's per-worker loaders do), and no part's epoch drifts
  against the others'. With drop_last_batch false an epoch may end in up to n' partial
  batches (one per part: PyTorch's DataLoader over iterable datasets, which the Model Zoo's
  HDF5IterableDataset is, does the same per worker). When the samples cannot give n parts
  of equal batch counts (fewer than one sample per part's last batch), fewer parts are used.
  The Model Zoo's HDF5IterableDataset deals whole FILES to its tasks (`files[task::num_tasks]`,
  so there each task (CS-2 input worker node) needs at least one file, and its older
  processors' `shard_list_interleaved` asserts "Number of processes should be less than number
  of files"), then cuts a task's samples contiguously across its DataLoader workers
  (`shard_list_of_chunks_contiguous`). Here every cut is by samples (input workers, and the
  streamers of csrun_wse / run.py CSX alike), so that constraint does not apply: any number
  of files, of any sizes, serves n' parts.
The sequence is a pure function of (params, number of parts), so a resumed run with the same
workers continues exactly; with a different number it continues at the same global batch of a
different cut (as in Model Zoo).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from cs2sim.runtime.data.stream import Plan
from cs2sim.runtime.data.workers import Dataset, Recipe, samples_of

__all__ = [
    "data_dirs",
    "shard",
    "part_sizes",
    "cut",
    "ShardPlan",
    "LocalPlan",
    "SliceRecipe",
    "SliceDataset",
    "ConcatRecipe",
    "ConcatDataset",
]


def data_dirs(value: str | Sequence[str] | None) -> list[str]:
    """`data_dir` as a list: None -> [], "a" -> ["a"], ["a", "b"] -> ["a", "b"]."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


T = TypeVar("T")


def shard(items: Sequence[T], n: int) -> list[list[T]]:
    """`items` dealt to n workers in order: worker k gets items k, k + n, k + 2n, ..."""
    if n < 1:
        raise ValueError(f"n must be >= 1, not {n}")
    return [list(items[k::n]) for k in range(n)]


def part_sizes(total: int, n: int, batch_size: int, drop_last: bool) -> list[int]:
    """Sizes of n' <= n contiguous parts of `total` samples, differing by at most one, that
    each make the same number of batches per epoch (>= 1); n' is the largest that can.

    A part of s samples makes s // B batches (drop_last) or ceil(s / B); near-equal sizes
    can still differ in that count (B = 4: 8 and 7 samples make 2 and 1 full batches), and
    then fewer parts are tried. One part always fits (the whole data set's own plan)."""
    if total < 1 or batch_size < 1 or n < 1:
        raise ValueError(f"cannot cut {total} samples into {n} parts of batches of {batch_size}")

    def batches(size: int) -> int:
        return size // batch_size if drop_last else -(-size // batch_size)

    for m in range(min(n, total), 1, -1):
        sizes = [total // m + (1 if k < total % m else 0) for k in range(m)]
        if batches(sizes[-1]) >= 1 and batches(sizes[0]) == batches(sizes[-1]):
            return sizes
    return [total]


@dataclass(frozen=True)
class LocalPlan:
    """What one worker needs: its part's Plan, addressed by GLOBAL batch numbers."""

    plan: Plan
    n: int
    total_batches: int | None  # of the whole stream: a worker stops below it (None: forever)

    def epoch_of(self, g: int) -> int:
        """The epoch of global batch g in its part."""
        return self.plan.epoch_of(g // self.n)

    def indices(self, g: int) -> np.ndarray:
        """Local sample indices of global batch g (which must belong to this part)."""
        return self.plan.indices(g // self.n)


@dataclass(frozen=True)
class ShardPlan:
    """The batch sequence of n parts read round-robin (see the module docstring): every part
    makes the same number of batches per epoch, so global epoch e is epoch e of every part."""

    plans: tuple[Plan, ...]

    def __post_init__(self) -> None:
        counts = {p.batches_per_epoch for p in self.plans}
        if len(counts) != 1 or counts == {0}:
            # a part with more batches would drift into its next epoch while others end theirs
            raise ValueError(f"every part must make as many batches per epoch, not {counts}")

    @property
    def n(self) -> int:
        """Number of parts (= input workers)."""
        return len(self.plans)

    @property
    def batch_size(self) -> int:
        """Samples per batch (the same in every part)."""
        return self.plans[0].batch_size

    @property
    def batches_per_epoch(self) -> int:
        """n x a part's batches."""
        return self.n * self.plans[0].batches_per_epoch

    @property
    def num_samples(self) -> int:
        """Samples in all parts."""
        return sum(p.num_samples for p in self.plans)

    @property
    def samples_per_epoch(self) -> int:
        """Samples served per epoch: all of them (drop_last false), else each part's full
        batches."""
        return sum(p.samples_per_epoch for p in self.plans)

    @property
    def total_batches(self) -> int | None:
        """Batches in the whole stream; None when it repeats forever."""
        return None if self.plans[0].repeat else self.batches_per_epoch

    def shard_of(self, g: int) -> int:
        """The part (worker) that makes global batch g."""
        return g % self.n

    def local(self, k: int) -> LocalPlan:
        """Part k's plan in global batch numbers (for its worker)."""
        return LocalPlan(self.plans[k], self.n, self.total_batches)

    def samples(self, g: int) -> np.ndarray:
        """GLOBAL sample indices of batch g (parts are contiguous: part k starts after the
        samples of parts 0..k-1)."""
        k = self.shard_of(g)
        return self.local(k).indices(g) + sum(p.num_samples for p in self.plans[:k])


class SliceDataset:
    """Samples [lo, hi) of a dataset, renumbered from 0."""

    def __init__(self, inner: Dataset, lo: int, hi: int) -> None:
        self.inner, self.lo, self.hi = inner, lo, hi

    def __len__(self) -> int:
        return self.hi - self.lo

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """Samples `idx` (B,) of the slice."""
        return self.inner.batch(np.asarray(idx) + self.lo)

    def epoch_batch(self, idx: np.ndarray, epoch: int) -> dict[str, np.ndarray]:
        """`batch` for datasets whose samples depend on the epoch."""
        return samples_of(self.inner, np.asarray(idx) + self.lo, epoch)

    def close(self) -> None:
        """Close the inner dataset's files."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class SliceRecipe:
    """Recipe: samples [lo, hi) of `inner` (a worker loads only the files its part touches)."""

    inner: Recipe
    lo: int
    hi: int

    def load(self) -> SliceDataset:
        """Load the inner recipe and keep the slice."""
        return SliceDataset(self.inner.load(), self.lo, self.hi)


def cut(
    recipes: Sequence[Recipe], counts: Sequence[int], sizes: Sequence[int]
) -> list[SliceRecipe]:
    """Recipes of contiguous parts of `sizes` samples over `recipes` (of `counts` samples
    each, read one after another): part k is a slice of the recipes it overlaps."""
    if sum(sizes) != sum(counts):
        raise ValueError(f"parts of {sum(sizes)} samples over {sum(counts)}")
    starts = np.concatenate([[0], np.cumsum(counts)])  # (R+1,)
    out: list[SliceRecipe] = []
    lo = 0
    for size in sizes:
        hi = lo + size
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi, side="left"))  # recipes [first, last)
        inner: Recipe = (
            recipes[first] if last - first == 1 else ConcatRecipe(tuple(recipes[first:last]))
        )
        out.append(SliceRecipe(inner, lo - int(starts[first]), hi - int(starts[first])))
        lo = hi
    return out


class ConcatDataset:
    """Datasets one after another: sample i of the whole is sample i - start[j] of part j."""

    def __init__(self, parts: Sequence[Dataset]) -> None:
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

        def of(part: Dataset, local: np.ndarray) -> dict[str, np.ndarray]:
            return samples_of(part, local, epoch)

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

    parts: tuple[Recipe, ...]

    def load(self) -> ConcatDataset:
        """Load every part."""
        return ConcatDataset([p.load() for p in self.parts])
