"""A checkpoint's arrays read with one copy each.

`np.load` reads a member of an .npz through zipfile: 256 KiB at a time, each piece CRC-32'd and
copied into the array (numpy's `read_array` on a file-like object). Checkpoints here are written
by `np.savez` (members stored, not deflated), so each member's bytes lie in the file as they
are: this module reads each array's bytes from the file straight into the array's memory, one
`readinto` per member (less than half np.load's CPU time on a 500 MB GPT-2 checkpoint). The zip
CRC is not recomputed on that path; the checkpoint's own sha256 over every array (checkpoint.py
`_digest`) is checked after the read, so a flipped byte is still found. A deflated or encrypted
member (an .npz written by `np.savez_compressed` or another tool) is read through zipfile as
`np.load` would.

Every member's declared shape has already been checked against its size (checkpoint.py
`_check_archive`); this module checks again that each array ends inside its member and the
member inside the file, so a file that changed in between is refused, never read short.
"""

from __future__ import annotations

import io
import math
import os
import struct
import zipfile
from typing import IO, Any, BinaryIO

import numpy as np
from numpy.lib import format as npformat

__all__ = ["read_members", "npy_header"]

LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # PKWARE APPNOTE 4.3.7: the local file header
LOCAL_MAGIC = b"PK\x03\x04"
NPY_HEADER_MAX = 1 << 16  # numpy refuses .npy headers over 10,000 bytes (max_header_size)


def read_members(f: BinaryIO) -> dict[str, np.ndarray[Any, Any]]:
    """Every member of the .npz `f` (a regular file), by name without `.npy`."""
    f.seek(0)
    out: dict[str, np.ndarray[Any, Any]] = {}
    size = os.fstat(f.fileno()).st_size
    with zipfile.ZipFile(f) as zf:
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                with zf.open(info) as m:
                    out[name] = npformat.read_array(m, allow_pickle=False)
                continue
            out[name] = _stored(f, size, info)
    return out


def npy_header(stream: IO[bytes], name: str) -> tuple[tuple[int, ...], bool, np.dtype[Any]]:
    """(shape, fortran order, dtype) of the .npy header `stream` starts with; ValueError for a
    format version numpy does not write."""
    version = npformat.read_magic(stream)
    if version == (1, 0):
        return npformat.read_array_header_1_0(stream)
    if version == (2, 0):
        return npformat.read_array_header_2_0(stream)
    raise ValueError(f"member {name[:60]!r} is .npy version {version}")


def _stored(f: BinaryIO, size: int, info: zipfile.ZipInfo) -> np.ndarray[Any, Any]:
    """The array of a stored member, read from the file straight into its memory."""
    at = info.header_offset
    if not 0 <= at <= size - LOCAL_HEADER.size:
        raise ValueError(f"member {info.filename[:60]!r} starts outside the file")
    f.seek(at)
    raw = f.read(LOCAL_HEADER.size)
    fields = LOCAL_HEADER.unpack(raw)
    if fields[0] != LOCAL_MAGIC:
        raise ValueError(f"member {info.filename[:60]!r} has no local header")
    start = at + LOCAL_HEADER.size + fields[9] + fields[10]  # + name and extra field lengths
    end = start + info.file_size
    if end > size:
        raise ValueError(f"member {info.filename[:60]!r} ends past the end of the file")
    f.seek(start)
    head = io.BytesIO(f.read(min(info.file_size, NPY_HEADER_MAX)))
    shape, fortran, dtype = npy_header(head, info.filename)
    if dtype.hasobject:
        raise ValueError(f"member {info.filename[:60]!r} holds Python objects")
    offset = start + head.tell()
    if offset + dtype.itemsize * math.prod(shape) > end:
        raise ValueError(f"member {info.filename[:60]!r} declares more bytes than it holds")
    array = np.empty(shape, dtype, order="F" if fortran else "C")
    flat = array.reshape(-1, order="A").view(np.uint8)  # (nbytes,) the array's own memory
    done = 0
    while done < flat.size:  # one read; more only past the kernel's 2 GiB per call
        got = os.preadv(f.fileno(), [flat[done:].data], offset + done)
        if got <= 0:
            raise ValueError(f"member {info.filename[:60]!r} is cut short")
        done += got
    return array
