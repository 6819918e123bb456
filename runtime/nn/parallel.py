"""Kernels split over the runtime's worker threads: products and row-wise elementwise passes.

`gemm(a, b, out)` is `np.matmul(a, b, out=out)` for 2-D float arrays, cut into row blocks (or
column blocks, whichever side is longer) that the workers of runtime/threads.py take in turn,
each block one single-threaded BLAS call. Never split along the summed axis, so every element is
the same dot product as in one whole single-threaded call: the result is bit for bit identical
whatever the thread count or the load. numpy releases the GIL inside BLAS and inside ufunc
loops, so the blocks really run side by side.

`gemms([(a, b, out, epilogue), ...])` runs several independent products in one meeting of the
threads (a layer's dW, db and dx), and an epilogue runs on each block of a product's output as
soon as BLAS has written it, on the same thread, while it is in cache: the bias, a fused GELU,
a residual add and the next layer norm's rows. On this kind of 2-core VM a sleeping worker
starts ~0.15 ms after it is woken and threads handing over the GIL pay the same, so the fewer
meetings and the fewer separate passes, the faster (runtime/nn/transformer.py, dense.py).

`for_rows(fn, n_rows)` runs fn(r0, r1) over row ranges the same way: for elementwise work
whose rows are independent (GELU, softmax rows, layer norm rows). Besides the threads, a block
of rows fits the core's L2 cache, so a kernel's several passes over it stay in cache instead of
streaming the whole array through memory once per pass.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from cs2sim.runtime.threads import SMALL_GEMM_MACS, run_chunks, single_threaded_blas, workers

__all__ = [
    "gemm",
    "gemms",
    "needs_rows",
    "Epilogue",
    "for_rows",
    "row_bounds",
    "CHUNK_MACS",
    "CHUNK_BYTES",
]

CHUNK_MACS = 4_000_000  # multiply-adds per product block: ~40 us a block, >> ~10 us of overhead
CHUNK_BYTES = 1 << 20  # at most this many bytes of an elementwise kernel's widest array a block
MAX_CHUNKS = 32
# Blocks per worker of a product: one. Each block packs the shared operand again (4 blocks cost
# 5-11% more CPU than one call, 2 blocks 2%; measured on the GPT's shapes), and the balance that
# more blocks would buy under load is not there: beside 2 busy loops the GPT slowed 1.96x with
# one block per worker and 2.15x with two (fair share 2.0x), quietly 1-2% faster.
BLOCKS_PER_WORKER = 1
MIN_BLOCK = 128  # rows (or columns) of a product block: BLAS packs the other operand per call
# An elementwise kernel whose widest array is smaller than this runs whole on the calling thread:
# waking a worker and joining it costs ~0.3 ms here, and a block costs each numpy call's overhead
# again (measured: layer norm on (1024, 256), 1 MB, takes 0.66 ms whole on one thread against
# 1.6 ms in 4 blocks on 2 threads).
MIN_SPLIT_BYTES = 3 << 19  # 1.5 MB


def row_bounds(n: int, chunks: int, align: int = 8) -> list[int]:
    """Boundaries 0 = b0 < b1 < ... = n of about `chunks` ranges, inner ones multiples of align."""
    chunks = max(1, min(chunks, -(-n // align)))
    step = -(-n // chunks)
    step = -(-step // align) * align
    return [*range(0, n, step), n]


# An epilogue runs on one block of a product's output right after the block is computed, while
# it is in cache and on the thread that computed it: epilogue(block, rows, cols), block being
# out[rows, cols]. Blocks are disjoint, so an epilogue may write the same rows/cols elsewhere.
# An epilogue with the attribute `whole_rows = True` gets row blocks only (cols all of out): a
# layer norm of the product's output needs its whole rows. `needs_rows(fn)` marks one.
Epilogue = Callable[[np.ndarray, slice, slice], object]
# One product of a `gemms` call: out = a @ b, then the optional epilogue on every block.
Product = tuple[np.ndarray, np.ndarray, np.ndarray, "Epilogue | None"]


def _blocks(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, epi: Epilogue | None, w: int
) -> list[Callable[[], object]]:
    """The blocks of out = a @ b for `w` workers, each a callable computing its part."""
    M, K = a.shape
    N = b.shape[1]
    macs = M * K * N
    # blocks: BLOCKS_PER_WORKER per worker, at least MIN_BLOCK rows (or columns) each
    n = min(MAX_CHUNKS, macs // CHUNK_MACS, BLOCKS_PER_WORKER * w, max(M, N) // MIN_BLOCK)
    n -= n % w if n >= w else 0  # a multiple of the workers: 3 blocks on 2 threads take 2 rounds
    if n < 2 or w == 1 or macs < SMALL_GEMM_MACS:
        bounds, by_rows = [0, M], True
    elif M >= N or getattr(epi, "whole_rows", False):  # row blocks: out[r0:r1] = a[r0:r1] @ b
        bounds, by_rows = row_bounds(M, n), True
    else:  # column blocks: out[:, c0:c1] = a @ b[:, c0:c1]
        bounds, by_rows = row_bounds(N, n, align=16), False
    every = slice(None)

    def row_block(r0: int, r1: int) -> None:
        o = np.matmul(a[r0:r1], b, out=out[r0:r1])
        if epi is not None:
            epi(o, slice(r0, r1), every)

    def col_block(c0: int, c1: int) -> None:
        o = np.matmul(a, b[:, c0:c1], out=out[:, c0:c1])
        if epi is not None:
            epi(o, every, slice(c0, c1))

    block = row_block if by_rows else col_block
    return [partial(block, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def needs_rows(epilogue: Epilogue) -> Epilogue:
    """Mark `epilogue` as needing whole rows of the product's output (row blocks only)."""
    epilogue.whole_rows = True  # type: ignore[attr-defined]  # read with getattr(.., False)
    return epilogue


