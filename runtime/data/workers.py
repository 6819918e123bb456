"""Input workers: real processes, each producing its own shard of the batch sequence.

With n workers started at batch `start`, worker k loads the data itself (from its recipe: file
paths, never the arrays) and makes batches start+k, start+k+n, ... into its own bounded queue
(`prefetch_factor` batches). The consumer takes batch g from queue (g - start) % n, so the
sequence is exactly the in-process one whatever the workers' speeds; a fast worker simply
blocks on its full queue.

Workers never re-run the consumer's `__main__` script (multiprocessing would otherwise execute
a run.py that lacks an `if __name__ == "__main__":` guard once per worker); they need only
runtime/ modules, which they import by name.

Start: workers are forked by multiprocessing's fork server, a fresh interpreter started once per
consumer process that has imported the data layer (numpy, h5py, the readers) before any worker
is asked of it: no inherited locks or threads, as with spawn, but a worker starts in
milliseconds instead of the ~0.3 s CPU of a fresh interpreter importing numpy, which each
eval, each resume and each `csrun_wse` step with input workers paid again (PyTorch's DataLoader
offers the same choice as `multiprocessing_context="forkserver"`). Where $TMPDIR is too long a
path for the server's Unix socket, workers are spawned, each a fresh interpreter, as before.

Lifetime: workers are daemonic, ignore Ctrl-C (the consumer handles it and stops them), and
poll every POLL_S for the stop event and for the consumer (multiprocessing's parent sentinel:
a pipe the consumer holds open, so no pid is compared that the kernel may reuse): if the
consumer dies, even by SIGKILL, they exit on their own, and the fork server with the last.
`close()` (also run by a weakref finalizer at garbage collection and interpreter exit) sets
the stop event, joins, then terminates and kills stragglers, so no worker is left behind.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any, Protocol, runtime_checkable

import numpy as np

from cs2sim.system.errors import CsError, RuntimeFailure

__all__ = [
    "POLL_S",
    "BatchPlan",
    "Dataset",
    "EpochDataset",
    "PartsPlan",
    "Recipe",
    "WorkerPool",
    "batch_at",
]

POLL_S = 0.1  # how often a blocked worker or consumer looks at stop / liveness
JOIN_S = 5.0  # grace period for workers to leave on their own at close()
# what the fork server imports once, so that its forked workers have it (the readers' modules
# are imported by unpickling a recipe, and all live in this package)
_PRELOAD = ["cs2sim.runtime.data"]
# the fork server listens on a Unix socket at $TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX, and a
# socket's path holds at most 107 bytes on Linux (Python 3.11 has no abstract-namespace server)
_SOCKET_ROOM = 107 - len("/pymp-XXXXXXXX/listener-XXXXXXXX")


def _context() -> ForkServerContext | SpawnContext:
    """The fork server, or spawn (a fresh interpreter a worker, no socket) where $TMPDIR is too
    long a path for the server's socket."""
    if len(os.fsencode(tempfile.gettempdir())) <= _SOCKET_ROOM:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)  # read when the server first starts
        return ctx
    return mp.get_context("spawn")


class Dataset(Protocol):
    """N samples, gathered into a batch dict by index.

    A dataset whose samples change with the epoch (dynamic masking) also defines
    `epoch_batch(idx, epoch)` (EpochDataset); `batch_at` calls it with batch g's epoch.
    """

    def __len__(self) -> int: ...
    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]: ...


class EpochDataset(Dataset, Protocol):
    """A Dataset whose samples depend on the epoch."""

    def epoch_batch(self, idx: np.ndarray, epoch: int) -> dict[str, np.ndarray]: ...


class Recipe(Protocol):
    """A small picklable description that loads a Dataset (in the consumer or in a worker)."""

    def load(self) -> Dataset: ...


class BatchPlan(Protocol):
    """Which samples make batch g (stream.Plan; a part's shards.LocalPlan)."""

    @property
    def total_batches(self) -> int | None: ...
    def indices(self, g: int) -> np.ndarray: ...
    def epoch_of(self, g: int) -> int: ...


@runtime_checkable
class PartsPlan(Protocol):
    """The plan of several parts read round-robin, one recipe each (shards.ShardPlan)."""

    def shard_of(self, g: int) -> int: ...
    def local(self, k: int) -> BatchPlan: ...


def batch_at(data: Dataset, plan: BatchPlan, g: int) -> dict[str, np.ndarray]:
    """Batch g of `plan` from `data`: its samples, and their epoch when the data uses it."""
    return samples_of(data, plan.indices(g), plan.epoch_of(g))


def samples_of(data: Dataset, idx: np.ndarray, epoch: int | None) -> dict[str, np.ndarray]:
    """Samples `idx` (B,) of `data`, with their epoch when it uses one (an EpochDataset) and
    the epoch is known. Asked by name, not by isinstance: isinstance on a runtime-checkable
    Protocol walks its attributes, ~30 us a batch, a tenth of a gzip batch's inflating."""
    epoch_batch = getattr(data, "epoch_batch", None) if epoch is not None else None
    if epoch_batch is None:
        return data.batch(idx)
    out: dict[str, np.ndarray] = epoch_batch(idx, epoch)
    return out


@dataclass
class _Failure:
    """What a worker sends instead of a batch when it fails."""

    worker: int
    error: BaseException | None  # None when the exception does not pickle
    text: str


# what a worker sends: (g, batch g) or (g, why it failed)
_Item = tuple[int, "dict[str, np.ndarray] | _Failure"]


