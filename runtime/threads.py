"""Thread settings of the runtime: waiting threads sleep, work is split by the runtime itself.

Why: a BLAS thread pool waits by spinning. OpenBLAS (numpy's BLAS) keeps an idle worker
busy-waiting for 2^28 cycles (~0.1 s) after every call, and inside one threaded GEMM its threads
wait for each other in yield loops; OpenMP pools (PyTorch, MKL) spin too. On a quiet machine that
saves microseconds; on a busy one a spinning thread takes the CPU from the thread with the work,
and a GEMM split over two threads waits a whole scheduler slice whenever one is descheduled
(measured here at load ~5: a 2-thread (256 x 50257) @ (50257 x 256) used 3-6x the CPU of the
1-thread one and took 2-8x as long). So:

1. Waiting threads sleep. At start-up the runtime sets, where the user has not:
     OPENBLAS_THREAD_TIMEOUT=4   OpenBLAS: an idle worker spins 2^4 cycles, then sleeps
     OMP_WAIT_POLICY=PASSIVE     any OpenMP runtime (libgomp, LLVM/Intel): waiting threads sleep
     KMP_BLOCKTIME=0             Intel/LLVM OpenMP: sleep at once after a parallel region
   Libraries read them when they LOAD, so `import cs2sim.runtime` sets them (runtime/__init__.py
   calls `set_env_defaults()`; a run.py imports runtime before numpy), and child processes
   inherit them.
2. The runtime splits its own work. `configure()` (called when a model is built,
   runtime/nn/model.py) sets BLAS to ONE thread per call (through threadpoolctl, a small
   pure-Python dependency) and runs large products and row-wise elementwise kernels in chunks on
   its own `workers()` threads (`run_chunks`; the kernels are in runtime/nn/parallel.py). Every
   thread, the caller included, takes the next chunk when it finishes one, so a descheduled thread
   just takes fewer chunks; waiting is a futex sleep, never a spin.
3. Thread counts fit the work: a product below SMALL_GEMM_MACS multiply-adds runs whole on the
   calling thread (splitting it costs more than a second thread saves).
4. Results never depend on the thread count or the load: chunks split rows or columns, never
   a sum, and each chunk is the same single-threaded BLAS computation, so the numbers are bit for
   bit those of one thread. (OpenBLAS's own threading is not: 1 and 2 threads differ in the last
   bit for some shapes.)

The worker count is CS2SIM_BLAS_THREADS, else OPENBLAS_NUM_THREADS / OMP_NUM_THREADS /
MKL_NUM_THREADS, else the cores this process may run on. `settings()` returns what
`configure()` found and set; it is logged at INFO.
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
from collections.abc import Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cs2sim.system import knobs

__all__ = [
    "SPIN_ENV",
    "SMALL_GEMM_MACS",
    "ThreadSettings",
    "set_env_defaults",
    "configure",
    "settings",
    "single_threaded_blas",
    "set_workers",
    "use_blas_threading",
    "available_cores",
    "workers",
    "idle_cores",
    "run_chunks",
    "ChunkFeed",
]

log = logging.getLogger("cs2sim.threads")

# name -> value the runtime sets when the user has not (see the module docstring)
SPIN_ENV: dict[str, str] = {
    "OPENBLAS_THREAD_TIMEOUT": "4",
    "OMP_WAIT_POLICY": "PASSIVE",
    "KMP_BLOCKTIME": "0",
}
# Variables by which a user fixes the thread count (the first one set wins).
USER_COUNT_ENV = (
    "CS2SIM_BLAS_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)

# Below this many multiply-adds a product runs on one thread: ~40 us on one core of this host
# (100 GFLOP/s), the order of one wake-up and join of a sleeping worker.
SMALL_GEMM_MACS = 2_000_000

_env_set: dict[str, str] = {}  # what set_env_defaults() set (not the user's own values)
_env_in_time: bool | None = None  # whether it ran before numpy (and so BLAS) was loaded
_settings: ThreadSettings | None = None
_libs: list[Any] | None = None  # threadpoolctl controllers of the loaded BLAS libraries


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def set_env_defaults(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put SPIN_ENV into the environment where the user has not set a value; -> what was set.

    Effective for BLAS / OpenMP libraries loaded AFTER this call (and for child processes).
    """
    global _env_in_time
    env = os.environ if environ is None else environ
    done: dict[str, str] = {}
    for name, value in SPIN_ENV.items():
        if name not in env:
            env[name] = value
            done[name] = value
    if environ is None:
        _env_set.update(done)
        if _env_in_time is None:
            _env_in_time = "numpy" not in sys.modules
    return done


