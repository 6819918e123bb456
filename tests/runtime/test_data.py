"""Input pipelines: MNIST IDX, digits fallback, token files, stdlib corpus, BatchStream, workers."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.corpus import EOT, build_corpus, stdlib_corpus
from cs2sim.runtime.data.digits import (
    EVAL_SIZE,
    TABLE,
    bilinear_matrix,
    load_table,
    stratified_split,
    upscale_to_mnist,
)
from cs2sim.runtime.data.stream import Plan
from cs2sim.system.errors import ConfigError


@pytest.fixture(scope="module", autouse=True)
def data_cache(tmp_path_factory):
    """One CS2_HOME for the module: the digits and corpus caches are built once."""
    old = os.environ.get("CS2_HOME")
    os.environ["CS2_HOME"] = str(tmp_path_factory.mktemp("cs2home"))
    yield Path(os.environ["CS2_HOME"]) / "data"
    if old is None:
        os.environ.pop("CS2_HOME")
    else:
        os.environ["CS2_HOME"] = old


def children(of: int | None = None) -> dict[int, str]:
    """pid -> command line of the live child processes of `of` (this process), from /proc."""
    parent = os.getpid() if of is None else of
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == parent and fields[0] != "Z":
                cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                out[int(stat.parent.name)] = cmdline
        except (OSError, IndexError, ValueError):
            continue  # the process went away while we looked
    return out


def workers() -> dict[int, str]:
    """The input workers alive now: the children of this process's fork server."""
    return {
        pid: cmd
        for server, line in children().items()
        if "multiprocessing.forkserver" in line
        for pid, cmd in children(server).items()
    }


def no_workers_left() -> bool:
    """Only multiprocessing's own resource tracker and fork server (one per interpreter) may
    remain, and the fork server with no children."""
    return (
        multiprocessing.active_children() == []
        and all(
            "resource_tracker" in c or "multiprocessing.forkserver" in c
            for c in children().values()
        )
        and workers() == {}
    )


def take(stream, n):
    return [next(stream) for _ in range(n)]


def same(a: list[dict], b: list[dict]) -> bool:
    if len(a) != len(b):
        return False
    return all(
        x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in zip(a, b, strict=True)
    )


# -- MNIST IDX files ------------------------------------------------------------------------------


def write_idx(path: Path, arr: np.ndarray, magic: int, gz: bool = False, cut: int = 0) -> None:
    raw = struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()
    raw = raw[: len(raw) - cut]
    path.write_bytes(gzip.compress(raw) if gz else raw)