def _orphaned() -> bool:
    """True once the consumer that started this worker has ended (or closed the pool)."""
    parent = mp.parent_process()
    return parent is not None and not parent.is_alive()


def _put(out: Queue[_Item], item: _Item, stop: Event) -> bool:
    """Block until `item` is queued; False when told to stop or orphaned."""
    while True:
        if stop.is_set() or _orphaned():
            return False
        try:
            out.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue


def _worker_main(
    recipe: Recipe,
    plan: BatchPlan,
    worker: int,
    n: int,
    start: int,
    out: Queue[_Item],
    stop: Event,
) -> None:
    """Body of worker `worker` of `n`: batches start+worker, start+worker+n, ..."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    g = start + worker
    try:
        data = recipe.load()
        total = plan.total_batches
        while total is None or g < total:
            if not _put(out, (g, batch_at(data, plan, g)), stop):
                return
            g += n
    except BaseException as e:  # noqa: BLE001 - every failure goes to the consumer
        try:
            pickle.dumps(e)
            err: BaseException | None = e
        except Exception:  # noqa: BLE001
            err = None
        if not _put(out, (g, _Failure(worker, err, f"{type(e).__name__}: {e}")), stop):
            return
    finally:
        # Stay until stopped, so queued batches reach the consumer; then leave without
        # flushing (the consumer may not want them).
        while not stop.wait(POLL_S) and not _orphaned():
            pass
        out.cancel_join_thread()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """While starting workers, make `__main__` look like an interactive session to the fork
    server, which would otherwise run its script in each worker it prepares."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, Any] = {
        k: main.__dict__[k] for k in ("__file__", "__spec__") if k in main.__dict__
    }
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.update(saved)
        if "__spec__" not in saved:
            main.__dict__.pop("__spec__", None)


def _shutdown(stop: Event, procs: list[BaseProcess], queues: list[Queue[_Item]]) -> None:
    """Stop, join, then terminate/kill whatever is left; release the queues."""
    stop.set()
    deadline = time.monotonic() + JOIN_S
    started = [p for p in procs if p.pid is not None]
    for p in started:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.terminate()
            p.join(1.0)
        if p.is_alive():
            p.kill()
            p.join()
    for q in queues:
        q.cancel_join_thread()
        q.close()
    for p in started:
        p.close()


def _work_of(
    recipe: Recipe | Sequence[Recipe], plan: BatchPlan | PartsPlan, first: int
) -> tuple[Recipe, BatchPlan]:
    """(recipe, plan) of the worker whose first batch is `first`: the same for every worker,
    or with a sharded plan (runtime/data/shards.py: `recipe` is one recipe per shard) the
    recipe and local plan of the shard that makes batch `first` (and every n-th after it)."""
    if isinstance(plan, PartsPlan):  # it has shard_of
        if not isinstance(recipe, Sequence):
            raise TypeError("a plan of parts needs one recipe per part")
        k = plan.shard_of(first)
        return recipe[k], plan.local(k)
    if isinstance(recipe, Sequence):
        raise TypeError("one plan needs one recipe, not one per part")
    return recipe, plan


class WorkerPool:
    """n spawned input workers producing batches start, start+1, ... in shards."""

    def __init__(
        self,
        recipe: Recipe | Sequence[Recipe],
        plan: BatchPlan | PartsPlan,
        num_workers: int,
        prefetch_factor: int,
        start: int = 0,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, not {num_workers}")
        self.start, self.n = start, num_workers
        ctx = _context()
        self._stop = ctx.Event()
        self._queues: list[Queue[_Item]] = [
            ctx.Queue(maxsize=prefetch_factor) for _ in range(num_workers)
        ]
        self._procs: list[BaseProcess] = [
            ctx.Process(
                target=_worker_main,
                name=f"cs2sim-input-worker-{k}",
                daemon=True,
                args=(
                    *_work_of(recipe, plan, start + k),
                    k,
                    num_workers,
                    start,
                    q,
                    self._stop,
                ),
            )
            for k, q in enumerate(self._queues)
        ]
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._procs, self._queues)
        try:
            with _main_hidden():
                for p in self._procs:
                    p.start()
        except BaseException:
            self.close()
            raise
        self.pids = [p.pid for p in self._procs]

    def get(self, g: int) -> dict[str, np.ndarray]:
        """Batch g (blocks until its worker has it)."""
        k = (g - self.start) % self.n
        q, proc = self._queues[k], self._procs[k]
        while True:
            try:
                got, payload = q.get(timeout=POLL_S)
                break
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeFailure(
                        f"input worker {k} exited unexpectedly (exit code {proc.exitcode}); "
                        f"check host memory or set num_workers: 0 to load input in-process."
                    ) from None
        if isinstance(payload, _Failure):
            if isinstance(payload.error, CsError):
                raise payload.error
            raise RuntimeFailure(
                f"input worker {payload.worker} failed ({payload.text}); "
                f"set num_workers: 0 to reproduce it in-process."
            )
        if got != g:  # cannot happen unless the sharding above is broken
            raise RuntimeFailure(
                f"input worker {k} sent batch {got} where {g} was expected; report this bug."
            )
        return payload

    @property
    def alive(self) -> bool:
        """True while the pool has not been closed."""
        return self._finalizer.alive

    def close(self) -> None:
        """Stop and reap every worker (idempotent)."""
        self._finalizer()
