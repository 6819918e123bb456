"""GPT-style HDF5 datasets, as the Model Zoo's GptHDF5DataProcessor reads them.

On disk (what the Model Zoo's `create_hdf5_dataset.py` writes, and `cs2sim-preprocess gpt2-hdf5`
here): a directory of `.h5` files, each holding
  * the attribute `n_examples` (samples in the file) and
  * the dataset `data`, int32 of shape [n_examples, 3, max_sequence_length]: row 0 the input ids,
    row 1 the attention mask (1 on tokens, 0 on padding), row 2 the labels (the next tokens);
    the Model Zoo writes it gzip-compressed in chunks of one sample, (1, 3, msl).
Files are read in sorted name order (the Model Zoo's `sorted(glob("*.h5"))`) and data_dir may be
a list of such directories. The samples of all files, in that order, are one data set; with n
input workers it is cut into contiguous parts by samples (runtime/data/shards.py; the Model Zoo's
`shard_list_of_chunks_contiguous`), so every sample belongs to exactly one worker and is served
once per epoch. Finding, opening and checking the files' declared layout and sizes:
runtime/data/hdf5_layout.py.

Reading: an uncompressed, unchunked `data` is memory-mapped straight from the file (h5py gives
its byte offset). A gzip chunk (the Model Zoo's layout: gzip, chunks of one sample, no other
filter) is inflated with ISA-L's zlib-compatible inflate (python-isal; the standard library's
zlib when it is not installed) straight from the file's memory map into its sample's row, the
chunk's place taken from one walk of HDF5's chunk index; any other filter goes through h5py for
that chunk alone, the last LRU_BYTES of decoded chunks kept, so samples sharing a chunk (h5py's
own chunking) inflate it once. Samples are inflated side by side on the runtime's worker threads
(runtime/threads.py; ISA-L and zlib release the GIL while they inflate), many to a task.

Values are checked the same way in every layout: when the data set is small
(CHECK_ALL_VALUES) every sample is read once at load, in the consumer, and checked (ids in the
vocabulary, a label in it wherever the attention mask is 1, no sample all padding), so a bad
value stops the run before training; a compressed data set's decoded ids and labels are then
kept (when they fit CACHE_BYTES), so that read is the first epoch's inflating, not extra work.
A larger data set is checked batch by batch as it is read (a full scan would stall the start),
its compressed samples inflated lazily and kept in the same cache when they fit.
Each worker opens its own files (an h5py handle must not cross a fork or a pickle).
The attention mask reaches the loss through the labels: a padded position (mask 0) gets the
label IGNORE, which the decoders' cross-entropy skips (runtime/nn/loss.py), as the Model Zoo's
GPT-2 loss multiplies the token losses by the attention mask.
"""

from __future__ import annotations

import mmap
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime import threads
from cs2sim.runtime.data.hdf5_layout import (
    H5_SUFFIX,
    H5Part,
    find_h5_files,
    ids_and_labels,
    inspect,
    open_data,
)
from cs2sim.runtime.nn.loss import IGNORE
from cs2sim.system.errors import ConfigError

try:  # ISA-L's inflate (python-isal) reads the same zlib streams about 1.8x faster
    from isal.isal_zlib import decompress as inflate
except ImportError:  # pragma: no cover - the standard library's is the fallback
    from zlib import decompress as inflate

__all__ = ["H5_SUFFIX", "CHECK_ALL_VALUES", "find_h5_files", "H5Part", "H5Samples", "H5Files"]

CHECK_ALL_VALUES = 2**26  # files up to this many int32 values are scanned whole when loaded
CACHE_BYTES = 256 * 2**20  # a worker keeps its part's decoded samples when they fit this
LRU_BYTES = 16 * 2**20  # decoded chunks kept per worker
INFLATE_CHUNK = 8  # samples one thread inflates per task (a task costs ~10 us, a sample ~25)
SCAN_TASK = 64  # samples one thread reads, checks and converts per task of the up-front scan
FEATURES = ("input_ids", "attention_mask", "labels")