def env_set_by_runtime() -> dict[str, str]:
    """The variables `set_env_defaults()` put into os.environ (a child can be given the user's
    environment by removing them, as the benchmark does for its PyTorch reference)."""
    return dict(_env_set)


@dataclass(frozen=True)
class ThreadSettings:
    """What is in effect, as `configure()` found and set it."""

    workers: int  # threads the runtime's kernels use (BLAS itself: one per call)
    cores: int  # cores this process may use
    libraries: tuple[str, ...]  # "openblas 0.3.31 (pthreads)", ...
    wait_env: dict[str, str] = field(default_factory=dict)  # SPIN_ENV names -> value in effect
    wait_in_time: bool = False  # the wait settings were in the environment before BLAS loaded
    user_count: str | None = None  # the variable by which the user fixed the count, if any

    def describe(self) -> str:
        """One line for the log."""
        waits = ", ".join(f"{k}={v}" for k, v in self.wait_env.items()) or "none"
        when = "before BLAS loaded" if self.wait_in_time else "AFTER BLAS loaded (no effect on it)"
        who = f" (set by {self.user_count})" if self.user_count else ""
        libs = "; ".join(self.libraries) or "no threaded BLAS found"
        return (
            f"{self.workers} kernel threads{who} of {self.cores} cores, BLAS 1 thread per "
            f"call ({libs}); wait settings {waits}, {when}; "
            f"one thread below {SMALL_GEMM_MACS:,} MACs a product"
        )


