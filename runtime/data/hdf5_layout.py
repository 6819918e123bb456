"""The Model Zoo's GPT HDF5 layout on disk: finding the files, opening one, and checking what it
declares before anything is read or sized by it (runtime/data/hdf5.py reads the samples).

A file holds the attribute `n_examples` and the dataset `data`, integers of shape
[n_examples, 3, max_sequence_length] (input ids, attention mask, labels). `inspect` checks the
layout against max_sequence_length and `n_examples` against the rows, and `_backed` the declared
samples against the file itself: a declared shape costs nothing to write, so a contiguous
dataset must end inside the file and a chunked one must store every chunk its samples need.
An unreadable file is said to be unreadable ("permission denied"), not incomplete.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.nn.loss import IGNORE
from cs2sim.system.errors import ConfigError

__all__ = [
    "H5_SUFFIX",
    "find_h5_files",
    "open_data",
    "inspect",
    "H5Part",
    "ids_and_labels",
    "btree_chunks",
]

H5_SUFFIX = ".h5"


def find_h5_files(data_dir: str | Path) -> list[Path]:
    """The `.h5` files of a directory (or the file itself), in name order."""
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix == H5_SUFFIX else []
    return sorted(p for p in d.glob(f"*{H5_SUFFIX}") if p.is_file())


def _h5py() -> Any:
    import h5py  # imported here: only runs that read HDF5 pay for it

    return h5py


def open_data(path: str) -> tuple[Any, Any]:
    """(open h5py File, its `data` dataset), or a ConfigError naming the file."""
    h5py = _h5py()
    try:  # h5py says "unable to open file" for every cause: ask the OS first
        with open(path, "rb"):
            pass
    except PermissionError:
        raise ConfigError(
            f"HDF5 file {path} cannot be read: permission denied; make it readable "
            f"(chmod a+r) or point data_dir elsewhere."
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read HDF5 file {path} ({e.strerror}); check it.") from None
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ConfigError(
            f"cannot read HDF5 file {path} ({e}); check that it is a complete .h5 file."
        ) from None
    if "data" not in f:
        keys = ", ".join(sorted(f.keys())) or "nothing"
        f.close()
        raise ConfigError(
            f"HDF5 file {path} has no 'data' dataset (it holds {keys}); write it "
            f"in the Model Zoo's GPT layout (cs2sim-preprocess gpt2-hdf5)."
        )
    return f, f["data"]


def inspect(path: str, seq_len: int, keep: dict[str, tuple[Any, Any]] | None = None) -> int:
    """Samples in one file, after checking its layout against max_sequence_length; with
    `keep`, a file that holds samples is left open there (path -> (h5py File, its `data`)),
    for the load that follows to read without opening it again."""
    f, ds = open_data(path)
    kept = False
    try:
        if ds.ndim != 3 or ds.shape[1] != 3:
            raise ConfigError(
                f"HDF5 file {path} has 'data' of shape {ds.shape}; the GPT layout "
                f"is [n_examples, 3, max_sequence_length]."
            )
        if not np.issubdtype(ds.dtype, np.integer):
            raise ConfigError(
                f"HDF5 file {path} holds {ds.dtype} values; token ids must be integers."
            )
        if ds.shape[2] > seq_len:
            raise ConfigError(
                f"HDF5 file {path} holds sequences of {ds.shape[2]} tokens, longer "
                f"than max_sequence_length {seq_len}; re-create it with "
                f"--max_seq_length {seq_len} or raise max_sequence_length."
            )
        if ds.shape[2] < seq_len:
            raise ConfigError(
                f"HDF5 file {path} holds sequences of {ds.shape[2]} tokens but "
                f"max_sequence_length is {seq_len}; set it to {ds.shape[2]}."
            )
        n = int(f.attrs.get("n_examples", ds.shape[0]))
        if not 0 <= n <= ds.shape[0]:
            raise ConfigError(
                f"HDF5 file {path} says n_examples {n} but holds {ds.shape[0]} rows; re-create it."
            )
        _backed(path, ds, n)
        if keep is not None and n:
            keep[path], kept = (f, ds), True
        return n
    finally:
        if not kept:
            f.close()


def _backed(path: str, ds: Any, n: int) -> None:
    """The first n rows of `ds` are really in the file, checked before anything is sized by
    them: a declared shape costs nothing to write (a 15 KB file can declare 200 million
    samples), so a contiguous dataset must end inside the file and a chunked one must store
    every chunk those rows need (h5py reads an unstored chunk as zeros: never data)."""
    size = Path(path).stat().st_size
    row_bytes = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
    if ds.chunks is None:
        offset = ds.id.get_offset()
        if offset is not None and offset + n * row_bytes > size:
            raise ConfigError(
                f"HDF5 file {path} declares {n} samples ({n * row_bytes} bytes of data) but "
                f"is only {size} bytes long; it is truncated or damaged: re-create it."
            )
        return
    per_rows = int(np.prod([-(-d // c) for d, c in zip(ds.shape[1:], ds.chunks[1:], strict=True)]))
    needed = -(-n // ds.chunks[0]) * per_rows
    stored = ds.id.get_num_chunks() if hasattr(ds.id, "get_num_chunks") else needed
    if needed > stored:
        raise ConfigError(
            f"HDF5 file {path} declares {n} samples in chunks of {ds.chunks[0]} but stores "
            f"only {stored} of the {needed} chunks they need ({size} bytes in all); it is "
            f"truncated or its shape is wrong: re-create it."
        )


@dataclass(frozen=True)
class H5Part:
    """Samples [start, stop) of one file."""

    path: str
    start: int
    stop: int


def ids_and_labels(
    rows: np.ndarray, out: np.ndarray | None = None, padded: bool | None = None
) -> np.ndarray:
    """(b, 3, T) stored samples -> (b, 2, T) input ids and labels (into `out` when given), a
    label IGNORE where the attention mask is 0 (padding: the loss skips it,
    runtime/nn/loss.py). `padded`: whether any mask is 0, when the caller knows (else found)."""
    if out is None:
        out = np.empty((len(rows), 2, rows.shape[2]), np.int32)  # (b, 2, T)
    out[...] = rows[:, 0::2]
    mask = np.asarray(rows[:, 1])  # (b, T)
    if padded is None:  # one pass to know; most samples have no padding
        padded = int(mask.min()) == 0
    if padded:
        np.copyto(out[:, 1], IGNORE, where=mask == 0)  # putmask: 2.5x slower
    return out


_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_MAX_NODES = 1 << 22  # a bound on the walk: a damaged tree cannot loop
_NODE = struct.Struct("<4sBBH")  # a B-tree node's signature, type, level, entries used


def btree_chunks(
    file: np.ndarray, ds: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(first row, byte offset, stored size, filter mask), (C,) each, of every stored chunk of
    the chunked dataset `ds`, read from the file's own version-1 B-tree of chunks (the index
    h5py writes by default, so the Model Zoo's files: "HDF5 File Format Specification Version
    3.0", sections II.A superblock, IV.A.1.a object header, IV.A.2.i data layout message,
    III.A.1 B-tree), one numpy read per node, no Python object per chunk. `file`: the file
    mapped, uint8 (L,). None whenever anything differs from that layout (a superblock at
    another place or with other sizes of offsets, a version-2 object header, a version-4
    layout message with its other indexes, a node that does not parse, chunks whose count or
    first entry disagree with HDF5's own answer): the caller then asks HDF5 (`chunk_iter`)."""
    try:
        return _btree_chunks(file, ds)
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, RuntimeError):
        return None