class _ChunkLru:
    """The last few decoded chunks of compressed datasets, by (part, chunk): a batch's samples
    that share a chunk (h5py's own chunking of many samples) inflate it once."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.size = max_bytes, 0
        self._chunks: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # a streamer's producing threads share one dataset

    def get(self, key: tuple[int, int]) -> np.ndarray | None:
        with self._lock:
            chunk = self._chunks.get(key)
            if chunk is not None:
                self._chunks.move_to_end(key)
            return chunk

    def put(self, key: tuple[int, int], chunk: np.ndarray) -> None:
        with self._lock:
            if key in self._chunks:  # another thread decoded it too
                return
            self._chunks[key] = chunk
            self.size += chunk.nbytes
            while self.size > self.max_bytes and len(self._chunks) > 1:
                _, old = self._chunks.popitem(last=False)
                self.size -= old.nbytes


class H5Samples:
    """The samples of some file parts, in order: {"input_ids", "labels": int32 (B, T)}."""

    def __init__(
        self, parts: tuple[H5Part, ...], seq_len: int, vocab_size: int, verify: bool
    ) -> None:
        self.parts, self.T, self.vocab_size = parts, seq_len, vocab_size
        self.starts = np.concatenate([[0], np.cumsum([p.stop - p.start for p in parts])])
        self._files: list[Any] = []
        self._maps: list[mmap.mmap | None] = []
        self._views: list[memoryview | None] = []
        try:
            self._open(verify)
        except BaseException:
            self.close()  # a file that fails a check is not left open (nor its maps)
            raise

    def _open(self, verify: bool) -> None:
        """Open every part's file, index its chunks, and check it (see `__init__`)."""
        parts, seq_len = self.parts, self.T
        self._data: list[Any] = []  # per part: np.memmap (n, 3, T) or an h5py dataset
        # per part: rows per chunk when a sample lies in one chunk (else 0), and whether the
        # chunks are gzip alone (h5py's layout properties are slow to query: asked once here)
        self._rows: list[int] = []
        self._gzip: list[bool] = []
        for p in parts:
            f, ds = open_data(p.path)
            self._files.append(f)
            mapped = self._mapped(p.path, ds, p.stop)
            self._data.append(ds if mapped is None else mapped)
            chunks = ds.chunks if mapped is None else None
            self._rows.append(chunks[0] if chunks and chunks[1:] == (3, seq_len) else 0)
            self._gzip.append(
                mapped is None
                and ds.compression == "gzip"
                and not (ds.shuffle or ds.fletcher32 or ds.scaleoffset is not None)
            )
        self._n_rows = [int(d.shape[0]) for d in self._data]
        # per gzip part: where each chunk is stored (byte offset, stored size (-1: not
        # written), filter mask), from one walk of HDF5's chunk index, as lists (a list index
        # per sample costs a tenth of a numpy scalar's), and the file mapped, so a chunk is a
        # slice of the map (no index lookup per sample)
        self._spots: list[tuple[list[int], list[int], list[int]] | None] = []
        for p, ds, rows, gz in zip(parts, self._data, self._rows, self._gzip, strict=True):
            where = self._chunk_table(ds, rows, p.stop) if gz else None
            if where is None:
                self._spots.append(None)
                self._maps.append(None)
                continue
            self._spots.append((where[0].tolist(), where[1].tolist(), where[2].tolist()))
            with open(p.path, "rb") as fh:
                self._maps.append(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
        # a zero-copy view of each map: a chunk is inflated straight from the page cache
        self._views = [None if m is None else memoryview(m) for m in self._maps]
        self._dtypes = [d.dtype for d in self._data]
        n = int(self.starts[-1])
        compressed = any(not isinstance(d, np.ndarray) for d in self._data)
        # Values are checked up front when the parts are small (CHECK_ALL_VALUES), whatever
        # the layout, so a bad id stops the run before training starts; larger parts batch by
        # batch as they are read (a full scan of a large data set would stall the start).
        small = n * 3 * seq_len <= CHECK_ALL_VALUES
        self.check_each_batch = [not small] * len(parts)
        self._lru = _ChunkLru(LRU_BYTES)
        self._cache: np.ndarray | None = None  # (N, 2, T) decoded ids and labels, filled lazily
        self._have = np.zeros(0, bool)  # (N,) which rows of _cache are decoded
        if compressed and n * 2 * seq_len * 4 <= CACHE_BYTES:
            self._cache = np.empty((n, 2, seq_len), np.int32)
            self._have = np.zeros(n, bool)
        if verify and small:
            self._scan()
        self._all_mapped = not any(self.check_each_batch) and not compressed

    def _scan(self) -> None:
        """Read every sample once now, checked; decoded compressed samples go to the cache
        (so the in-process first epoch is served from it: the scan is not paid twice).

        SCAN_TASK samples to a task on the runtime's worker threads, each task inflating,
        checking and converting its own samples into their rows of the cache: one handoff per
        task, not per sample, and every step of a sample on the thread that inflated it."""
        for j, p in enumerate(self.parts):
            lo, hi = int(self.starts[j]), int(self.starts[j + 1])
            dest = None if self._cache is None else self._cache[lo:hi]  # (n, 2, T) a view

            fast = self._rows[j] == 1 and self._views[j] is not None
            scratch = [
                np.empty((SCAN_TASK, 3, self.T), self._dtypes[j]) if fast else None
                for _ in range(threads.workers())
            ]  # per thread: inflated rows, reused task after task (no fresh pages each time)

            def task(
                k: int,
                slot: int,
                j: int = j,
                p: H5Part = p,
                dest: np.ndarray | None = dest,
                scratch: list[np.ndarray | None] = scratch,
            ) -> None:
                a = p.start + k * SCAN_TASK
                local = np.arange(a, min(a + SCAN_TASK, p.stop))  # (b,) file rows
                buf = scratch[slot]
                if buf is not None:
                    raw = buf[: len(local)]
                    self._inflate_rows(j, range(a, a + len(local)), raw)
                else:
                    raw = self._read(j, local)
                self._check_raw(j, local, raw)
                ids_and_labels(raw, None if dest is None else dest[a - p.start :][: len(local)])

            threads.run_chunks(task, -(-(hi - lo) // SCAN_TASK), slots=True)
            if dest is not None:
                self._have[lo:hi] = True

    @staticmethod
    def _mapped(path: str, ds: Any, stop: int) -> np.ndarray | None:
        """A memory map of rows [0, stop) of a contiguous, uncompressed dataset (None when it
        is chunked); `stop` was checked to lie inside the file (`_backed`)."""
        if ds.chunks is not None or ds.compression is not None:
            return None
        offset = ds.id.get_offset()
        if offset is None:  # allocated but never written
            return None
        return np.memmap(path, dtype=ds.dtype, mode="r", offset=offset, shape=(stop, *ds.shape[1:]))

    def _checked(self, j: int, local: np.ndarray) -> np.ndarray:
        """Rows `local` (b,) of part j's file, every value checked: (b, 2, T) ids and labels."""
        raw = self._read(j, local)  # (b, 3, T) as stored
        self._check_raw(j, local, raw)
        return ids_and_labels(raw)

    def _check_raw(self, j: int, local: np.ndarray, raw: np.ndarray) -> None:
        """Stored rows `raw` (b, 3, T) of part j (file rows `local`): ids in the vocabulary, a
        label in it wherever attention_mask is not 0, no sample all padding."""
        ids, mask, labels = raw[:, 0], raw[:, 1], raw[:, 2]  # (b, T) each
        if raw.dtype == np.int32 and int(mask.min()) != 0:
            # no padding (the usual sample): one pass each, a negative value being a large
            # one as uint32; the value itself is found below only when one is bad
            v = self.vocab_size
            if int(ids.view(np.uint32).max()) < v and int(labels.view(np.uint32).max()) < v:
                return
        self._find_bad(j, local, raw)

    def _find_bad(self, j: int, local: np.ndarray, raw: np.ndarray) -> None:
        """`_check_raw` in full: the first bad value's sentence (nothing when none is bad)."""
        path = self.parts[j].path
        ids, mask, labels = raw[:, 0], raw[:, 1], raw[:, 2]  # (b, T) each
        real = mask != 0  # (b, T): a padded position's label is never looked at
        empty = ~real.any(axis=1)  # (b,)
        if empty.any():
            row = int(local[int(np.argmax(empty))])
            raise ConfigError(
                f"HDF5 file {path} sample {row} has an all-zero attention_mask (no position "
                f"to learn from: it would train at loss 0); drop it or re-create the data."
            )
        for name, values in (("input id", ids), ("label", np.where(real, labels, 0))):
            top, low = int(values.max()), int(values.min())
            if low >= 0 and top < self.vocab_size:
                continue
            bad = low if low < 0 else top
            row = int(local[int(np.argmax((values == bad).any(axis=1)))])
            if bad < 0:
                what = "-1 (ignored) only where attention_mask is 0" if name == "label" else ""
                raise ConfigError(
                    f"HDF5 file {path} sample {row} has {name} {bad}, but token ids lie in "
                    f"[0, {self.vocab_size}){'; labels may be ' + what if what else ''}; "
                    f"re-create the data."
                )
            raise ConfigError(
                f"HDF5 file {path} has token id {bad} but vocab_size is {self.vocab_size} "
                f"(sample {row}); raise vocab_size or re-tokenise the data."
            )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _chunk(self, j: int, c: int) -> np.ndarray:
        """Decoded chunk c (along the samples) of part j's dataset, through the chunk LRU:
        (rows, 3, T)."""
        chunk = self._lru.get((j, c))
        if chunk is None:
            chunk = self._decode(j, c)
            self._lru.put((j, c), chunk)
        return chunk

    def _decode(self, j: int, c: int) -> np.ndarray:
        """Chunk c (along the samples) of part j's dataset, decoded now: (rows, 3, T), the
        last chunk cut at the end of the data. Safe on several threads at once."""
        data, rows = self._data[j], self._rows[j]
        if not self._gzip[j]:
            try:
                return np.asarray(data[c * rows : (c + 1) * rows])  # h5py decodes this chunk
            except OSError as e:  # a filter failed: the stored chunk is corrupt
                raise self._corrupt(j, c, e) from None
        # gzip alone (the Model Zoo's layout): inflate the stored chunk ourselves, which skips
        # h5py's selection machinery; an edge chunk is stored at full size
        spots, mapped = self._spots[j], self._maps[j]
        if spots is not None and mapped is not None and spots[1][c] >= 0:
            at = spots[0][c]
            mask, raw = spots[2][c], mapped[at : at + spots[1][c]]
        else:  # not written (h5py's fill value), or no chunk index walk in this h5py
            mask, raw = data.id.read_direct_chunk((c * rows, 0, 0))
        try:
            chunk = np.frombuffer(raw if mask else inflate(raw), dtype=self._dtypes[j])
        except Exception as e:  # noqa: BLE001 - isal.IsalError or zlib.error: corrupt data
            raise self._corrupt(j, c, e) from None
        if rows == 1:
            return chunk.reshape(1, 3, self.T)
        return chunk.reshape(rows, 3, self.T)[: min(rows, self._n_rows[j] - c * rows)]

    def _inflate_samples(self, j: int, local: np.ndarray) -> np.ndarray:
        """Rows `local` (b,) of part j, stored gzip in chunks of one sample (the Model Zoo's
        layout), inflated on the runtime's worker threads: (b, 3, T).

        A shuffled first epoch reads every sample once, so nothing here is worth keeping in
        the chunk LRU; inflating is the whole cost (a memory-mapped token file is a copy), and
        ISA-L / zlib release the GIL while they inflate, so the batch's samples inflate
        side by side, INFLATE_CHUNK to a task, the calling thread taking its share."""
        out = np.empty((len(local), 3, self.T), self._dtypes[j])  # (b, 3, T)
        rows = [int(i) for i in local]
        step = max(INFLATE_CHUNK, -(-len(rows) // (2 * threads.workers())))

        def inflate_some(k: int) -> None:
            lo, hi = k * step, min(len(rows), (k + 1) * step)
            self._inflate_rows(j, rows[lo:hi], out[lo:hi])

        threads.run_chunks(inflate_some, -(-len(rows) // step))
        return out

    def _inflate_rows(self, j: int, rows: Any, out: np.ndarray) -> None:
        """Samples `rows` of part j (gzip, one-sample chunks) inflated into `out` (b, 3, T),
        C-contiguous: each chunk inflated from the file's map without a copy and written
        into its row as bytes (no array object per sample)."""
        view, spots = self._views[j], self._spots[j]
        if view is None or spots is None:
            for r, c in enumerate(rows):
                out[r] = self._decode(j, c)[0]
            return
        at, size, fmask = spots
        dest = out.data.cast("B")  # the array's own buffer (memoryview(out))
        nb = out[0].nbytes
        for r, c in enumerate(rows):
            n = size[c]
            if n < 0 or fmask[c]:  # not written, or stored unfiltered: the general path
                out[r] = self._decode(j, c)[0]
                continue
            try:
                got = inflate(view[at[c] : at[c] + n])
            except Exception as e:  # noqa: BLE001 - isal.IsalError or zlib.error
                raise self._corrupt(j, c, e) from None
            if len(got) != nb:
                raise self._corrupt(j, c, ValueError(f"{len(got)} bytes where {nb} belong"))
            dest[r * nb : (r + 1) * nb] = got
        dest.release()

    @staticmethod
    def _chunk_table(
        ds: Any, rows: int, stop: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(byte offset, stored size (-1: not written), filter mask) of each chunk holding rows
        below `stop` (the part's end, checked against the chunks the file stores: `_backed`),
        (C,) each, never sized by the declared shape; None when this h5py / HDF5 cannot walk
        the chunk index."""
        if not rows or not hasattr(ds.id, "chunk_iter"):
            return None
        count = -(-int(stop) // rows)
        at, size, mask = (
            np.zeros(count, np.int64),
            np.full(count, -1, np.int64),
            np.zeros(count, np.int64),
        )

        def note(info: Any) -> None:
            c = info.chunk_offset[0] // rows
            if c < count:
                at[c], size[c], mask[c] = info.byte_offset, info.size, info.filter_mask

        try:
            ds.id.chunk_iter(note)
        except (RuntimeError, ValueError, TypeError):  # HDF5 built without H5Dchunk_iter
            return None
        return at, size, mask

    def _corrupt(self, j: int, c: int, e: BaseException) -> ConfigError:
        """The one sentence for a chunk that does not decode."""
        rows = self._rows[j] or 1
        which = f"sample {c}" if rows == 1 else f"samples {c * rows}-{(c + 1) * rows - 1}"
        return ConfigError(
            f"HDF5 file {self.parts[j].path} {which}: the compressed data is corrupt "
            f"({type(e).__name__}: {e}); re-create the file."
        )

    def _read(self, j: int, local: np.ndarray) -> np.ndarray:
        """Rows `local` (b,) of part j's file as stored: (b, 3, T)."""
        data = self._data[j]
        if isinstance(data, np.ndarray):
            return np.asarray(data[local])
        rows = self._rows[j]
        if rows == 1 and self._gzip[j] and len(local) >= INFLATE_CHUNK:
            return self._inflate_samples(j, local)
        out = np.empty((len(local), 3, self.T), self._dtypes[j])  # (b, 3, T)
        if rows:
            for r, i in enumerate(local):  # a sample lies in one chunk
                out[r] = self._chunk(j, int(i) // rows)[int(i) % rows]
            return out
        order = np.argsort(local, kind="stable")  # h5py selects in ascending order only
        try:
            out[order] = data[local[order].tolist()]
        except OSError as e:  # a filter h5py runs failed: the data is corrupt
            raise self._corrupt(j, int(local[order[0]]), e) from None
        return out

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """Samples `idx` (B,) read from the files: (B, 2, T), values checked when asked."""
        out = np.empty((len(idx), 2, self.T), dtype=np.int32)  # (B, 2, T) ids and labels
        part = np.searchsorted(self.starts, idx, side="right") - 1  # (B,)
        for j in np.unique(part):
            rows = np.flatnonzero(part == j)
            local = idx[rows] - self.starts[j] + self.parts[j].start  # (b,) file rows
            if self.check_each_batch[j]:
                out[rows] = self._checked(int(j), local)
            else:
                out[rows] = ids_and_labels(self._read(int(j), local))
        return out

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """{"input_ids": int32 (B, T), "labels": int32 (B, T)} for sample indices `idx` (B,)."""
        if self._cache is not None:
            new = np.unique(idx[~self._have[idx]])  # (b,) first read of these samples
            if len(new):
                self._cache[new] = self._gather(new)
                self._have[new] = True
            # (B, T) each, gathered straight from the cache (no (B, 2, T) copy in between)
            return {"input_ids": self._cache[idx, 0], "labels": self._cache[idx, 1]}
        if self._all_mapped:  # memory-mapped, checked at load: gathered straight to (B, T)
            return self._mapped_batch(idx)
        out = self._gather(idx)
        return {
            "input_ids": np.ascontiguousarray(out[:, 0]),  # (B, T)
            "labels": np.ascontiguousarray(out[:, 1]),
        }  # (B, T)

    def _mapped_batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """`batch` of memory-mapped parts whose values were checked at load: ids and labels
        gathered from the map into their (B, T) arrays, padding's labels set to IGNORE."""
        ids = np.empty((len(idx), self.T), np.int32)  # (B, T)
        labels = np.empty((len(idx), self.T), np.int32)
        pad = np.empty((len(idx), self.T), bool)
        part = np.searchsorted(self.starts, idx, side="right") - 1  # (B,)
        for j in np.unique(part):
            data = self._data[int(j)]
            rows: slice | np.ndarray
            if len(self.parts) == 1:
                rows, local = slice(None), idx + self.parts[0].start
            else:
                rows = np.flatnonzero(part == j)
                local = idx[rows] - self.starts[j] + self.parts[j].start  # (b,) file rows
            ids[rows] = data[local, 0]
            labels[rows] = data[local, 2]
            pad[rows] = data[local, 1] == 0
        np.copyto(labels, IGNORE, where=pad)
        return {"input_ids": ids, "labels": labels}

    def close(self) -> None:
        """Close the files."""
        for v in self._views:
            if v is not None:
                v.release()
        self._views = []
        for m in self._maps:
            if m is not None:
                m.close()
        self._maps = []
        for f in self._files:
            f.close()
        self._files, self._data = [], []

    def __getstate__(self) -> None:
        raise TypeError("H5Samples holds open files; pickle its recipe (H5Files) instead")


@dataclass(frozen=True)
class H5Files:
    """Recipe: samples of .h5 files (picklable: loaded in each input worker)."""

    parts: tuple[H5Part, ...]
    seq_len: int
    vocab_size: int
    verify: bool = True

    @classmethod
    def of(cls, paths: list[Path], seq_len: int, vocab_size: int) -> H5Files:
        """Every sample of `paths`, in order (each file's layout checked now)."""
        parts = []
        for p in paths:
            n = inspect(str(p), seq_len)
            if n:
                parts.append(H5Part(str(p), 0, n))
        if not parts:
            names = ", ".join(p.name for p in paths)
            raise ConfigError(
                f"HDF5 files {names} in {paths[0].parent} hold no samples; re-create them."
            )
        return cls(tuple(parts), seq_len, vocab_size)

    @property
    def num_samples(self) -> int:
        """Samples in the recipe."""
        return sum(p.stop - p.start for p in self.parts)

    def shards(self, n: int) -> list[H5Files]:
        """n contiguous parts of the samples, sizes differing by at most one (worker k: part k)."""
        total = self.num_samples
        return self.cut([total * (k + 1) // n - total * k // n for k in range(n)])

    def cut(self, sizes: list[int]) -> list[H5Files]:
        """Contiguous parts of `sizes` samples, in order (a part may end inside a file)."""
        out, lo = [], 0
        for size in sizes:
            hi, pos, parts = lo + size, 0, []
            for p in self.parts:
                n = p.stop - p.start
                a, b = max(lo, pos), min(hi, pos + n)
                if a < b:
                    parts.append(H5Part(p.path, p.start + a - pos, p.start + b - pos))
                pos += n
            out.append(H5Files(tuple(parts), self.seq_len, self.vocab_size, self.verify))
            lo = hi
        return out

    def load(self) -> H5Samples:
        """Open the files (closed again when a check fails: nothing is left open)."""
        return H5Samples(self.parts, self.seq_len, self.vocab_size, self.verify)