def _controllers() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded now ([] without threadpoolctl)."""
    global _libs
    if _libs is None:
        try:
            import numpy  # noqa: F401 - loads numpy's BLAS so threadpoolctl can find it
            from threadpoolctl import ThreadpoolController

            _libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        except Exception:  # noqa: BLE001 - threadpoolctl missing or unable to inspect: run as is
            _libs = []
    return _libs


def configure(threads: int | None = None) -> ThreadSettings:
    """Apply the runtime's thread settings once per process (later calls return the record).

    threads: worker threads of the runtime's kernels (default: `workers()`). Every BLAS call
    then runs single-threaded inside one worker: the runtime splits the work itself
    (runtime/nn/parallel.py), so BLAS's own pool, which spins while it waits, stays idle.
    """
    global _settings, _libs
    if _settings is not None and threads is None:
        return _settings
    if threads is not None:
        set_workers(threads)
    set_env_defaults()  # for libraries loaded from here on, and child processes
    _libs = None  # scan again: every BLAS loaded by now (numpy's, scipy's...) goes to 1 thread
    libs = _controllers()
    for lib in libs:
        lib.set_num_threads(1)
    _settings = ThreadSettings(
        workers=workers(),
        cores=available_cores(),
        libraries=tuple(
            f"{lib.internal_api} {lib.version} ({getattr(lib, 'threading_layer', '?')})"
            for lib in libs
        ),
        wait_env={k: os.environ[k] for k in SPIN_ENV if k in os.environ},
        # the user's own values were there when the process started; ours if set before numpy
        wait_in_time=bool(_env_in_time) or not _env_set,
        user_count=next((n for n in USER_COUNT_ENV if knobs.raw(n)), None),
    )
    # A developer's diagnostic (run with --logging DEBUG, or see docs/benchmarks.md): on the
    # console at INFO its "AFTER BLAS loaded (no effect on it)" read like a warning on every run.
    log.debug("thread settings: %s", _settings.describe())
    return _settings


_blas_threading = 0  # > 0: BLAS's own pool does the threading (the old way; benchmarks only)


def use_blas_threading(n: int) -> None:
    """Benchmarks only: go back to BLAS's own `n` threads and one runtime worker (the runtime
    as it was before this module), to measure the difference."""
    global _blas_threading
    _blas_threading = n
    set_workers(1)
    for lib in _controllers():
        lib.set_num_threads(n)


def single_threaded_blas() -> None:
    """Make sure BLAS runs single-threaded (an enclosing threadpoolctl block may have changed
    it since configure()); ~0.5 us when it already does."""
    if _blas_threading:
        return
    for lib in _controllers():
        if lib.get_num_threads() != 1:
            lib.set_num_threads(1)


def settings() -> ThreadSettings | None:
    """The record of `configure()`, or None before it ran."""
    return _settings


# ---------------------------------------------------------------------------------------------
# The runtime's own worker threads
# ---------------------------------------------------------------------------------------------
_pool: ThreadPoolExecutor | None = None
_workers = 0
_pool_lock = threading.Lock()
_in_chunk = threading.local()  # .active inside a chunk: a nested run_chunks runs serially


def workers() -> int:
    """Threads that run the runtime's chunked kernels (runtime/nn/parallel.py): the configured
    count (CS2SIM_BLAS_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, else the cores) — and 1
    inside a chunk, where a nested run_chunks runs on the calling thread alone: a kernel there
    (a pipelined stage's products beside another stage's) then runs whole instead of cut into
    blocks that only add calls (measured on 2 cores: a pair of decoder-layer forwards side by
    side took 13.6-14.6 ms with their kernels cut for 2 threads, 11.7-11.9 ms whole)."""
    if getattr(_in_chunk, "active", False):
        return 1
    global _workers
    if not _workers:
        for name in USER_COUNT_ENV:
            try:
                _workers = max(1, int(knobs.raw(name) or ""))
                break
            except ValueError:
                continue
        else:
            _workers = available_cores()
    return _workers


def set_workers(n: int) -> None:
    """Use `n` worker threads from now on (tests, benchmarks)."""
    global _workers, _pool
    with _pool_lock:
        _workers = max(1, int(n))
        if _pool is not None:
            _pool.shutdown(wait=True)
            _pool = None


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own pool when needed."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _helpers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, workers() - 1), thread_name_prefix="cs2sim-kernel")
        return _pool


def idle_cores() -> int:
    """Cores of this process that no other thread wants now: `available_cores()` less the
    threads the kernel counts runnable at this moment (the fourth field of /proc/loadavg, the
    caller included), at least 0; every core but the caller's where that file is missing.

    A helper thread only adds speed when a core is free for it: on a loaded Linux host the
    scheduler gives each session (autogroup) its share of the CPU whatever its thread count,
    so a second thread adds no CPU time, only the wait for it at the end. libgomp's
    OMP_DYNAMIC sizes its teams by the load average in the same spirit; the runnable count is
    the instantaneous form."""
    cores = available_cores()
    try:
        with open("/proc/loadavg", "rb") as f:
            runnable = int(f.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return cores - 1
    return max(0, cores - runnable)


def run_chunks(
    fn: Callable[..., object], n_chunks: int, slots: bool = False, idle_only: bool = False
) -> None:
    """Call fn(0) .. fn(n_chunks - 1), spread over the worker threads; returns when all are done.

    slots=True calls fn(i, slot) instead, slot in 0 .. workers() - 1 naming the thread running
    it (0: the caller): per-thread scratch can be an array indexed by slot.
    idle_only=True takes helper threads only for cores idle now (`idle_cores`): for work whose
    threads would only share the caller's CPU time on a loaded host (the input reader's).

    The calling thread works too, and every thread takes the next chunk when it finishes one,
    so a thread the OS has descheduled simply takes fewer: no thread waits for a slow one
    except at the end, and waiting threads sleep (a futex), they never spin. Chunks must write
    disjoint outputs; which thread runs a chunk never changes the result.
    """
    helpers = min(workers(), n_chunks) - 1
    if idle_only and helpers > 0:
        helpers = min(helpers, idle_cores())
    if helpers <= 0 or getattr(_in_chunk, "active", False):  # nested: run here (no deadlock)
        for i in range(n_chunks):
            fn(i, 0) if slots else fn(i)
        return
    counter = itertools.count()  # next() on it is atomic under the GIL
    errors: list[BaseException] = []

    import numpy as np  # loaded by now (the kernels use it); not at import: see set_env_defaults

    err = np.geterr()  # the caller's floating-point error handling (thread-local in numpy)

    def drain(slot: int) -> None:
        _in_chunk.active = True
        try:
            with np.errstate(**err):  # a helper handles overflow etc. as its caller does
                drain_chunks(slot)
        finally:
            _in_chunk.active = False

    def drain_chunks(slot: int) -> None:
        while not errors:
            i = next(counter)
            if i >= n_chunks:
                return
            try:
                fn(i, slot) if slots else fn(i)
            except BaseException as e:  # noqa: BLE001 - handed to the caller below
                errors.append(e)
                return

    pool = _helpers()
    futures = [pool.submit(drain, k + 1) for k in range(helpers)]
    drain(0)
    for f in futures:
        # a helper still queued (busy with another thread's chunks) has nothing left to do
        if not f.cancel():
            f.result()
    if errors:
        raise errors[0]


def _no_chunk(i: int, slot: int) -> None:
    """A finished ChunkFeed's fn."""


