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
filter) is inflated with the fastest inflate the host has (runtime/data/inflate.py: libdeflate,
else ISA-L, else zlib) straight from the file's memory map into its sample's row, the
chunk's place taken from one walk of HDF5's chunk index; any other filter goes through h5py for
that chunk alone, the last LRU_BYTES of decoded chunks kept, so samples sharing a chunk (h5py's
own chunking) inflate it once. Samples are inflated side by side on the runtime's worker threads
(runtime/threads.py; the inflaters release the GIL), many to a task, taking a helper thread
only for a core that is idle now (`threads.idle_cores`: on a loaded host a second thread gets
no more CPU time, only the wait for it).

Values are checked the same way in every layout: when the data set is small
(CHECK_ALL_VALUES) every sample is read once at load, in the consumer, and checked (ids in the
vocabulary, a label in it wherever the attention mask is 1, no sample all padding), so a bad
value stops the run before training; a compressed data set's decoded samples are then kept
(when they fit CACHE_BYTES), so that read is the first epoch's inflating, not extra work. That
scan runs alongside the opening of the files, file k inflating while file k + 1 opens
(runtime/data/hdf5_scan.py).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime import threads
from cs2sim.runtime.data.hdf5_layout import (
    H5_SUFFIX,
    H5Part,
    btree_chunks,
    find_h5_files,
    ids_and_labels,
    inspect,
    open_data,
)
from cs2sim.runtime.data.hdf5_scan import INFLATE_CHUNK, Scan
from cs2sim.runtime.data.inflate import inflate, inflate_rows
from cs2sim.runtime.nn.loss import IGNORE
from cs2sim.system.errors import ConfigError

__all__ = ["H5_SUFFIX", "CHECK_ALL_VALUES", "find_h5_files", "H5Part", "H5Samples", "H5Files"]