def _btree_chunks(
    file: np.ndarray, ds: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    size = len(file)
    # superblock version 0 or 1 at the start, 8-byte offsets and lengths
    if bytes(file[:8]) != _SIGNATURE or file[8] > 1 or file[13] != 8 or file[14] != 8:
        return None
    h5o = __import__("h5py").h5o
    header = int(h5o.get_info(ds.id).addr)
    btree, dims = _layout(file, header)
    if btree is None:
        return None
    entry = np.dtype([("size", "<u4"), ("mask", "<u4"), ("off", "<u8", (dims,)), ("child", "<u8")])
    parts, todo, seen, buf = [], [btree], 0, file.data
    while todo:
        at = todo.pop()
        seen += 1
        if seen > _MAX_NODES or not 0 <= at <= size - 24:
            return None
        sig, node_type, level, used = _NODE.unpack_from(buf, at)  # no numpy scalars
        if sig != b"TREE" or node_type != 1 or at + 24 + used * entry.itemsize > size:
            return None
        if level:
            e = np.frombuffer(file, entry, used, at + 24)  # (used,) key k and child k
            todo.extend(int(c) for c in e["child"][::-1])  # in order: the first popped first
        else:
            parts.append((at + 24, used))
    if not parts:
        return None
    # the leaves' entries copied into one array (np.concatenate of structured arrays
    # promotes their fields first: half the walk's time)
    e = np.empty(sum(n for _, n in parts), entry)
    row = 0
    for at, used in parts:
        e[row : row + used] = np.frombuffer(file, entry, used, at)
        row += used
    first, stored = e["off"][:, 0].astype(np.int64), e["size"].astype(np.int64)
    places = e["child"].astype(np.int64)
    masks = e["mask"].astype(np.int64)
    chunks = ds.chunks[0]
    if (
        len(e) != ds.id.get_num_chunks()
        or (e["off"][:, 1:] != 0).any()
        or (first % chunks).any()
        or ((places < 0) | (places + stored > size) | (stored <= 0)).any()
    ):
        return None
    info = ds.id.get_chunk_info(0)  # HDF5's own first chunk: the same place and size
    k = np.flatnonzero(first == info.chunk_offset[0])
    if len(k) != 1 or places[k[0]] != info.byte_offset or stored[k[0]] != info.size:
        return None
    return first, places, stored, masks


def _layout(file: np.ndarray, header: int) -> tuple[int | None, int]:
    """(address of the chunk B-tree, its keys' dimensionality) from the data layout message
    (version 3, chunked) of the version-1 object header at `header`; (None, 0) otherwise."""
    if file[header] != 1:  # a version-2 header starts "OHDR"
        return None, 0
    count = int(np.frombuffer(file, "<u2", 1, header + 2)[0])
    blocks = [(header + 16, int(np.frombuffer(file, "<u4", 1, header + 8)[0]))]
    while blocks and count > 0:
        at, length = blocks.pop(0)
        end = at + length
        while at + 8 <= end and count > 0:
            kind, n = (int(x) for x in np.frombuffer(file, "<u2", 2, at))
            body = at + 8
            count -= 1
            if kind == 0x10:  # continuation: another block of messages
                where, more = (int(x) for x in np.frombuffer(file, "<u8", 2, body))
                blocks.append((where, more))
            elif kind == 0x08:  # data layout
                if file[body] != 3 or file[body + 1] != 2:  # version 3, chunked
                    return None, 0
                dims = int(file[body + 2])
                return int(np.frombuffer(file, "<u8", 1, body + 3)[0]), dims
            at = body + n
    return None, 0