def mnist_dir(d: Path, n: int = 40, gz: bool = False, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    sfx = ".gz" if gz else ""
    d.mkdir(parents=True, exist_ok=True)
    write_idx(d / f"train-images-idx3-ubyte{sfx}", images, 0x803, gz)
    write_idx(d / f"train-labels-idx1-ubyte{sfx}", labels, 0x801, gz)
    write_idx(d / f"t10k-images-idx3-ubyte{sfx}", images[:10], 0x803, gz)
    write_idx(d / f"t10k-labels-idx1-ubyte{sfx}", labels[:10], 0x801, gz)
    return images, labels


def mnist_params(data_dir, **kw) -> dict:
    return {"train_input": {"data_dir": str(data_dir), "batch_size": 8, "shuffle": False, **kw}}


@pytest.mark.parametrize("gz", [False, True])
def test_idx_files_are_read(tmp_path, gz):
    images, labels = mnist_dir(tmp_path / "mnist", gz=gz)
    s = build_input(mnist_params(tmp_path / "mnist"), "train", "fc_mnist", seed=1)
    assert "MNIST IDX files" in s.source and s.samples_per_epoch == 40
    b = next(s)
    assert b["x"].dtype == np.float32 and b["x"].shape == (8, 784)
    np.testing.assert_array_equal(b["x"], images[:8].reshape(8, -1) / np.float32(255))
    assert b["y"].dtype == np.int32 and list(b["y"]) == list(labels[:8])
    ev = build_input(mnist_params(tmp_path / "mnist"), "eval", "fc_mnist", seed=1)
    assert ev.samples_per_epoch == 8  # 10 t10k images, last partial batch dropped
    half = next(
        build_input(mnist_params(tmp_path / "mnist", to_float16=True), "train", "fc_mnist", seed=1)
    )["x"]
    assert half.dtype == np.float32 and not np.array_equal(half, b["x"])
    np.testing.assert_array_equal(half, b["x"].astype(np.float16).astype(np.float32))


def test_torchvision_layout_is_found(tmp_path):
    mnist_dir(tmp_path / "MNIST" / "raw")
    assert "MNIST IDX" in build_input(mnist_params(tmp_path), "train", "fc_mnist", 1).source


@pytest.mark.parametrize("gz", [False, True])
def test_truncated_idx_names_the_file(tmp_path, gz):
    mnist_dir(tmp_path, gz=gz)
    name = "train-images-idx3-ubyte" + (".gz" if gz else "")
    images = np.zeros((40, 28, 28), np.uint8)
    if gz:  # a download cut short: the gzip stream itself ends early
        full = (tmp_path / name).read_bytes()
        (tmp_path / name).write_bytes(full[: len(full) // 2])
    else:
        write_idx(tmp_path / name, images, 0x803, cut=100)
    with pytest.raises(ConfigError) as e:
        build_input(mnist_params(tmp_path), "train", "fc_mnist", 1)
    assert name in str(e.value) and "truncated" in str(e.value)


def test_wrong_magic_and_missing_labels(tmp_path):
    mnist_dir(tmp_path)
    write_idx(tmp_path / "train-images-idx3-ubyte", np.zeros(40, np.uint8), 0x801)
    with pytest.raises(
        ConfigError,
        match=r"train-images-idx3-ubyte is not an IDX image file "
        r"\(magic 0x00000801, expected 0x00000803\)",
    ):
        build_input(mnist_params(tmp_path), "train", "fc_mnist", 1)
    (tmp_path / "train-images-idx3-ubyte").unlink()
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(
        ConfigError, match="has t10k-images-idx3-ubyte but no t10k-labels-idx1-ubyte"
    ):
        build_input(mnist_params(tmp_path), "eval", "fc_mnist", 1)


# -- digits fallback ------------------------------------------------------------------------------


def test_digits_fallback_shape_range_labels(tmp_path):
    p = {
        "train_input": {
            "data_dir": str(tmp_path / "none"),
            "stand_in_data": True,
            "batch_size": 1497,
            "drop_last_batch": False,
        }
    }
    s = build_input(p, "train", "fc_mnist", 1)
    assert "UCI handwritten digits" in s.source and s.samples_per_epoch == 1497
    b = next(s)
    x, y = b["x"], b["y"]
    assert x.shape == (1497, 784) and x.dtype == np.float32 and y.dtype == np.int32
    assert x.min() == 0.0 and x.max() == 1.0
    assert set(np.unique(y)) == set(range(10))
    frame = x.reshape(-1, 28, 28)
    assert not frame[:, :4].any() and not frame[:, -4:].any()  # MNIST-like 4 px border
    assert not frame[:, :, :4].any() and not frame[:, :, -4:].any()
    assert frame[:, 4:24, 4:24].any(axis=(1, 2)).all()  # every digit has ink in its box
    ev = build_input(p, "eval", "fc_mnist", 1)
    assert ev.samples_per_epoch == EVAL_SIZE


def test_the_shipped_digits_table_is_the_uci_test_set():
    images, digits = load_table()  # (1797, 8, 8), (1797,)
    assert images.shape == (1797, 8, 8) and digits.shape == (1797,)
    assert images.min() == 0 and images.max() == 16
    assert np.bincount(digits).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert images[0, 0].tolist() == [0, 0, 5, 13, 9, 1, 0, 0] and digits[:3].tolist() == [0, 1, 2]
    assert (TABLE.parent / "digits.LICENSE.md").read_text().count("CC BY 4.0") == 1


def test_digits_split_is_stratified_and_disjoint():
    y = np.repeat(np.arange(10), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180])
    train, ev = stratified_split(y, 300, seed=0)
    assert len(train) == 1497 and len(ev) == 300
    assert not set(train) & set(ev) and len(set(train) | set(ev)) == 1797
    per_class = np.bincount(y[ev], minlength=10)
    assert per_class.min() >= 29 and per_class.max() <= 31
    t2, e2 = stratified_split(y, 300, seed=0)
    assert np.array_equal(ev, e2)


def test_bilinear_upscale():
    w = bilinear_matrix(8, 20)
    np.testing.assert_allclose(w.sum(axis=1), 1.0)  # weights of every output pixel sum to 1
    flat = upscale_to_mnist(np.full((1, 8, 8), 16.0))
    assert flat.shape == (1, 784) and (flat.reshape(28, 28)[4:24, 4:24] == 255).all()


# -- token files ----------------------------------------------------------------------------------


def lm_params(data_dir, T=8, vocab=1000, **kw) -> dict:
    return {
        "train_input": {
            "data_dir": str(data_dir),
            "batch_size": 2,
            "shuffle": False,
            "max_sequence_length": T,
            "vocab_size": vocab,
            **kw,
        },
        "model": {"vocab_size": vocab},
    }


@pytest.mark.parametrize("suffix", [".bin", ".npy"])
def test_token_windows(tmp_path, suffix):
    tokens = np.arange(100, dtype=np.uint16)
    if suffix == ".bin":
        tokens.tofile(tmp_path / "train.bin")
    else:
        np.save(tmp_path / "train.npy", tokens.astype(np.int64))
    (tmp_path / "val.bin").write_bytes(np.arange(50, 70, dtype=np.uint16).tobytes())
    s = build_input(lm_params(tmp_path), "train", "gpt2", seed=1)
    assert s.samples_per_epoch == 12  # (100 - 1) // 8 = 12 windows, 6 batches of 2
    b = next(s)
    assert b["input_ids"].dtype == np.int32 and b["input_ids"].shape == (2, 8)
    assert b["input_ids"].tolist() == [list(range(0, 8)), list(range(8, 16))]
    assert b["labels"].tolist() == [list(range(1, 9)), list(range(9, 17))]
    ev = next(build_input(lm_params(tmp_path), "eval", "gpt2", seed=1))
    assert ev["input_ids"][0].tolist() == list(range(50, 58))


def test_token_ids_must_be_below_vocab(tmp_path):
    np.array([1, 2, 3, 999, 4, 5, 6, 7, 8, 9], dtype=np.uint16).tofile(tmp_path / "train.bin")
    with pytest.raises(ConfigError, match=r"train.bin has token id 999 but vocab_size is 500"):
        build_input(lm_params(tmp_path, T=4, vocab=500), "train", "gpt2", 1)


def test_sequence_longer_than_positions_is_refused(tmp_path):
    p = lm_params(tmp_path, T=64)
    p["model"]["max_position_embeddings"] = 32
    with pytest.raises(
        ConfigError,
        match=r"max_sequence_length \(64\) exceeds "
        r"model.max_position_embeddings \(32\)",
    ):
        build_input(p, "train", "gpt2", 1)


# -- byte-level corpus ----------------------------------------------------------------------------


def test_build_corpus_bytes_and_eot(tmp_path):
    (tmp_path / "a.py").write_bytes(b"ab")
    (tmp_path / "b.py").write_bytes(b"xyz")
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    tokens, used = build_corpus(files, 100, eot=True)
    assert tokens.tolist() == [97, 98, EOT, 120, 121, 122, EOT] and used == 2
    assert build_corpus(files, 4, eot=False)[0].tolist() == [97, 98, 120, 121]


def test_stdlib_corpus_is_deterministic_and_cached(tmp_path):
    entry, meta = stdlib_corpus(50257)
    again, meta2 = stdlib_corpus(50257)
    assert entry == again and meta == meta2 and meta["eot"] is True and meta["files"] > 50
    train = np.fromfile(entry / "train.bin", dtype=np.uint16)
    val = np.fromfile(entry / "val.bin", dtype=np.uint16)
    assert len(train) + len(val) == meta["tokens"] and train.max() <= EOT
    assert json.loads((entry / "meta.json").read_text()) == meta
    # an independent rebuild in another cache gives the same bytes
    other, _ = stdlib_corpus(50257, root=tmp_path)
    assert (other / "train.bin").read_bytes() == (entry / "train.bin").read_bytes()
    p = lm_params(tmp_path / "empty", T=32, vocab=50257, stand_in_data=True)
    s = build_input(p, "train", "gpt2", 1)
    assert "standard library" in s.source and next(s)["input_ids"].max() < 50257


def test_corpus_honours_vocab_size():
    with pytest.raises(
        ConfigError, match="vocab_size 100 is too small for the built-in byte-level corpus"
    ):
        build_input(lm_params("", vocab=100), "train", "gpt2", 1)
    s = build_input(lm_params("", T=64, vocab=256), "train", "gpt2", 1)
    assert "ends each file" not in s.source
    assert max(int(next(s)["labels"].max()) for _ in range(20)) < 256


# -- BatchStream: shuffling, resume --------------------------------------------------------------


def digits_stream(seed=1, **kw):
    cfg = {"batch_size": 64, "shuffle": True, **kw}
    return build_input({"train_input": cfg}, "train", "fc_mnist", seed)


def test_shuffle_is_deterministic_per_seed_and_epoch():
    a, b, c = digits_stream(1), digits_stream(1), digits_stream(2)
    first = take(a, 3)
    assert same(first, take(b, 3)) and not same(first, take(c, 3))
    plan = Plan(num_samples=10, batch_size=3, shuffle=True, seed=5, drop_last=False)
    e0 = np.concatenate([plan.indices(g) for g in range(4)])  # epoch 0: 3+3+3+1
    e1 = np.concatenate([plan.indices(g) for g in range(4, 8)])
    assert sorted(e0) == sorted(e1) == list(range(10)) and not np.array_equal(e0, e1)
    assert not np.array_equal(e0, np.arange(10))


def test_repeat_false_ends_after_one_epoch():
    s = build_input(
        {"eval_input": {"batch_size": 100}, "train_input": {"batch_size": 1}}, "eval", "fc_mnist", 1
    )
    assert len(list(s)) == 3 and s.state_dict()["epoch"] == 1


def test_state_dict_resume_gives_identical_batches():
    full = take(digits_stream(), 30)  # 23 batches per epoch: crosses into epoch 1
    first = digits_stream()
    take(first, 20)
    state = first.state_dict()
    assert (state["epoch"], state["index"]) == (0, 20)
    resumed = digits_stream()
    resumed.load_state_dict(state)
    assert same(take(resumed, 10), full[20:])


# -- input workers --------------------------------------------------------------------------------


@pytest.mark.slow
def test_workers_yield_the_same_sequence_and_stop_cleanly():
    inline = take(digits_stream(num_workers=0), 30)
    with digits_stream(num_workers=2, prefetch_factor=2) as s:
        got = take(s, 30)
        pids = s._pool.pids
        assert s.batches_served == 30 and s.wait_seconds > 0 and s.startup_seconds > 0
        assert set(pids) <= {p.pid for p in multiprocessing.active_children()}
        assert set(workers()) == set(pids)  # real processes, seen in /proc
    assert same(got, inline)
    assert no_workers_left()
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


@pytest.mark.slow
def test_under_a_tmpdir_too_long_for_the_fork_servers_socket_workers_are_spawned(
    tmp_path, monkeypatch
):
    long_tmp = tmp_path / ("t" * (110 - len(str(tmp_path))))  # no room for pymp-*/listener-*
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    inline = take(digits_stream(num_workers=0), 8)
    with digits_stream(num_workers=2) as s:
        got = take(s, 8)
        assert set(s._pool.pids) <= set(children())  # this process's own children: spawned
    assert same(got, inline)
    assert no_workers_left()


@pytest.mark.slow
def test_start_brings_the_workers_up_before_the_first_batch_without_moving_the_position():
    inline = take(digits_stream(num_workers=0), 6)
    with digits_stream(num_workers=2) as s:
        s.start()  # what the trainer calls before GlobalRate's clock starts
        assert s._pool is not None and s.startup_seconds > 0  # workers up, first batch in hand
        assert s.state_dict()["index"] == 0 and s.batches_served == 0
        waited = s.wait_seconds
        got = take(s, 6)
        assert s.startup_seconds > 0 and s.wait_seconds >= waited
    assert same(got, inline)
    moved = digits_stream()
    moved.start()  # fetched batch 0 ...
    moved.load_state_dict({"epoch": 0, "index": 4})  # ... which a resume must drop
    assert same(take(moved, 2), inline[4:6])
    assert no_workers_left()


@pytest.mark.slow
def test_workers_resume_and_finite_stream():
    s = digits_stream(num_workers=2)
    take(s, 5)
    s.load_state_dict({"epoch": 1, "index": 3})  # workers restart at the new position
    ref = digits_stream()
    ref.load_state_dict({"epoch": 1, "index": 3})
    assert same(take(s, 4), take(ref, 4))
    s.close()
    ev = build_input({"train_input": {"batch_size": 128, "num_workers": 2}}, "eval", "fc_mnist", 1)
    assert len(list(ev)) == 2  # 300 eval images, drop_last
    ev.close()
    assert no_workers_left()


def test_wait_time_in_process():
    s = digits_stream()
    take(s, 3)
    assert s.wait_seconds > 0 and s.batches_served == 3


def test_worker_failure_reaches_the_consumer(tmp_path):
    mnist_dir(tmp_path)
    s = build_input(mnist_params(tmp_path, num_workers=1), "train", "fc_mnist", 1)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(40, np.uint8), 0x801, cut=10)
    with pytest.raises(ConfigError, match="train-labels-idx1-ubyte is truncated"):
        next(s)
    s.close()
    assert no_workers_left()


ORPHAN = textwrap.dedent("""\
    import os, signal, sys
    from cs2sim.runtime.data import build_input
    s = build_input({"train_input": {"batch_size": 16, "num_workers": 2}}, "train", "fc_mnist", 1)
    next(s)
    print(*s._pool.pids, flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    """)


@pytest.mark.parametrize("how", ["exit", "kill"])
@pytest.mark.slow
def test_workers_never_outlive_the_consumer(how):
    """Normal exit without close() and SIGKILL of the consumer both leave no worker behind."""
    r = subprocess.run(
        [sys.executable, "-c", ORPHAN, how],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    pids = [int(p) for p in r.stdout.split()]
    assert len(pids) == 2, r.stderr
    deadline = time.monotonic() + 30  # orphans poll their parent every 0.1 s
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.05)
    alive = [
        p
        for p in pids
        if Path(f"/proc/{p}").exists() and "Z" not in Path(f"/proc/{p}/stat").read_text().split()[2]
    ]
    assert alive == []


# -- data_dir lists and AUTOTUNE ------------------------------------------------------------------


def _shard_dirs(tmp_path, count: int) -> list[str]:
    """`count` directories; every token of directory d lies in [100 d, 100 d + 80)."""
    dirs = []
    for d in range(count):
        p = tmp_path / f"shard{d}"
        p.mkdir()
        np.arange(100 * d, 100 * d + 81, dtype=np.uint16).tofile(p / "train.bin")  # 10 windows
        dirs.append(str(p))
    return dirs


def test_data_dir_list_is_read_in_order_in_process(tmp_path):
    dirs = _shard_dirs(tmp_path, 3)
    params = lm_params(dirs[0])
    params["train_input"]["data_dir"] = dirs
    s = build_input(params, "train", "gpt2", seed=1)
    assert s.samples_per_epoch == 30 and s.num_workers == 0
    firsts = [int(next(s)["input_ids"][0, 0]) // 100 for _ in range(15)]
    assert firsts == [0] * 5 + [1] * 5 + [2] * 5  # dir 0's samples, then dir 1's, then dir 2's


def test_data_dir_list_is_cut_by_samples_across_workers_in_order(tmp_path):
    dirs = _shard_dirs(tmp_path, 3)  # 3 x 10 windows
    params = lm_params(dirs[0])
    params["train_input"].update(data_dir=dirs, num_workers=2, shuffle=True)
    with build_input(params, "train", "gpt2", seed=1) as s:
        assert s.num_workers == 2
        got = [sorted({int(t) // 100 for t in next(s)["input_ids"].ravel()}) for _ in range(8)]
    # worker 0 reads samples 0-14 (entry 0 and half of entry 1), worker 1 samples 15-29 (the
    # other half of entry 1 and entry 2); batches alternate between the workers
    for g, dirs_seen in enumerate(got):
        assert set(dirs_seen) <= ({0, 1} if g % 2 == 0 else {1, 2}), (g, got)
    assert {d for seen in got[0::2] for d in seen} == {0, 1}
    assert {d for seen in got[1::2] for d in seen} == {1, 2}


def test_shard_deals_in_order():
    from cs2sim.runtime.data.shards import data_dirs, shard

    assert shard(["a", "b", "c", "d", "e"], 2) == [["a", "c", "e"], ["b", "d"]]
    assert data_dirs("x") == ["x"] and data_dirs(None) == [] and data_dirs(["x", "y"]) == ["x", "y"]


def test_missing_entry_of_a_data_dir_list_is_named(tmp_path):
    dirs = _shard_dirs(tmp_path, 2) + [str(tmp_path / "empty")]
    (tmp_path / "empty").mkdir()
    params = lm_params(dirs[0])
    params["train_input"]["data_dir"] = dirs
    with pytest.raises(
        ConfigError, match=r"train_input.data_dir\[2\] .*empty holds no token files"
    ):
        build_input(params, "train", "gpt2", 1)


def test_num_parallel_calls_zero_is_autotune_not_in_process(tmp_path):
    from cs2sim.runtime.data import autotune_workers

    np.arange(0, 81, dtype=np.uint16).tofile(tmp_path / "train.bin")
    params = lm_params(tmp_path, num_parallel_calls=0)
    with build_input(params, "train", "gpt2", 1) as s:
        assert s.num_workers == autotune_workers() >= 1
        assert next(s)["input_ids"].shape == (2, 8)
    params["train_input"]["num_parallel_calls"] = None
    with build_input(params, "train", "gpt2", 1) as s:
        assert s.num_workers == 0