CHECK_ALL_VALUES = 2**26  # files up to this many int32 values are scanned whole when loaded
CACHE_BYTES = 256 * 2**20  # a worker keeps its part's decoded samples when they fit this
LRU_BYTES = 16 * 2**20  # decoded chunks kept per worker
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
        self,
        parts: tuple[H5Part, ...],
        seq_len: int,
        vocab_size: int,
        verify: bool,
        opened: dict[str, tuple[Any, Any]] | None = None,
    ) -> None:
        self.parts, self.T, self.vocab_size = parts, seq_len, vocab_size
        self.starts = np.concatenate([[0], np.cumsum([p.stop - p.start for p in parts])])
        self._files: list[Any] = []
        self._maps: list[mmap.mmap | None] = []
        self._bytes: list[np.ndarray | None] = []  # per part: its file's map as uint8 (L,)
        # files left open by H5Files.of's inspection (path -> (File, data)): used, not reopened
        self._opened = dict(opened or {})
        try:
            self._open(verify)
        except BaseException:
            self.close()  # a file that fails a check is not left open (nor its maps)
            raise
        finally:
            for f, _ in self._opened.values():  # handed over but not used
                f.close()
            self._opened = {}

    def _open(self, verify: bool) -> None:
        """Open every part's file, index its chunks, and check it (see `__init__`); a small
        data set is scanned while its files open (runtime/data/hdf5_scan.py)."""
        parts, seq_len = self.parts, self.T
        self._data: list[Any] = []  # per part: np.memmap (n, 3, T) or an h5py dataset
        # per part: rows per chunk when a sample lies in one chunk (else 0), and whether the
        # chunks are gzip alone (h5py's layout properties are slow to query: asked once here)
        self._rows: list[int] = []
        self._gzip: list[bool] = []
        self._dtypes: list[np.dtype[Any]] = []
        self._n_rows: list[int] = []
        # per gzip part: where each chunk is stored (byte offset, stored size (-1: not
        # written), filter mask), from one walk of HDF5's chunk index, and the file mapped:
        # a chunk is inflated straight from the page cache (no index lookup, no read, no copy
        # per sample). `_plain`: per chunk, its address in the map and its size, the size -1
        # where the chunk is not a plain zlib stream inside the file (not written, stored
        # unfiltered, or past the file's end: `_decode` reads or refuses it). Lists: a list
        # index per sample costs a tenth of a numpy scalar's.
        self._spots: list[tuple[list[int], list[int], list[int]] | None] = []
        self._plain: list[tuple[list[int], list[int]] | None] = []
        n = len(self)
        # Values are checked up front when the parts are small (CHECK_ALL_VALUES), whatever
        # the layout, so a bad id stops the run before training starts; larger parts batch by
        # batch as they are read (a full scan of a large data set would stall the start).
        small = n * 3 * seq_len <= CHECK_ALL_VALUES
        self.check_each_batch = [not small] * len(parts)
        self._lru = _ChunkLru(LRU_BYTES)
        # decoded samples, filled lazily ((N, 2, T) ids and labels) or by the scan ((N, 3, T)
        # as stored, padding's labels IGNORE: hdf5_scan.py); `_lab`: the labels' row
        self._cache: np.ndarray | None = None
        self._lab = 1
        self._have = np.zeros(0, bool)  # (N,) which rows of _cache are decoded
        self._missing = n  # rows of _cache not decoded yet
        self._complete = False  # every row of _cache decoded (no lookup per batch)
        scan = Scan(self, CACHE_BYTES) if verify and small else None
        try:
            for j, p in enumerate(parts):
                self._open_part(j, p)
                if scan is not None:
                    scan.opened(j)
            compressed = any(not isinstance(d, np.ndarray) for d in self._data)
            if scan is not None:
                scan.finish(compressed)
        except BaseException:
            if scan is not None:
                scan.cancel()  # the helpers stop before the files close
            raise
        if scan is None and compressed and n * 2 * seq_len * 4 <= CACHE_BYTES:
            self._cache = np.empty((n, 2, seq_len), np.int32)
            self._have = np.zeros(n, bool)
        self._all_mapped = not any(self.check_each_batch) and not compressed

    def _open_part(self, j: int, p: H5Part) -> None:
        """Open part j's file, map it when uncompressed, and index its chunks (`_open`)."""
        f, ds = self._opened.pop(p.path) if p.path in self._opened else open_data(p.path)
        self._files.append(f)
        mapped = self._mapped(p.path, ds, p.stop)
        self._data.append(ds if mapped is None else mapped)
        chunks = ds.chunks if mapped is None else None
        self._rows.append(chunks[0] if chunks and chunks[1:] == (3, self.T) else 0)
        self._gzip.append(
            mapped is None
            and ds.compression == "gzip"
            and not (ds.shuffle or ds.fletcher32 or ds.scaleoffset is not None)
        )
        self._dtypes.append(self._data[j].dtype)
        self._n_rows.append(int(self._data[j].shape[0]))
        self._map_chunks(j)

    def _map_chunks(self, j: int) -> None:
        """Part j's chunk table and map (see `_open`), when its chunks are gzip alone. (A
        method of its own: no frame of `_open` holds a view of the map when a check fails,
        which would keep `close` from unmapping it.)"""
        p, ds, rows = self.parts[j], self._data[j], self._rows[j]
        m = raw = where = None
        if self._gzip[j] and rows:
            with open(p.path, "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            raw = np.frombuffer(m, np.uint8)  # (L,) the file
            where = self._chunk_table(raw, ds, rows, p.stop)
        self._maps.append(m)
        self._bytes.append(raw)
        if where is None or raw is None:
            self._spots.append(None)
            self._plain.append(None)
            return
        at, size, fmask = where
        outside = (size >= 0) & ((at < 0) | (at + size > len(raw)))
        size[outside] = -2  # stored past the end of the file: refused when read (`_decode`)
        self._spots.append((at.tolist(), size.tolist(), fmask.tolist()))
        plain = np.where((size >= 0) & (fmask == 0), size, -1)
        self._plain.append(((at + raw.ctypes.data).tolist(), plain.tolist()))

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
        return ids_and_labels(raw, None, self._check_raw(j, local, raw))

    def _check_raw(self, j: int, local: np.ndarray | range, raw: np.ndarray) -> bool:
        """Stored rows `raw` (b, 3, T) of part j (file rows `local`): ids in the vocabulary, a
        label in it wherever attention_mask is not 0, no sample all padding; -> whether any
        attention_mask is 0 (padding)."""
        padded = int(raw[:, 1].min()) == 0
        if raw.dtype == np.int32 and not padded:
            # no padding (the usual sample): one pass each (one over both rows' strided view
            # is twice as slow), a negative value being a large one as uint32; the value
            # itself is found below only when one is bad
            v = self.vocab_size
            if (
                int(raw[:, 0].view(np.uint32).max()) < v
                and int(raw[:, 2].view(np.uint32).max()) < v
            ):
                return padded
        self._find_bad(j, local, raw)
        return padded

    def _find_bad(self, j: int, local: np.ndarray | range, raw: np.ndarray) -> None:
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
                raise self._corrupt(j, c, f"{type(e).__name__}: {e}") from None
        # gzip alone (the Model Zoo's layout): inflate the stored chunk ourselves, which skips
        # h5py's selection machinery; an edge chunk is stored at full size
        spots, mapped = self._spots[j], self._bytes[j]
        if spots is not None and spots[1][c] == -2:
            raise self._corrupt(j, c, "it is stored past the end of the file")
        if spots is not None and mapped is not None and spots[1][c] >= 0:
            at = spots[0][c]
            mask, raw = spots[2][c], mapped[at : at + spots[1][c]]
        else:  # not written (h5py's fill value), or no chunk index walk in this h5py
            mask, raw = data.id.read_direct_chunk((c * rows, 0, 0))
        try:
            packed = raw.data if isinstance(raw, np.ndarray) else raw  # the map's bytes, uncopied
            chunk = np.frombuffer(raw if mask else inflate(packed), dtype=self._dtypes[j])
        except Exception as e:  # noqa: BLE001 - isal.IsalError or zlib.error: corrupt data
            raise self._corrupt(j, c, f"{type(e).__name__}: {e}") from None
        if rows == 1:
            return chunk.reshape(1, 3, self.T)
        return chunk.reshape(rows, 3, self.T)[: min(rows, self._n_rows[j] - c * rows)]

    def _inflate_samples(self, j: int, local: np.ndarray) -> np.ndarray:
        """Rows `local` (b,) of part j, stored gzip in chunks of one sample (the Model Zoo's
        layout), inflated on the runtime's worker threads: (b, 3, T).

        A shuffled first epoch reads every sample once, so nothing here is worth keeping in
        the chunk LRU; inflating is the whole cost (a memory-mapped token file is a copy), and
        the inflaters release the GIL (runtime/data/inflate.py), so the batch's samples inflate
        side by side, INFLATE_CHUNK or more to a task, the calling thread taking its share."""
        out = np.empty((len(local), 3, self.T), self._dtypes[j])  # (b, 3, T)
        rows = [int(i) for i in local]
        step = max(INFLATE_CHUNK, -(-len(rows) // (2 * threads.workers())))

        def inflate_some(k: int) -> None:
            lo, hi = k * step, min(len(rows), (k + 1) * step)
            self._inflate_rows(j, rows[lo:hi], out[lo:hi])

        threads.run_chunks(inflate_some, -(-len(rows) // step), idle_only=True)
        return out

    def _inflate_rows(self, j: int, rows: list[int] | range, out: np.ndarray) -> None:
        """Samples `rows` of part j (gzip, one-sample chunks) inflated into `out` (b, 3, T),
        C-contiguous: each chunk inflated from the file's map straight into its row (no read,
        no copy, no object per sample: runtime/data/inflate.py); a chunk that is not a plain
        zlib stream in the file goes through `_decode`."""
        plain = self._plain[j]
        if plain is None:
            for r, c in enumerate(rows):
                out[r] = self._decode(j, c)[0]
            return
        assert out.flags.c_contiguous and len(out) == len(rows)  # written by address
        src, size = plain
        dst, nb, k = out.ctypes.data, out[0].nbytes, 0
        while True:
            k, why = inflate_rows(src, size, rows, k, dst, nb)
            if k == len(rows):
                return
            if why:
                raise self._corrupt(j, rows[k], why)
            out[k] = self._decode(j, rows[k])[0]  # not written, stored unfiltered, or outside
            k += 1

    @staticmethod
    def _chunk_table(
        file: np.ndarray, ds: Any, rows: int, stop: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(byte offset, stored size (-1: not written), filter mask) of each chunk holding rows
        below `stop` (the part's end, checked against the chunks the file stores: `_backed`),
        (C,) each, never sized by the declared shape; None when this h5py / HDF5 cannot walk
        the chunk index. Read from the file's B-tree itself (`file`: the file mapped) where it
        is the usual one (hdf5_layout.btree_chunks), else by HDF5's chunk_iter."""
        count = -(-int(stop) // rows)
        at, size, mask = (
            np.zeros(count, np.int64),
            np.full(count, -1, np.int64),
            np.zeros(count, np.int64),
        )
        found = btree_chunks(file, ds)
        if found is not None:
            c = found[0] // rows
            keep = c < count
            c = c[keep]
            at[c], size[c], mask[c] = found[1][keep], found[2][keep], found[3][keep]
            return at, size, mask
        if not hasattr(ds.id, "chunk_iter"):
            return None
        infos: list[Any] = []  # StoreInfo(chunk_offset, filter_mask, byte_offset, size)
        try:  # the callback is list.append: no Python frame per chunk (h5py goes on on None)
            ds.id.chunk_iter(infos.append)
        except (RuntimeError, ValueError, TypeError):  # HDF5 built without H5Dchunk_iter
            return None
        if not infos:
            return at, size, mask
        where, masks, offsets, sizes = zip(*infos, strict=True)  # (C,) each
        c = np.asarray([w[0] for w in where], np.int64) // rows  # each chunk's first row
        keep = c < count
        c = c[keep]
        at[c] = np.asarray(offsets, np.int64)[keep]
        size[c] = np.asarray(sizes, np.int64)[keep]
        mask[c] = np.asarray(masks, np.int64)[keep]
        return at, size, mask

    def _corrupt(self, j: int, c: int, why: str) -> ConfigError:
        """The one sentence for a chunk that does not decode (`why`: what the decoder said)."""
        rows = self._rows[j] or 1
        which = f"sample {c}" if rows == 1 else f"samples {c * rows}-{(c + 1) * rows - 1}"
        return ConfigError(
            f"HDF5 file {self.parts[j].path} {which}: the compressed data is corrupt "
            f"({why}); re-create the file."
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
            raise self._corrupt(j, int(local[order[0]]), f"{type(e).__name__}: {e}") from None
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
            if not self._complete:
                new = np.unique(idx[~self._have[idx]])  # (b,) first read of these samples
                if len(new):
                    self._cache[new] = self._gather(new)
                    self._have[new] = True
                    self._missing -= len(new)
                    self._complete = self._missing == 0
            # (B, T) each, gathered straight from the cache (no (B, 2, T) copy in between)
            return {"input_ids": self._cache[idx, 0], "labels": self._cache[idx, self._lab]}
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
        self._bytes, self._plain = [], []  # the maps' last exports: closing needs them gone
        for m in self._maps:
            if m is not None:
                try:
                    m.close()
                except BufferError:  # a view is still held (a traceback's frame): unmapped
                    pass  # when that view goes
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

    # Files this recipe's inspection left open, for its first `load` in this process (one
    # open per file, not two; ~0.3 ms a file). Never pickled nor copied (`cut`, `replace`:
    # a worker opens its own); closed with the recipe when no load takes them.
    _opened: dict[str, tuple[Any, Any]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_opened"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _opened={})

    @classmethod
    def of(cls, paths: list[Path], seq_len: int, vocab_size: int) -> H5Files:
        """Every sample of `paths`, in order (each file's layout checked now)."""
        parts, kept = [], dict[str, tuple[Any, Any]]()
        try:
            for p in paths:
                n = inspect(str(p), seq_len, kept)
                if n:
                    parts.append(H5Part(str(p), 0, n))
        except BaseException:
            for f, _ in kept.values():
                f.close()
            raise
        if not parts:
            names = ", ".join(p.name for p in paths)
            raise ConfigError(
                f"HDF5 files {names} in {paths[0].parent} hold no samples; re-create them."
            )
        recipe = cls(tuple(parts), seq_len, vocab_size)
        recipe._opened.update(kept)
        return recipe

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
        opened = dict(self._opened)
        self._opened.clear()  # taken once: a second load opens the files itself
        return H5Samples(self.parts, self.seq_len, self.vocab_size, self.verify, opened)
