"""The fastest zlib inflate this host has, writing straight into the caller's rows.

HDF5's gzip filter stores each chunk as one zlib stream (RFC 1950). Three inflaters read it, the
first one present used:
  * libdeflate (the system's libdeflate.so, through ctypes): whole-buffer inflate into a given
    buffer of known size, no output object and no copy; on this host ~1.25x ISA-L's speed;
  * ISA-L (python-isal's isal_zlib): ~1.6x the standard library's zlib;
  * the standard library's zlib.
All three release the GIL while they inflate (ctypes drops it around a foreign call), so rows
inflate side by side on the runtime's worker threads. libdeflate's decompressor may not be
shared by two threads at once: each thread has its own (thread-local, made on first use).

`inflate_rows` inflates many chunks, given by address and size, into consecutive rows of one
C-contiguous array, each exactly one row long (libdeflate verifies the stream's Adler-32 and
that it fills the row exactly; the other two are checked by length). The addresses must lie
inside memory the caller keeps alive (a file's map): they are read, not checked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable, Sequence

from cs2sim.system import knobs

__all__ = ["BACKEND", "inflate", "inflate_rows"]

Inflate = Callable[[bytes | memoryview], bytes]

_zlib_inflate: Inflate
try:  # ISA-L's inflate (python-isal) reads the same zlib streams about 1.6x faster
    from isal.isal_zlib import decompress as _zlib_inflate
except ImportError:  # pragma: no cover - the standard library's is the fallback
    from zlib import decompress as _zlib_inflate

_RESULTS = {1: "bad data", 2: "shorter than a row", 3: "longer than a row"}  # libdeflate's


def _libdeflate() -> tuple[Callable[..., int], Callable[[], int], Callable[[int], None]] | None:
    """(zlib_decompress, alloc_decompressor, free_decompressor) of the system's libdeflate,
    or None when it is absent (or CS2SIM_INFLATE names another inflater)."""
    if knobs.text("CS2SIM_INFLATE") not in ("", "libdeflate"):
        return None
    name = ctypes.util.find_library("deflate")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        decompress = lib.libdeflate_zlib_decompress
        alloc, free = lib.libdeflate_alloc_decompressor, lib.libdeflate_free_decompressor
    except (OSError, AttributeError):  # not loadable, or too old to have these
        return None
    vp, size = ctypes.c_void_p, ctypes.c_size_t
    decompress.argtypes = (vp, vp, size, vp, size, vp)
    decompress.restype = ctypes.c_int
    alloc.argtypes, alloc.restype = (), vp
    free.argtypes, free.restype = (vp,), None
    return decompress, alloc, free


_LIB = _libdeflate()
BACKEND = (
    "libdeflate"
    if _LIB is not None
    else "isal"
    if _zlib_inflate.__module__.startswith("isal")
    else "zlib"
)


class _Decompressor:
    """One thread's libdeflate decompressor, freed with the thread's locals."""

    def __init__(self) -> None:
        assert _LIB is not None
        self.ptr = _LIB[1]()
        if not self.ptr:
            raise MemoryError("libdeflate could not allocate a decompressor")

    def __del__(self) -> None:
        if _LIB is not None and getattr(self, "ptr", None):
            _LIB[2](self.ptr)


_local = threading.local()


def _decompressor() -> int:
    """This thread's libdeflate decompressor (made on its first use)."""
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = _Decompressor()
    ptr: int = d.ptr
    return ptr


def inflate(raw: bytes | memoryview) -> bytes:
    """One zlib stream inflated (to a new bytes object); zlib.error / isal's error when
    corrupt."""
    return _zlib_inflate(raw)


def inflate_rows(
    src: Sequence[int], size: Sequence[int], chunks: Sequence[int], start: int, dst: int, nb: int
) -> tuple[int, str]:
    """Inflate chunk chunks[k] (src[c]: its address, size[c]: its stored bytes) into the row at
    dst + k * nb, for k from `start` on, each exactly nb bytes.

    Stops at the first chunk whose size is negative (not stored as a plain zlib stream: the
    caller reads it another way) or that fails to inflate: -> (k stopped at, why it failed ("" when
    the size was negative)); (len(chunks), "") when every one was inflated."""
    k, n = start, len(chunks)
    if _LIB is not None:
        decompress, d = _LIB[0], _decompressor()
        out = dst + k * nb
        while k < n:
            c = chunks[k]
            m = size[c]
            if m < 0:
                return k, ""
            rc = decompress(d, src[c], m, out, nb, None)
            if rc:
                return k, _RESULTS.get(rc, f"libdeflate result {rc}")
            k += 1
            out += nb
        return k, ""
    while k < n:  # ISA-L or zlib: inflate to bytes, then copy into the row
        c = chunks[k]
        m = size[c]
        if m < 0:
            return k, ""
        try:
            got = _zlib_inflate(memoryview((ctypes.c_char * m).from_address(src[c])))
        except Exception as e:  # noqa: BLE001 - isal.IsalError or zlib.error: corrupt data
            return k, f"{type(e).__name__}: {e}"
        if len(got) != nb:
            return k, f"{len(got)} bytes where {nb} belong"
        ctypes.memmove(dst + k * nb, got, nb)
        k += 1
    return k, ""
