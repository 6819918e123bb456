"""BatchStream: the deterministic sequence of batches a run consumes, resumable at any batch.

The sequence is a pure function of (data, batch_size, shuffle, seed, split, drop_last, repeat):
1. batch g lives in epoch e = g // batches_per_epoch at position i = g % batches_per_epoch;
2. epoch e's sample order is arange(N), or with shuffling the permutation drawn from
   SeedSequence([seed, split, e]), so any epoch can be recomputed without replaying the others;
3. batch g is samples order[i*B : (i+1)*B] (a last partial batch only with drop_last false);
4. repeat false ends the stream after epoch 0.
So the data position (epoch, index) is the whole state: a resumed run continues with exactly the
batches the uninterrupted run would have seen, and input workers can each compute their own
shard (worker k of n makes batches k, k+n, ...) that the consumer reads back in order.

`wait_seconds` is the time `__next__` spent waiting for input (producing it in-process, or
blocked on the workers). The first batch after workers (re)start is counted apart, in
`startup_seconds` (interpreter start-up and data loading in each worker): a CS-2's input workers
start with the job, so that wait says nothing about the pipeline keeping up. `start()` does that
start-up ahead of time (workers up, the next batch fetched and held), so the trainer can bring
the pipeline up before GlobalRate's clock starts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

# the Dataset and Recipe protocols live beside the workers that load them
from cs2sim.runtime.data.workers import Dataset, PartsPlan, Recipe, WorkerPool, batch_at

__all__ = [
    "SPLIT_SALT",
    "batch_at",
    "Plan",
    "Dataset",
    "Recipe",
    "Stream",
    "StreamPlan",
    "PlanOfParts",
    "DataPosition",
    "BatchStream",
]

SPLIT_SALT = {"train": 0, "eval": 1}


@functools.lru_cache(maxsize=4)
def _order(n: int, shuffle: bool, seed: int, salt: int, epoch: int) -> np.ndarray:
    if shuffle:
        rng = np.random.default_rng(np.random.SeedSequence([seed % 2**64, salt, epoch]))
        order = rng.permutation(n)  # (N,)
    else:
        order = np.arange(n)  # (N,)
    order.flags.writeable = False  # shared through the cache
    return order


@dataclass(frozen=True)
class Plan:
    """Which samples make batch g (see the module docstring); picklable for the workers."""

    num_samples: int
    batch_size: int
    shuffle: bool
    seed: int
    salt: int = 0
    drop_last: bool = True
    repeat: bool = True

    @property
    def batches_per_epoch(self) -> int:
        """Batches in one pass over the data."""
        n, b = self.num_samples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    @property
    def samples_per_epoch(self) -> int:
        """Samples served per epoch (a dropped partial batch is not served)."""
        if self.drop_last:
            return self.batches_per_epoch * self.batch_size
        return self.num_samples

    @property
    def total_batches(self) -> int | None:
        """Batches in the whole stream; None when it repeats forever."""
        return None if self.repeat else self.batches_per_epoch

    def epoch_of(self, g: int) -> int:
        """The epoch batch g belongs to."""
        return g // self.batches_per_epoch

    def indices(self, g: int) -> np.ndarray:
        """Sample indices of batch g, (B,) (fewer for a last partial batch)."""
        epoch, i = divmod(g, self.batches_per_epoch)
        order = _order(self.num_samples, self.shuffle, self.seed, self.salt, epoch)
        return order[i * self.batch_size : (i + 1) * self.batch_size]


class Stream(Protocol):
    """What a training loop reads of its input: batches in order, and the data position to
    save and restore (BatchStream; the chief's RemoteStream, runtime/job/remote_stream.py)."""

    def __next__(self) -> dict[str, np.ndarray]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, d: dict[str, Any]) -> None: ...


class StreamPlan(Protocol):
    """What a BatchStream reads of its plan: a Plan, or a ShardPlan of parts
    (runtime/data/shards.py; one recipe per part, read by input workers only)."""

    @property
    def batch_size(self) -> int: ...
    @property
    def batches_per_epoch(self) -> int: ...
    @property
    def samples_per_epoch(self) -> int: ...
    @property
    def total_batches(self) -> int | None: ...


class PlanOfParts(StreamPlan, PartsPlan, Protocol):
    """A ShardPlan (runtime/data/shards.py): parts read round-robin, one input worker each."""


