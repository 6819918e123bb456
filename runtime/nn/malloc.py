"""Keep freed memory in the process: large numpy temporaries otherwise cost page faults every step.

glibc serves blocks above M_MMAP_THRESHOLD (128 KiB, adapted upward to at most 32 MiB) with
fresh mmap()s and hands them back on free(), and trims the heap top above M_TRIM_THRESHOLD. A
training step allocates and frees the same multi-megabyte arrays every step, so each one is
page-faulted and zeroed again by the kernel: measured here as 1.2-1.5x on the small GPT. Raising
both thresholds keeps that memory in the heap for reuse. The cost is that the process holds on
to its peak heap, which a training process reaches on its first step anyway.
No-op off glibc, and when MALLOC_MMAP_THRESHOLD_ is set by the user.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

__all__ = ["tune_allocator"]

_M_TRIM_THRESHOLD = -1  # glibc mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 1 << 30  # blocks below 1 GiB come from the heap
_TRIM_THRESHOLD = 2**31 - 1  # give back only a free heap top above 2 GiB (the int maximum)

_done = False


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True if they were set."""
    global _done
    if _done:
        return True
    _done = True
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False  # the user chose
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc (macOS, musl without mallopt): nothing to do
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) == 1)
    ok = bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1) and ok
    return ok
