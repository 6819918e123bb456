"""BLAS and OpenMP thread settings of the runtime: waiting threads sleep, thread counts fit the work.

Why: a BLAS thread pool waits for its next job by spinning. OpenBLAS (numpy's BLAS) keeps an idle
worker busy-waiting for 2^28 cycles (~0.1 s) after every call before it sleeps; OpenMP pools
(PyTorch, MKL) spin too. On a quiet machine that buys a few microseconds of wake-up; on a busy
one the spinning threads take CPU from the thread that has the actual work (this runtime's
elementwise passes run between matmuls, while the BLAS workers spin) and from everything else on
the machine. Measured before this module: gpt2 tiny used 11x the CPU time for the same work at
load ~20. So the runtime sets, at start-up:

  OPENBLAS_THREAD_TIMEOUT=4   OpenBLAS pthreads: an idle worker spins 2^4 cycles, then sleeps
  OMP_WAIT_POLICY=PASSIVE     any OpenMP runtime (libgomp, LLVM/Intel): waiting threads sleep
  KMP_BLOCKTIME=0             Intel/LLVM OpenMP: sleep at once after a parallel region

Each only when the user has not set it (theirs wins). They are read when the library LOADS, so
they must be in the environment before numpy is imported: `import runtime` does it
(runtime/__init__.py calls `set_env_defaults()`; a run.py imports runtime before numpy).
`configure()` (called when a model is built, runtime/nn/model.py) records what is in effect (and
sets the BLAS thread count when CS2SIM_BLAS_THREADS asks, through threadpoolctl, a scikit-learn
dependency) and logs it; `settings()` returns that record.

Thread counts for the work's size: a threaded BLAS splits every call and joins its threads again.
For a small product the join costs more than the second thread saves, and on a busy machine a
join can wait a whole scheduler time slice for a descheduled worker. `blas_threads(n)` switches
the count for a block (~1 us: one call into the library), and `threads_for(macs)` says how many
a product of `macs` multiply-adds should use: one below SMALL_GEMM_MACS. The choice depends on
shapes only, never on timing, so a run's numbers do not depend on the machine's load (OpenBLAS
results can differ in the last bit between 1 and 2 threads for some shapes).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "SPIN_ENV",
    "SMALL_GEMM_MACS",
    "ThreadSettings",
    "set_env_defaults",
    "configure",
    "settings",
    "blas_threads",
    "threads_for",
    "available_cores",
]

log = logging.getLogger("cs2sim.threads")

# name -> value the runtime sets when the user has not (see the module docstring)
SPIN_ENV: dict[str, str] = {
    "OPENBLAS_THREAD_TIMEOUT": "4",
    "OMP_WAIT_POLICY": "PASSIVE",
    "KMP_BLOCKTIME": "0",
}
# Variables by which a user fixes the BLAS thread count; configure() then leaves it alone.
USER_COUNT_ENV = ("CS2SIM_BLAS_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                  "MKL_NUM_THREADS")

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

    blas_threads: int  # threads a large BLAS call uses
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
        return (f"BLAS threads {self.blas_threads}{who} of {self.cores} cores; {libs}; "
                f"wait settings {waits}, {when}; one thread below {SMALL_GEMM_MACS:,} MACs")


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

    threads: a BLAS thread count to set; default CS2SIM_BLAS_THREADS when set. Otherwise the
    count is left as the library chose it at load time (every core of the process's affinity,
    or the user's OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS), and a limit an
    enclosing threadpoolctl block set (as the tests do) is kept.
    """
    global _settings
    if _settings is not None and threads is None:
        return _settings
    set_env_defaults()  # for libraries loaded from here on, and child processes
    libs = _controllers()
    user = next((n for n in USER_COUNT_ENV if os.environ.get(n)), None)
    if threads is None and user == "CS2SIM_BLAS_THREADS":
        try:
            threads = max(1, int(os.environ[user]))
        except ValueError:
            log.warning("CS2SIM_BLAS_THREADS=%r is not a whole number; ignored",
                        os.environ[user])
    if threads is not None:
        for lib in libs:
            lib.set_num_threads(threads)
    _settings = ThreadSettings(
        blas_threads=max((lib.get_num_threads() for lib in libs), default=1),
        cores=available_cores(),
        libraries=tuple(f"{lib.internal_api} {lib.version} ({getattr(lib, 'threading_layer', '?')})"
                        for lib in libs),
        wait_env={k: os.environ[k] for k in SPIN_ENV if k in os.environ},
        # the user's own values were there when the process started; ours if set before numpy
        wait_in_time=bool(_env_in_time) or not _env_set,
        user_count=user,
    )
    log.info("thread settings: %s", _settings.describe())
    return _settings


def settings() -> ThreadSettings | None:
    """The record of `configure()`, or None before it ran."""
    return _settings


def threads_for(macs: float) -> int | None:
    """BLAS threads for a product of `macs` multiply-adds: 1 when small, else None (as set)."""
    return 1 if macs < SMALL_GEMM_MACS else None


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """Run the block with at most `n` BLAS threads (None: as set), then restore the count.

    Reads the library's count each time (~1 us), so an enclosing threadpoolctl limit is kept.
    """
    libs = _controllers() if n is not None else []
    prev = [lib.get_num_threads() for lib in libs]
    if not libs or all(p <= n for p in prev):
        yield
        return
    for lib in libs:
        lib.set_num_threads(n)
    try:
        yield
    finally:
        for lib, p in zip(libs, prev, strict=True):
            lib.set_num_threads(p)
