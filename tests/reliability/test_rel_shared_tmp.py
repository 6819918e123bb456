"""Nothing trusted in a shared directory: the per-user directories cs2sim keeps under /tmp
(`cs2sim-<uid>`, `cs2sim-data-<uid>`) when another OS user created the name first, a symlink
there, a directory others may write, are never used: the run moves to a private place of its
own (`~/.cache/cs2sim/run/...`) and says so in one warning line; and a data cache entry whose
content was changed (shifted labels) is verified and built again, never trained on.

Creating a directory as another user needs root (chown); those cases skip elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from rel_helpers import other_user

from cs2sim.runtime.cli.main import model_home
from cs2sim.runtime.data import cache
from cs2sim.system.paths import DirectoryMoved, private_dir, user_tmp_dir

OTHER = other_user()
needs_other = pytest.mark.skipif(
    OTHER is None,
    reason="needs root and an unprivileged user to create a directory as another user",
)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for /tmp (world-writable, sticky) as the system temp dir, CS2_HOME unset."""
    top = tmp_path / "tmp"
    top.mkdir()
    top.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(top))
    monkeypatch.delenv("CS2_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # where the private fallback goes
    (tmp_path / "home").mkdir()
    return top


def _planted(shared_tmp: Path, name: str) -> Path:
    """`name` in the shared dir, created by the other user first, with a planted file."""
    assert OTHER is not None
    d = shared_tmp / name
    d.mkdir(mode=0o755)
    (d / "planted").write_text("x")
    os.chown(d / "planted", OTHER.pw_uid, OTHER.pw_gid)
    os.chown(d, OTHER.pw_uid, OTHER.pw_gid)
    return d


def _fallback(shared_tmp: Path, prefix: str) -> Path:
    return shared_tmp.parent / "home" / ".cache" / "cs2sim" / "run" / prefix


@needs_other
def test_a_data_cache_dir_created_by_another_user_is_not_used(shared_tmp: Path) -> None:
    d = _planted(shared_tmp, f"cs2sim-data-{os.getuid()}")
    with pytest.warns(DirectoryMoved) as said:
        got = cache.data_cache_dir()
    assert got == _fallback(shared_tmp, "cs2sim-data")
    assert got.lstat().st_uid == os.getuid() and got.lstat().st_mode & 0o777 == 0o700
    text = str(said[0].message)
    assert f"{d} is not yours alone" in text and f"uses {got} instead" in text
    assert "\n" not in text and len(said) == 1
    assert sorted(p.name for p in d.iterdir()) == ["planted"]  # nothing made in it


@needs_other
def test_the_launcher_log_dir_created_by_another_user_is_not_used(shared_tmp: Path) -> None:
    d = _planted(shared_tmp, f"cs2sim-{os.getuid()}")
    with pytest.warns(DirectoryMoved):
        logs = private_dir(user_tmp_dir("cs2sim"), "slurm")
    assert logs == _fallback(shared_tmp, "cs2sim") / "slurm"
    assert sorted(p.name for p in d.iterdir()) == ["planted"]  # nothing made in it


def test_a_symlink_or_a_writable_dir_at_the_name_is_not_used(
    shared_tmp: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim"
    target.mkdir()
    (shared_tmp / f"cs2sim-data-{os.getuid()}").symlink_to(target)
    with pytest.warns(DirectoryMoved, match="is not yours alone"):
        assert cache.data_cache_dir() == _fallback(shared_tmp, "cs2sim-data")
    assert list(target.iterdir()) == []  # nothing written through it
    open_dir = shared_tmp / f"cs2sim-{os.getuid()}"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.warns(DirectoryMoved):
        assert user_tmp_dir("cs2sim") == _fallback(shared_tmp, "cs2sim")
    open_dir.chmod(0o755)  # ours, readable by others only: tightened, then used
    assert user_tmp_dir("cs2sim") == open_dir and open_dir.stat().st_mode & 0o777 == 0o700


def test_a_fresh_private_dir_is_0700_and_ours(shared_tmp: Path) -> None:
    d = cache.data_cache_dir()
    st = d.lstat()
    assert d.parent == shared_tmp and st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700


def test_a_cache_entry_with_changed_content_is_built_again(tmp_path: Path, caplog) -> None:
    built = []

    def build(tmp: Path) -> None:
        built.append(1)
        np.savez(tmp / "digits.npz", y=np.arange(10, dtype=np.int32))

    root = tmp_path / "cache"
    entry = cache.cached_entry("digits-test", build, root)
    assert cache.cached_entry("digits-test", build, root) == entry and len(built) == 1
    np.savez(entry / "digits.npz", y=(np.arange(10, dtype=np.int32) + 1) % 10)  # shifted labels
    entry = cache.cached_entry("digits-test", build, root)
    assert len(built) == 2 and np.array_equal(np.load(entry / "digits.npz")["y"], np.arange(10))
    assert "its files do not match their recorded SHA-256" in caplog.text
    # an entry of an older version (no manifest) or a symlink swapped in is not used either
    (entry / "digits.npz").unlink()
    (entry / "digits.npz").symlink_to(tmp_path / "elsewhere.npz")
    np.savez(tmp_path / "elsewhere.npz", y=np.zeros(10, dtype=np.int32))
    entry = cache.cached_entry("digits-test", build, root)
    assert len(built) == 3 and not (entry / "digits.npz").is_symlink()
    (entry / cache.COMPLETE).unlink()
    os.mkfifo(entry / cache.COMPLETE)  # read with a blocking open, this would hang the run
    entry = cache.cached_entry("digits-test", build, root)
    assert len(built) == 4 and (entry / cache.COMPLETE).is_file()


@needs_other
def test_run_py_trains_past_a_planted_cache_dir_saying_so_once(
    shared_tmp: Path, tmp_path: Path
) -> None:
    _planted(shared_tmp, f"cs2sim-data-{os.getuid()}")
    env = {k: v for k, v in os.environ.items() if k != "CS2_HOME" and not k.startswith("SLURM")}
    env.update(TMPDIR=str(shared_tmp), PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"))
    r = subprocess.run(
        [
            sys.executable,
            str(model_home("fc_mnist") / "run.py"),
            "-m",
            "train",
            "-p",
            str(model_home("fc_mnist") / "configs" / "params_small.yaml"),
            "-o",
            str(tmp_path / "md"),
            "--max_steps",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    moved = [line for line in out.splitlines() if line.startswith("warning: ")]
    assert len(moved) == 1 and f"cs2sim-data-{os.getuid()} is not yours alone" in moved[0], out
    assert "Traceback" not in out and "DirectoryMoved" not in out
    assert (tmp_path / "home" / ".cache" / "cs2sim" / "run" / "cs2sim-data").is_dir()