class DataPosition:
    """The data position every stream shares: global batch index `_g` over `batches_per_epoch`.

    BatchStream and the chief's RemoteStream (runtime/job/remote_stream.py) both keep it, and both
    write the same checkpoint keys, so a run resumes with or without input streamers.
    """

    _g: int
    batches_per_epoch: int
    batch_size: int

    @property
    def position(self) -> tuple[int, int]:
        """(epoch, index within the epoch) of the next batch."""
        return divmod(self._g, self.batches_per_epoch)

    def state_dict(self) -> dict[str, Any]:
        """The data position, for the checkpoint."""
        epoch, index = self.position
        return {
            "epoch": epoch,
            "index": index,
            "batches_per_epoch": self.batches_per_epoch,
            "batch_size": self.batch_size,
        }

    def index_of(self, d: dict[str, Any]) -> int:
        """The global batch index a saved position continues at."""
        epoch, index = int(d["epoch"]), int(d["index"])
        if index >= self.batches_per_epoch:  # saved with another batch size or data size
            epoch, index = epoch + 1, 0
        return epoch * self.batches_per_epoch + index


class BatchStream(DataPosition):
    """Iterator of batch dicts, deterministic for a seed; `state_dict` is the data position."""

    def __init__(
        self,
        recipe: Recipe | Sequence[Recipe],
        plan: Plan | PlanOfParts,
        *,
        source: str,
        data: Dataset | None = None,
        num_workers: int = 0,
        prefetch_factor: int = 2,
        worker_recipe: Recipe | Sequence[Recipe] | None = None,
    ) -> None:
        if plan.batches_per_epoch < 1:
            raise ValueError("a BatchStream needs at least one batch per epoch")
        self.plan = plan
        self.batch_size = plan.batch_size
        self.samples_per_epoch = plan.samples_per_epoch
        self.batches_per_epoch = plan.batches_per_epoch
        self.source = source
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.wait_seconds = 0.0  # time __next__ waited for input
        self.startup_seconds = 0.0  # time to the first batch of freshly started workers
        self.batches_served = 0
        self._recipe = recipe
        self._worker_recipe = worker_recipe or recipe
        self._data = data
        self._g = 0  # global index of the next batch
        self._pool: WorkerPool | None = None
        self._pending: dict[str, np.ndarray] | None = None  # batch _g, fetched by start()
        self._closed = False

    # -- iteration ------------------------------------------------------------------------------
    def __iter__(self) -> BatchStream:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self._closed:
            raise RuntimeError("BatchStream is closed")
        if self._pending is not None:
            batch, self._pending = self._pending, None
        elif self._exhausted():
            raise StopIteration
        else:
            batch = self._fetch()
        self.batches_served += 1
        self._g += 1
        return batch

    def start(self) -> None:
        """Start the input workers (or load the data) and have batch `position` ready."""
        if self._closed:
            raise RuntimeError("BatchStream is closed")
        if self._pending is None and not self._exhausted():
            self._pending = self._fetch()

    def _exhausted(self) -> bool:
        total = self.plan.total_batches
        return total is not None and self._g >= total

    def _fetch(self) -> dict[str, np.ndarray]:
        """Batch _g, timed as start-up (workers just started) or as waiting for input."""
        t0 = time.perf_counter()
        starting = self.num_workers > 0 and self._pool is None
        if self.num_workers > 0:
            if self._pool is None:
                self._pool = WorkerPool(
                    self._worker_recipe,
                    self.plan,
                    self.num_workers,
                    self.prefetch_factor,
                    start=self._g,
                )
            batch = self._pool.get(self._g)
        else:
            if not isinstance(self.plan, Plan) or isinstance(self._recipe, Sequence):
                raise ValueError("a BatchStream of parts is read by input workers only")
            if self._data is None:
                self._data = self._recipe.load()
            batch = batch_at(self._data, self.plan, self._g)
        if starting:
            self.startup_seconds += time.perf_counter() - t0
        else:
            self.wait_seconds += time.perf_counter() - t0
        return batch

    # -- position -------------------------------------------------------------------------------
    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Continue from a saved position (an index past a smaller epoch starts the next one)."""
        g = self.index_of(d)
        if g != self._g:
            self._pending = None  # fetched for the old position
            if self._pool is not None:
                self._pool.close()  # its workers are producing from the old position
                self._pool = None
        self._g = g

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the input workers and close the data's files (idempotent)."""
        self._closed = True
        self._pending = None
        if self._data is not None and hasattr(self._data, "close"):
            self._data.close()
        self._data = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        epoch, index = self.position
        return (
            f"BatchStream({self.source}, batch_size={self.batch_size}, "
            f"epoch={epoch}, index={index}, workers={self.num_workers})"
        )