def gemms(products: list[Product]) -> None:
    """Several independent products (out = a @ b, each out written only by its own product) in
    ONE pass over the worker threads: their blocks go into one queue, so the threads meet once
    instead of once per product. A wake-up and a join of the workers cost ~0.15 ms each on this
    kind of VM (measured: a sleeping worker starts 144 us after it is signalled), as much as a
    tenth of a (1024 x 256) @ (256 x 1024) product, and a training step has dozens of products.
    """
    single_threaded_blas()
    w = workers()
    tasks = [t for a, b, out, epi in products for t in _blocks(a, b, out, epi, w)]
    if len(tasks) == 1:
        tasks[0]()
        return
    run_chunks(lambda i: tasks[i](), len(tasks))


def gemm(
    a: np.ndarray, b: np.ndarray, out: np.ndarray, epilogue: Epilogue | None = None
) -> np.ndarray:
    """out (M, N) = a (M, K) @ b (K, N), split over the worker threads when large enough; the
    epilogue (if any) runs on each block of out as soon as it is computed."""
    gemms([(a, b, out, epilogue)])
    return out


def for_rows(fn: Callable[[int, int], object], n_rows: int, row_bytes: int) -> None:
    """fn(r0, r1) over blocks of rows, spread over the worker threads (row_bytes: bytes of one
    row of the widest array the kernel touches). Two blocks per worker (for balance), and more
    only where a block would exceed CHUNK_BYTES: each block costs ~10 numpy calls of overhead,
    and arrays of a few MB gain nothing from finer blocks (measured: layer norm on (1024, 256)
    takes 1.5x the CPU time in 64 KB blocks as in one piece)."""
    w = workers()
    if n_rows * row_bytes < MIN_SPLIT_BYTES:
        fn(0, n_rows)
        return
    by_size = -(-n_rows * max(1, row_bytes) // CHUNK_BYTES)
    n = min(MAX_CHUNKS * 2, n_rows, max(by_size, 2 * w if w > 1 else 1))
    n -= n % w if n >= w else 0  # a multiple of the workers, so the last round is full
    if n <= 1:
        fn(0, n_rows)
        return
    # blocks of whole 8-row groups: a BLAS row-sum kernel (gemv) takes rows in groups of 4 and
    # the rest another way, so aligned blocks give every row the same arithmetic as one piece
    rb = row_bounds(n_rows, n, align=8)
    run_chunks(lambda i: fn(rb[i], rb[i + 1]), len(rb) - 1)
