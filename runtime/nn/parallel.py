"""Kernels split over the runtime's worker threads: products and row-wise elementwise passes.

`gemm(a, b, out)` is `np.matmul(a, b, out=out)` for 2-D float arrays, cut into row blocks (or
column blocks, whichever side is longer) that the workers of runtime/threads.py take in turn,
each block one single-threaded BLAS call. Never split along the summed axis, so every element is
the same dot product as in one whole single-threaded call: the result is bit for bit identical
whatever the thread count or the load. numpy releases the GIL inside BLAS and inside ufunc
loops, so the blocks really run side by side.

`for_rows(fn, n_rows)` runs fn(r0, r1) over row ranges the same way: for elementwise work
whose rows are independent (GELU, softmax rows, layer norm rows). Besides the threads, a block
of rows fits the core's L2 cache, so a kernel's several passes over it stay in cache instead of
streaming the whole array through memory once per pass.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from runtime.threads import SMALL_GEMM_MACS, run_chunks, single_threaded_blas, workers

__all__ = ["gemm", "for_rows", "row_bounds", "CHUNK_MACS", "CHUNK_BYTES"]

CHUNK_MACS = 4_000_000  # multiply-adds per product block: ~40 us a block, >> ~10 us of overhead
CHUNK_BYTES = 1 << 20  # at most this many bytes of an elementwise kernel's widest array a block
MAX_CHUNKS = 32
MIN_BLOCK = 128  # rows (or columns) of a product block: BLAS packs the other operand per call


def row_bounds(n: int, chunks: int, align: int = 8) -> list[int]:
    """Boundaries 0 = b0 < b1 < ... = n of about `chunks` ranges, inner ones multiples of align."""
    chunks = max(1, min(chunks, -(-n // align)))
    step = -(-n // chunks)
    step = -(-step // align) * align
    return [*range(0, n, step), n]


def gemm(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """out (M, N) = a (M, K) @ b (K, N), split over the worker threads when large enough."""
    M, K = a.shape
    N = b.shape[1]
    macs = M * K * N
    single_threaded_blas()
    # blocks: two per worker (a descheduled worker's share is taken by the others), at least
    # MIN_BLOCK rows: each block packs the other operand again (~5% of CPU at 128 rows, measured)
    w = workers()
    n = min(MAX_CHUNKS, macs // CHUNK_MACS, 2 * w, max(M, N) // MIN_BLOCK)
    n -= n % w if n >= w else 0  # a multiple of the workers: 3 blocks on 2 threads take 2 rounds
    if n < 2 or w == 1 or macs < SMALL_GEMM_MACS:
        return np.matmul(a, b, out=out)
    if M >= N:  # row blocks: out[r0:r1] = a[r0:r1] @ b
        rb = row_bounds(M, n)
        run_chunks(lambda i: np.matmul(a[rb[i]:rb[i + 1]], b, out=out[rb[i]:rb[i + 1]]),
                   len(rb) - 1)
    else:  # column blocks: out[:, c0:c1] = a @ b[:, c0:c1]
        cb = row_bounds(N, n, align=16)
        run_chunks(lambda i: np.matmul(a, b[:, cb[i]:cb[i + 1]], out=out[:, cb[i]:cb[i + 1]]),
                   len(cb) - 1)
    return out


def for_rows(fn: Callable[[int, int], object], n_rows: int, row_bytes: int) -> None:
    """fn(r0, r1) over blocks of rows, spread over the worker threads (row_bytes: bytes of one
    row of the widest array the kernel touches). Two blocks per worker (for balance), and more
    only where a block would exceed CHUNK_BYTES: each block costs ~10 numpy calls of overhead,
    and arrays of a few MB gain nothing from finer blocks (measured: layer norm on (1024, 256)
    takes 1.5x the CPU time in 64 KB blocks as in one piece)."""
    w = workers()
    by_size = -(-n_rows * max(1, row_bytes) // CHUNK_BYTES)
    n = min(MAX_CHUNKS * 2, n_rows, max(by_size, 2 * w if w > 1 else 1))
    n -= n % w if n >= w else 0  # a multiple of the workers, so the last round is full
    if n <= 1:
        fn(0, n_rows)
        return
    rb = row_bounds(n_rows, n, align=1)
    run_chunks(lambda i: fn(rb[i], rb[i + 1]), len(rb) - 1)
