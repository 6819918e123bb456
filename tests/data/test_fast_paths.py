"""The input readers' fast paths give what the plain ones give: the chunk table read from the
HDF5 file's own B-tree (and HDF5's chunk_iter where the index is another), every inflater
(libdeflate, ISA-L / zlib) with its corrupt-chunk sentence, helper threads only for idle cores,
and BERT's batch-at-once masks (each sample's the same in any batch)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from gpt_h5 import params, rows, write  # noqa: E402

from cs2sim.runtime import threads  # noqa: E402
from cs2sim.runtime.data import build_input, hdf5, inflate  # noqa: E402
from cs2sim.runtime.data.hdf5_layout import btree_chunks  # noqa: E402
from cs2sim.runtime.data.masking import draw_masks  # noqa: E402
from cs2sim.system.errors import ConfigError  # noqa: E402


def epoch(d: Path) -> np.ndarray:
    with build_input(params(d, shuffle=False), "train", "gpt2", 1) as s:
        return np.concatenate([next(s)["input_ids"] for _ in range(s.batches_per_epoch)])


@pytest.mark.parametrize("n,chunk", [(1, 1), (40, 1), (3000, 1), (64, 5)])
def test_the_b_tree_gives_hdf5s_own_chunk_table(tmp_path, n, chunk):
    path = write(tmp_path / "a.h5", rows(n), chunk=chunk)  # 3000 chunks: a tree of several levels
    with h5py.File(path, "r") as f:
        ds = f["data"]
        got = btree_chunks(np.fromfile(path, np.uint8), ds)
        assert got is not None
        want = []
        ds.id.chunk_iter(want.append)
    first, at, size, mask = got
    assert first.tolist() == [w.chunk_offset[0] for w in want]
    assert at.tolist() == [w.byte_offset for w in want]
    assert size.tolist() == [w.size for w in want]
    assert mask.tolist() == [w.filter_mask for w in want]


def test_another_chunk_index_is_read_through_hdf5(tmp_path):
    data = rows(40)
    path = write(tmp_path / "h5" / "a.h5", data, libver="latest")  # not a version-1 B-tree
    with h5py.File(path, "r") as f:
        assert btree_chunks(np.fromfile(path, np.uint8), f["data"]) is None
    assert np.array_equal(epoch(path.parent), data[:, 0])
    with build_input(params(path.parent, shuffle=False), "train", "gpt2", 1) as s:
        assert s._data._plain[0] is not None  # still a chunk table: HDF5's chunk_iter's


@pytest.mark.parametrize("fallback", [False, True])
def test_every_inflater_reads_the_rows_and_names_a_corrupt_sample(tmp_path, monkeypatch, fallback):
    if fallback:  # ISA-L or zlib, as on a host without libdeflate
        monkeypatch.setattr(inflate, "_LIB", None)
    data = rows(40)
    path = write(tmp_path / "h5" / "a.h5", data)
    assert np.array_equal(epoch(path.parent), data[:, 0])
    with h5py.File(path, "r") as f:
        info = f["data"].id.get_chunk_info_by_coord((9, 0, 0))
    raw = bytearray(path.read_bytes())
    raw[info.byte_offset + 12] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(ConfigError, match=r"a\.h5 sample 9: the compressed data is corrupt \("):
        build_input(params(path.parent, shuffle=False), "train", "gpt2", 1)


def test_a_chunk_stored_past_the_end_of_the_file_is_refused_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(hdf5, "CHECK_ALL_VALUES", 0)  # read lazily
    path = write(tmp_path / "h5" / "a.h5", rows(40))
    with build_input(params(path.parent, shuffle=False), "train", "gpt2", 1) as s:
        data = s._data  # the consumer's own samples (no input workers)
        assert isinstance(data, hdf5.H5Samples)
        spots = data._spots[0]
        spots[1][5] = -2  # as `_map_chunks` marks a chunk whose bytes lie past the file's end
        data._plain[0][1][5] = -1
        next(s)
        with pytest.raises(ConfigError, match=r"sample 5: .*stored past the end of the file"):
            next(s)


def test_helper_threads_only_for_idle_cores(monkeypatch):
    monkeypatch.setattr(threads, "workers", lambda: 2)
    ran: set[int] = set()

    def note(i: int) -> None:
        ran.add(threading.get_ident())

    monkeypatch.setattr(threads, "idle_cores", lambda: 0)  # a loaded host
    threads.run_chunks(note, 64, idle_only=True)
    assert ran == {threading.get_ident()}  # every chunk on the calling thread


def test_idle_cores_counts_the_runnable_threads():
    n = threads.idle_cores()
    assert 0 <= n < threads.available_cores()  # this thread is runnable itself


def test_a_samples_masks_do_not_depend_on_its_batch():
    rng = np.random.default_rng(0)
    B, L = 16, 64
    ids = rng.integers(5, 1000, (B, L)).astype(np.int32)
    lens = rng.integers(8, L, B)
    maskable = (np.arange(L) > 0) & (np.arange(L) < lens[:, None] - 1)  # (B, L)
    idx = np.arange(100, 100 + B)
    args = (20, 0.15, 4, (5, 1000), 7)
    whole = ids.copy()
    pos, lab, w = draw_masks(whole, maskable, lens, *args, idx, 3)
    for b in (0, 5, 15):  # alone, as a batch of one
        one = ids[b : b + 1].copy()
        p1, l1, w1 = draw_masks(one, maskable[b : b + 1], lens[b : b + 1], *args, idx[b : b + 1], 3)
        assert np.array_equal(one[0], whole[b]) and np.array_equal(p1[0], pos[b])
        assert np.array_equal(l1[0], lab[b]) and np.array_equal(w1[0], w[b])
    n = w.sum(axis=1).astype(int)
    assert n.tolist() == np.minimum(20, np.maximum(1, np.rint(lens * 0.15))).astype(int).tolist()
    for b in range(B):
        p = pos[b, : n[b]]
        assert (np.diff(p) > 0).all() and maskable[b, p].all()  # ascending, maskable, distinct
        assert np.array_equal(lab[b, : n[b]], ids[b, p])  # the original ids are the labels
        assert set(np.flatnonzero(whole[b] != ids[b])) <= set(p)  # nothing else changed
    other = ids.copy()
    draw_masks(other, maskable, lens, *args, idx, 4)
    assert not np.array_equal(other, whole)  # another epoch, other masks
