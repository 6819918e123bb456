"""A checkpoint's members read straight into their arrays (runtime/artifacts/npz_read.py): the
same arrays as np.load for every layout np.savez writes, deflated members through zipfile, and a
member cut short or pointing past the file refused, never read short."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.artifacts.npz_read import read_members


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "w": rng.standard_normal((7, 5)).astype(np.float32),
        "f": np.asfortranarray(rng.standard_normal((4, 6))),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3), np.int32),
        "text": np.array("meta json"),
        "big": np.arange(300_000, dtype=np.int64),  # past numpy's 256 KiB read pieces
    }


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_members_equal_np_load(tmp_path: Path, save) -> None:
    path = tmp_path / "a.npz"
    save(path, **_arrays())
    with open(path, "rb") as f:
        got = read_members(f)
    with np.load(path) as z:
        want = {n: z[n] for n in z.files}
    assert got.keys() == want.keys()
    for name, a in want.items():
        assert got[name].dtype == a.dtype and got[name].shape == a.shape
        assert np.array_equal(got[name], a), name


def test_a_member_cut_short_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, big=np.arange(300_000, dtype=np.int64))
    data = bytearray(path.read_bytes())
    # the .npy header inside the stored member declares more elements than the member holds
    at = data.index(b"(300000,)")
    data[at : at + 9] = b"(300001,)"
    path.write_bytes(bytes(data))
    with open(path, "rb") as f, pytest.raises(ValueError, match="declares more bytes"):
        read_members(f)


def test_a_member_past_the_end_of_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.npz"
    np.savez(path, big=np.arange(300_000, dtype=np.int64))
    data = path.read_bytes()
    # keep the central directory (zipfile still opens it) but drop the middle of the member
    cut = len(data) // 2
    path.write_bytes(data[:cut] + data[cut + 100_000 :])
    with open(path, "rb") as f, pytest.raises(ValueError):
        read_members(f)
