"""A small gzip HDF5 data set is scanned while its files open (runtime/data/hdf5_scan.py): a
helper thread inflates file k while the caller opens file k + 1. What must not change with it:
the load still returns only when every sample is checked (a bad value in a later file stops
the load, before the first batch, with the sentence naming that file and sample), a file that
fails to open is reported before any bad value, the first bad sample in the data set's order
is the one named, nothing stays open after a failure, and the batches are the files' rows,
the same on one thread as on two."""

from __future__ import annotations

import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from gpt_h5 import VOCAB, params, rows, write  # noqa: E402

from cs2sim.runtime import threads  # noqa: E402
from cs2sim.runtime.data import build_input, hdf5, hdf5_scan  # noqa: E402
from cs2sim.system.errors import ConfigError  # noqa: E402

WAIT = 60.0  # seconds an event may take on a loaded host (never reached when things work)


@pytest.fixture
def two_threads(monkeypatch):
    """Two worker threads and a core idle for the helper, whatever the host's load."""
    threads.set_workers(2)
    monkeypatch.setattr(threads, "idle_cores", lambda: 1)
    yield
    threads.set_workers(threads.available_cores())


def three_files(d: Path, bad: dict[int, int] | None = None) -> np.ndarray:
    """Files a.h5, b.h5, c.h5 of 40 samples each; bad: file -> sample given an id VOCAB."""
    data = rows(120, seed=3)
    data[7, 1, 4] = 0  # padding: its label becomes IGNORE in the batch
    for k, name in enumerate("abc"):
        part = data[40 * k : 40 * (k + 1)].copy()
        if bad and k in bad:
            part[bad[k], 0, 2] = VOCAB
        write(d / f"{name}.h5", part)
    return data


def open_h5() -> list[str]:
    """This process's descriptors on .h5 files."""
    fds = Path("/proc/self/fd")
    links = [os.readlink(f) for f in fds.iterdir() if f.is_symlink()] if fds.is_dir() else []
    return [link for link in links if link.endswith(".h5")]


def test_file_one_is_scanned_while_file_two_opens(tmp_path, monkeypatch, two_threads):
    three_files(tmp_path)
    scanned = threading.Event()  # a helper finished a task of the first file
    task, open_part = hdf5_scan.Scan._task, hdf5.H5Samples._open_part

    def noted_task(self, k, slot):
        task(self, k, slot)
        if slot and self.tasks[k][0] == 0:
            scanned.set()

    def waiting_open(self, j, p):
        if j == 1:  # the second file opens only once a helper has scanned part of the first
            assert scanned.wait(WAIT)
        open_part(self, j, p)

    monkeypatch.setattr(hdf5_scan.Scan, "_task", noted_task)
    monkeypatch.setattr(hdf5.H5Samples, "_open_part", waiting_open)
    with build_input(params(tmp_path, batch_size=8), "train", "gpt2", 1) as s:
        assert s._data._complete  # every sample scanned and kept when the load returned


@pytest.mark.parametrize("helpers", [True, False])
def test_a_bad_value_in_the_last_file_stops_the_load(tmp_path, monkeypatch, helpers):
    three_files(tmp_path, bad={2: 5})
    threads.set_workers(2)
    monkeypatch.setattr(threads, "idle_cores", lambda: 1 if helpers else 0)
    before = open_h5()
    try:
        with pytest.raises(ConfigError, match=r"HDF5 file \S*c\.h5 has token id 300 but vocab"):
            build_input(params(tmp_path, batch_size=8), "train", "gpt2", 1)
    finally:
        threads.set_workers(threads.available_cores())
    assert open_h5() == before  # every file closed again


def test_the_first_bad_sample_in_order_is_named(tmp_path, monkeypatch, two_threads):
    three_files(tmp_path, bad={0: 33, 2: 1})
    task = hdf5_scan.Scan._task
    late = threading.Event()

    def slow_first_file(self, k, slot):  # the first file's bad task ends after the other's
        if self.tasks[k][0] == 0 and self.tasks[k][1] <= 33 < self.tasks[k][2]:
            late.wait(WAIT / 10)
        try:
            task(self, k, slot)
        finally:
            if self.tasks[k][0] == 2:
                late.set()

    monkeypatch.setattr(hdf5_scan.Scan, "_task", slow_first_file)
    with pytest.raises(ConfigError, match=r"a\.h5 has token id 300 .*\(sample 33\)"):
        build_input(params(tmp_path, batch_size=8), "train", "gpt2", 1)


def test_a_file_that_fails_to_open_is_reported_before_a_bad_value(
    tmp_path, monkeypatch, two_threads
):
    three_files(tmp_path, bad={0: 2})
    open_data = hdf5.open_data

    def gone(path: str):  # c.h5 became unreadable between its inspection and the load
        if path.endswith("c.h5"):
            raise ConfigError(f"cannot read HDF5 file {path} (Permission denied); check it.")
        return open_data(path)

    monkeypatch.setattr(hdf5, "open_data", gone)
    before = open_h5()
    # with an input worker the consumer loads (and scans) its part afresh, opening every
    # file again (in-process, the load takes the files the inspection left open)
    with pytest.raises(ConfigError, match=r"cannot read HDF5 file \S*c\.h5"):
        build_input(params(tmp_path, batch_size=8, num_workers=1), "train", "gpt2", 1)
    assert open_h5() == before


def test_the_load_takes_the_files_the_inspection_left_open(tmp_path, monkeypatch):
    data = three_files(tmp_path)
    opened = []
    open_data = hdf5.open_data
    monkeypatch.setattr(hdf5, "open_data", lambda path: opened.append(path) or open_data(path))
    before = open_h5()
    with build_input(params(tmp_path, batch_size=8, shuffle=False), "train", "gpt2", 1) as s:
        assert opened == []  # no file opened twice
        first = next(s)["input_ids"]
    assert np.array_equal(first, data[:8, 0])
    assert open_h5() == before
    recipe = hdf5.H5Files.of(sorted(tmp_path.glob("*.h5")), 32, VOCAB)
    assert len(recipe._opened) == 3
    copy = pickle.loads(pickle.dumps(recipe))  # a worker's copy holds no open file
    assert copy == recipe and copy._opened == {}
    del recipe  # never loaded: its files close with it
    assert open_h5() == before


def test_batches_are_the_rows_on_one_thread_and_on_two(tmp_path, monkeypatch):
    data = three_files(tmp_path)
    want_labels = np.where(data[:, 1] == 0, -1, data[:, 2])  # (n, T): IGNORE at padding
    got = {}
    for n in (1, 2):
        threads.set_workers(n)
        monkeypatch.setattr(threads, "idle_cores", lambda: 1)
        try:
            with build_input(params(tmp_path, batch_size=8), "train", "gpt2", 1) as s:
                batches = [next(s) for _ in range(s.batches_per_epoch)]
        finally:
            threads.set_workers(threads.available_cores())
        got[n] = batches
    for a, b in zip(got[1], got[2], strict=True):
        assert np.array_equal(a["input_ids"], b["input_ids"])
        assert np.array_equal(a["labels"], b["labels"])
    ids = np.concatenate([b["input_ids"] for b in got[2]])
    labels = np.concatenate([b["labels"] for b in got[2]])
    order = [int(np.flatnonzero((data[:, 0] == row).all(axis=1))[0]) for row in ids]
    assert sorted(order) == list(range(120))  # every sample once
    assert np.array_equal(labels, want_labels[order])
