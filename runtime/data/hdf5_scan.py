"""The up-front scan of a small GPT HDF5 data set (runtime/data/hdf5.py's CHECK_ALL_VALUES):
every sample read once at load, checked, and, when compressed, kept decoded, so the in-process
first epoch is served from memory and the scan is its inflating, not extra work.

The scan runs alongside the opening of the files: the helper threads start when the load does
and inflate file k's samples while the caller opens, maps and indexes file k + 1 (a
`threads.ChunkFeed`); the caller takes its share of the samples once every file is open. Only
cores idle now get a helper (`threads.idle_cores`): on a loaded host the caller opens and then
scans alone, as before. The load still returns only when every sample is checked, so a bad
value stops the run before its first batch, with the sentence that names the file and sample;
a file that fails to open is reported before any value (the scan of the files before it is
stopped), and of several bad samples the one named is the one a single thread names (the
first failing task in the data set's order), whatever the threads' timing.

A compressed data set's samples are kept as stored, (N, 3, T) int32, when that fits
CACHE_BYTES: a sample in the Model Zoo's layout (gzip, one-sample chunks, int32) is inflated
straight into its row, checked there, and its padding's labels set to IGNORE in place (the
loss skips them, runtime/nn/loss.py), with no conversion pass; a batch gathers rows 0 (ids)
and 2 (labels). Otherwise ids and labels are kept, (N, 2, T), as the lazy cache keeps them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cs2sim.runtime import threads
from cs2sim.runtime.data.hdf5_layout import ids_and_labels
from cs2sim.runtime.nn.loss import IGNORE

# The H5Samples being opened (runtime/data/hdf5.py, which imports this module: named, not
# imported, so the package has no import cycle); its reading and checking methods are used.
H5Samples = Any

__all__ = ["SCAN_TASK", "INFLATE_CHUNK", "Scan", "tasks"]

INFLATE_CHUNK = 8  # samples one thread inflates per task (a task costs ~10 us, a sample ~25)
SCAN_TASK = 64  # samples one thread reads, checks and keeps per task of the up-front scan


def tasks(s: H5Samples, most: int) -> list[tuple[int, int, int]]:
    """(part, first file row, end) of tasks covering every sample of `s`, none across parts,
    of at most `most` samples and shrinking toward the end (guided scheduling: a task is a
    share of what is left), so that near the end no thread waits long for another's last
    task (on a loaded machine that thread may be off the CPU for a whole time slice)."""
    left, share = len(s), 2 * threads.workers()
    out = []
    for j, p in enumerate(s.parts):
        a = p.start
        while a < p.stop:
            n = min(most, max(INFLATE_CHUNK, left // share), p.stop - a)
            out.append((j, a, a + n))
            a, left = a + n, left - n
    return out


class Scan:
    """The scan of `s` (an H5Samples being opened): `opened(j)` after part j is open (its
    samples may start), `finish(compressed)` once all are (waits for every sample, raises the
    first bad one's sentence), `cancel()` when the opening fails."""

    def __init__(self, s: H5Samples, cache_bytes: int) -> None:
        self.s, self.cache_bytes = s, cache_bytes
        self.tasks = tasks(s, SCAN_TASK)
        self.per_part = [0] * len(s.parts)  # tasks of each part, fed when it is open
        for j, _, _ in self.tasks:
            self.per_part[j] += 1
        self.held = 0  # parts opened but not fed (the first part is not compressed)
        self.feeding = False
        # per thread: a task's inflated rows when they are not kept as stored (reused)
        self.scratch: list[np.ndarray | None] = [None] * threads.workers()
        self.feed = threads.ChunkFeed(self._task, idle_only=True)

    def _keep(self) -> None:
        """Make the cache of a compressed data set (see the module docstring)."""
        s = self.s
        n, T = len(s), s.T
        for rows in (3, 2):
            if n * rows * T * 4 <= self.cache_bytes:
                s._cache, s._lab = np.empty((n, rows, T), np.int32), rows - 1
                return

    def opened(self, j: int) -> None:
        """Part j is open: its samples may be scanned (at once when the first part is
        compressed, the cache made now; else once all parts are open, when it is known
        whether any part is compressed and so whether to keep the samples)."""
        if j == 0 and not isinstance(self.s._data[0], np.ndarray):
            self._keep()
            self.feeding = True
        if self.feeding:
            self.feed.add(self.per_part[j])
        else:
            self.held += 1

    def finish(self, compressed: bool) -> None:
        """Every part is open: scan the rest on this thread too, wait for the helpers, raise
        the first bad sample's sentence; then the cache is complete."""
        s = self.s
        if not self.feeding:
            if compressed:
                self._keep()
            self.feed.add(sum(self.per_part[: self.held]))
        self.feed.finish()
        if s._cache is not None:
            s._missing, s._complete = 0, True

    def cancel(self) -> None:
        """The opening failed: stop the helpers (they end after their current task)."""
        self.feed.cancel()

    def _task(self, k: int, slot: int) -> None:
        """Task k: its samples read (inflated into their cache rows when they can be),
        checked, and kept."""
        s = self.s
        j, a, b = self.tasks[k]
        lo = int(s.starts[j]) + a - s.parts[j].start  # a's row of the whole data set
        cache, dtype = s._cache, s._dtypes[j]
        one = s._plain[j] is not None and s._rows[j] == 1  # gzip chunks of one sample
        kept = None if cache is None else cache[lo : lo + b - a]  # (b, 3 or 2, T)
        if kept is not None and kept.shape[1] == 3 and one and dtype == np.int32:
            s._inflate_rows(j, range(a, b), kept)  # straight into its rows, as stored
            raw = kept
        elif one:
            buf, need = self.scratch[slot], SCAN_TASK * 3 * s.T * dtype.itemsize
            if buf is None or len(buf) < need:
                buf = self.scratch[slot] = np.empty(need, np.uint8)
            raw = buf[: (b - a) * 3 * s.T * dtype.itemsize].view(dtype)
            raw = raw.reshape(b - a, 3, s.T)  # (b, 3, T)
            s._inflate_rows(j, range(a, b), raw)
        else:
            raw = s._read(j, np.arange(a, b))
        padded = s._check_raw(j, range(a, b), raw)
        if kept is None:
            return
        if kept.shape[1] == 2:
            ids_and_labels(raw, kept, padded)
            return
        if raw is not kept:
            kept[...] = raw
        if padded:
            np.copyto(kept[:, 2], IGNORE, where=kept[:, 1] == 0)