class ChunkFeed:
    """`run_chunks(fn, n, slots=True)` for chunks that become known a few at a time: helper
    threads start at once on the chunks fed so far (`add`) and sleep (a condition variable,
    never a spin) until more come; the caller feeds while it does serial work of its own (the
    input reader opens file k + 1 while file k's samples inflate), then takes its share and
    waits for the rest (`finish`), or stops them (`cancel`).

    Chunks are taken in the order fed, so when some fail every chunk before the first failed
    one has run: `finish` raises the error of the lowest failed chunk (the same one whatever
    the threads' timing). idle_only: helpers only for cores idle now (`idle_cores`), decided
    when the feed is made, as run_chunks decides when it starts."""

    def __init__(self, fn: Callable[[int, int], object], idle_only: bool = False) -> None:
        self._fn = fn
        self._cond = threading.Condition()
        self._fed = self._next = 0
        self._closed = self._stopped = False
        self._errors: list[tuple[int, BaseException]] = []
        helpers = 0 if getattr(_in_chunk, "active", False) else workers() - 1
        if idle_only and helpers > 0:
            helpers = min(helpers, idle_cores())
        self._futures: list[Any] = []
        if helpers > 0:
            import numpy as np  # loaded by now (see run_chunks)

            err = np.geterr()
            pool = _helpers()
            self._futures = [pool.submit(self._drain, k + 1, err) for k in range(helpers)]

    @property
    def helpers(self) -> int:
        """Helper threads asked for (0: the caller runs every chunk in `finish`)."""
        return len(self._futures)

    def add(self, n: int) -> None:
        """Chunks fed += n (numbered on from the last)."""
        with self._cond:
            self._fed += n
            self._cond.notify_all()

    def _take(self) -> int | None:
        with self._cond:
            while True:
                if self._stopped or self._errors:
                    return None
                if self._next < self._fed:
                    self._next += 1
                    return self._next - 1
                if self._closed:
                    return None
                self._cond.wait()

    def _drain(self, slot: int, err: Any) -> None:
        import numpy as np

        was, _in_chunk.active = getattr(_in_chunk, "active", False), True
        try:
            with np.errstate(**err):
                while (i := self._take()) is not None:
                    try:
                        self._fn(i, slot)
                    except BaseException as e:  # noqa: BLE001 - raised by finish
                        with self._cond:
                            self._errors.append((i, e))
                            self._cond.notify_all()
                        return
        finally:
            _in_chunk.active = was

    def _join(self) -> None:
        for f in self._futures:
            if not f.cancel():  # a helper still queued (the pool busy) has nothing to do
                f.result()
        self._futures = []
        # fn is often a bound method of an object that holds this feed: let go of it, so
        # that object (and the arrays it holds) is freed when its owner drops it, not at
        # the next garbage collection
        self._fn = _no_chunk

    def finish(self) -> None:
        """No more chunks: run what is left on this thread too, wait for the helpers, and
        raise the lowest failed chunk's error."""
        import numpy as np

        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._drain(0, np.geterr())
        self._join()
        if self._errors:
            raise min(self._errors, key=lambda x: x[0])[1]

    def cancel(self) -> None:
        """Stop: helpers end after the chunk they run; errors are dropped."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        try:
            self._join()
        except BaseException:  # noqa: BLE001 - the caller is failing already
            pass
