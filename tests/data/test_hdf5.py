"""GPT-style HDF5 files in the Model Zoo's layout, written here with h5py, read and trained on.

Each file: attribute n_examples, dataset `data` int32 [n, 3, msl] (input ids, attention mask,
labels), gzip-compressed in chunks of one sample as the Model Zoo's create_hdf5_dataset.py
writes it. Sample s carries its own number in its first two tokens, so a test can tell which
samples a batch holds."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

h5py = pytest.importorskip("h5py")

from cs2sim.runtime.cli.main import main, model_home  # noqa: E402
from cs2sim.runtime.data import build_input  # noqa: E402
from cs2sim.system.errors import ConfigError  # noqa: E402

T, VOCAB = 64, 257


def samples(first: int, n: int, seq_len: int = T, seed: int = 0) -> np.ndarray:
    """(n, 3, seq_len) int32: sample s = first + i has s // 256, s % 256 as its first tokens."""
    rng = np.random.default_rng(seed + first)
    ids = rng.integers(0, 256, (n, seq_len + 1)).astype(np.int32)  # (n, T+1)
    s = np.arange(first, first + n)
    ids[:, 0], ids[:, 1] = s // 256, s % 256
    return np.stack([ids[:, :-1], np.ones((n, seq_len), np.int32), ids[:, 1:]], axis=1)


def write_h5(path: Path, data: np.ndarray, compressed: bool = True) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["n_examples"] = len(data)
        if compressed:
            f.create_dataset(
                "data", data=data, dtype="i4", chunks=(1, 3, data.shape[2]), compression="gzip"
            )
        else:
            f.create_dataset("data", data=data, dtype="i4")


def h5_dir(d: Path, sizes=(40, 24, 40, 24), compressed=True) -> np.ndarray:
    """Files data-0.h5 ... holding samples 0 .. sum(sizes)-1 in order; all of them."""
    d.mkdir(parents=True, exist_ok=True)
    parts, first = [], 0
    for k, n in enumerate(sizes):
        part = samples(first, n)
        write_h5(d / f"data-{k}.h5", part, compressed=compressed and k % 2 == 0)
        parts.append(part)
        first += n
    return np.concatenate(parts)


def params(data_dir, **kw) -> dict:
    section = {
        "data_processor": "GptHDF5DataProcessor",
        "data_dir": str(data_dir),
        "batch_size": 8,
        "max_sequence_length": T,
        "vocab_size": VOCAB,
        "shuffle": False,
        **kw,
    }
    return {"train_input": section, "model": {"vocab_size": VOCAB, "max_position_embeddings": T}}


def ids_of(batch: dict) -> list[int]:
    return [int(a) * 256 + int(b) for a, b in batch["input_ids"][:, :2]]


def test_batches_are_the_files_rows(tmp_path):
    data = h5_dir(tmp_path / "h5")
    s = build_input(params(tmp_path / "h5"), "train", "gpt2", 1)
    assert len(s.plan.indices(0)) == 8 and s.samples_per_epoch == len(data)
    for g in range(s.batches_per_epoch):
        b = next(s)
        rows = data[g * 8 : (g + 1) * 8]
        assert np.array_equal(b["input_ids"], rows[:, 0]) and np.array_equal(
            b["labels"], rows[:, 2]
        )
        assert b["input_ids"].dtype == np.int32 and b["input_ids"].shape == (8, T)
    assert "4 HDF5 files (.h5)" in s.source and "128 samples" in s.source


@pytest.mark.slow  # four input worker processes, twice
def test_four_workers_serve_every_sample_once_per_epoch_and_resume_continues(tmp_path):
    h5_dir(tmp_path / "h5")  # 128 samples: 4 contiguous parts of 32 = 4 batches of 8 each
    p = params(tmp_path / "h5", shuffle=True, num_workers=4, shuffle_seed=7)
    with build_input(p, "train", "gpt2", 1) as s:
        assert s.num_workers == 4 and s.batches_per_epoch == 16
        epochs = [[i for _ in range(16) for i in ids_of(next(s))] for _ in range(2)]
        for seen in epochs:
            assert sorted(seen) == list(range(128))  # each sample once per epoch
        assert epochs[0] != epochs[1]  # reshuffled
    with build_input(p, "train", "gpt2", 1) as s:  # uninterrupted: batches 0..23
        want = [ids_of(next(s)) for _ in range(24)]
    with build_input(p, "train", "gpt2", 1) as s:
        for _ in range(10):
            next(s)
        state = s.state_dict()
    with build_input(p, "train", "gpt2", 1) as s:  # resumed at batch 10
        s.load_state_dict(state)
        assert [ids_of(next(s)) for _ in range(14)] == want[10:]


def test_worker_k_reads_the_kth_contiguous_part(tmp_path):
    h5_dir(tmp_path / "h5")
    p = params(tmp_path / "h5", num_workers=4)
    with build_input(p, "train", "gpt2", 1) as s:
        first = [ids_of(next(s)) for _ in range(4)]  # batch g comes from worker g % 4
    assert [b[0] for b in first] == [0, 32, 64, 96]


def test_token_id_beyond_vocab_and_longer_sequences_name_the_file(tmp_path):
    d = tmp_path / "h5"
    h5_dir(d, sizes=(16, 16))
    bad = samples(0, 16)
    bad[3, 2, 5] = VOCAB  # a label outside the vocabulary
    write_h5(d / "data-1.h5", bad)
    # compressed and small: found when the files load, before training, as uncompressed ones
    with pytest.raises(
        ConfigError,
        match=r"HDF5 file .*data-1\.h5 has token id 257 but "
        r"vocab_size is 257",
    ):
        with build_input(params(d), "train", "gpt2", 1) as s:
            for _ in range(s.batches_per_epoch):
                next(s)
    # memory-mapped: the whole file is scanned when it loads
    write_h5(d / "data-1.h5", bad, compressed=False)
    with pytest.raises(
        ConfigError,
        match=r"HDF5 file .*data-1\.h5 has token id 257 but "
        r"vocab_size is 257",
    ):
        build_input(params(d), "train", "gpt2", 1)
    long = tmp_path / "long"
    long.mkdir()
    write_h5(long / "x.h5", samples(0, 16, seq_len=2 * T))
    with pytest.raises(
        ConfigError,
        match=r"x\.h5 holds sequences of 128 tokens, longer than "
        r"max_sequence_length 64",
    ):
        build_input(params(long), "train", "gpt2", 1)


def test_a_directory_of_another_format_is_an_error_naming_what_it_holds(tmp_path):
    d = tmp_path / "tfr"
    d.mkdir()
    for k in range(3):
        (d / f"part-{k}.tfrecords").write_bytes(b"")
    with pytest.raises(ConfigError) as e:
        build_input(params(d), "train", "gpt2", 1)
    msg = str(e.value)
    assert str(d) in msg and "3 .tfrecords files" in msg and "reads HDF5 files (.h5)" in msg
    assert "set data_processor to GptTfRecordsProcessor" in msg and "\n" not in msg
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"empty holds no HDF5 files \(.h5\): it is empty"):
        build_input(params(empty), "train", "gpt2", 1)


def test_unknown_processor_lists_the_supported_ones(tmp_path):
    p = params(tmp_path, data_processor="GptTextDataProcessor")
    with pytest.raises(
        ConfigError,
        match=r"'GptTextDataProcessor' is not a data processor .* "
        r"GptHDF5DataProcessor, .*GptTfRecordsProcessor",
    ):
        build_input(p, "train", "gpt2", 1)
    p = params(tmp_path, data_processor="BertCSVDynamicMaskDataProcessor")
    with pytest.raises(ConfigError, match="reads BERT CSV files .* for other models"):
        build_input(p, "train", "gpt2", 1)


def test_stand_in_only_when_asked_or_without_a_data_dir(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    missing = tmp_path / "input" / "owt_pretraining_gpt"
    with pytest.raises(ConfigError) as e:  # a placeholder path is an error, not stand-in data
        build_input(params(missing), "train", "gpt2", 1)
    assert str(e.value) == (
        f"train_input.data_dir {missing} does not exist; point train_input.data_dir at your "
        "data (HDF5 files (.h5) for GptHDF5DataProcessor) or add `stand_in_data: True` to "
        "train_input to train on stand-in data."
    )
    with caplog.at_level(logging.INFO, logger="cs2sim.data"):
        s = build_input(params(missing, stand_in_data=True), "train", "gpt2", 1)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "stand_in_data" in caplog.text and s.source.startswith("STAND-IN data")
    caplog.clear()
    p = params(missing)
    del p["train_input"]["data_dir"]
    with caplog.at_level(logging.INFO, logger="cs2sim.data"):
        s = build_input(p, "train", "gpt2", 1)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "STAND-IN data" in warned[0].getMessage()
    assert s.source.startswith("STAND-IN data")


# -- training on it ------------------------------------------------------------------------------
def _config(tmp_path: Path, model: str, data: Path) -> Path:
    with open(model_home(model) / "configs" / "params_tiny.yaml") as f:
        doc = yaml.safe_load(f)
    for section in ("train_input", "eval_input"):
        doc[section].pop("stand_in_data", None)
        doc[section].update(
            data_processor="GptHDF5DataProcessor", data_dir=str(data), num_workers=4, batch_size=8
        )
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "llama"])
@pytest.mark.parametrize("where", ["host", "cs2"])
def test_gpt2_and_llama_tiny_train_on_hdf5_with_4_input_workers(
    capsys, tmp_path, monkeypatch, model, where
):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    h5_dir(tmp_path / "h5")
    cfg = _config(tmp_path, model, tmp_path / "h5")
    extra = ["--cs_ip", "cs2-1"] if where == "cs2" else []
    md = tmp_path / "md"
    code = main(model, ["-m", "train", "-p", str(cfg), "-o", str(md), "--max_steps", "6", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "Training data: 4 HDF5 files (.h5)" in out + err and "STAND-IN" not in out + err
    perf = json.loads((md / "performance" / "performance.json").read_text())
    assert perf["data_source"].startswith("4 HDF5 files") and perf["data_stand_in"] is False
    assert (perf["device"] == "cpu") == (where == "host")  # the CS-2 run ran on the CS-2
    assert not [p for p in os.listdir(md) if p.endswith(".tmp")]


def _tiny(tmp_path: Path, model: str, **section) -> Path:
    with open(model_home(model) / "configs" / "params_tiny.yaml") as f:
        doc = yaml.safe_load(f)
    for name in ("train_input", "eval_input"):
        doc[name].pop("stand_in_data", None)
        doc[name].update(section)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize("what", ["h5", "tfrecords", "nothing"])
def test_the_silent_replacements_of_before_are_errors_or_a_warning(
    capsys, tmp_path, monkeypatch, what
):
    """A tiny config (no data_processor: the token-file reader) pointed at .h5 files, at
    .tfrecords files, or at a directory that is not there."""
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    d = tmp_path / "data"
    if what == "h5":
        h5_dir(d, sizes=(16,))
    elif what == "tfrecords":
        d.mkdir()
        (d / "train.tfrecords").write_bytes(b"")
    cfg = _tiny(tmp_path, "gpt2", data_dir=str(d))
    code = main(
        "gpt2", ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md"), "--max_steps", "1"]
    )
    out, err = capsys.readouterr()
    if what == "nothing":  # a placeholder path: an error naming it and the two ways out
        assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
        assert f"train_input.data_dir {d} does not exist; point train_input.data_dir" in err
        assert "or add `stand_in_data: True`" in err
        return
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    suffix = ".h5" if what == "h5" else ".tfrecords"
    assert f"{d} holds no token files (.bin/.npy): it holds 1 {suffix} file" in err
    proc = "GptHDF5DataProcessor" if what == "h5" else "GptTfRecordsProcessor"
    assert f"set data_processor to {proc}, which reads them" in err


def test_drop_last_spelling_and_a_partial_last_batch(tmp_path):
    h5_dir(tmp_path / "h5", sizes=(20,))  # 20 samples, batches of 8
    kept = build_input(params(tmp_path / "h5", drop_last=False), "train", "gpt2", 1)
    assert kept.batches_per_epoch == 3 and kept.samples_per_epoch == 20
    dropped = build_input(
        params(tmp_path / "h5", drop_last=True, drop_last_batch=False), "train", "gpt2", 1
    )
    assert dropped.batches_per_epoch == 2  # drop_last wins over drop_last_batch


@pytest.mark.parametrize("chunk_rows,shuffle", [(1, False), (5, False), (8, True)])
@pytest.mark.parametrize("keep", [True, False])
def test_compressed_files_are_read_lazily_chunk_by_chunk(
    tmp_path, monkeypatch, chunk_rows, shuffle, keep
):
    from cs2sim.runtime.data import hdf5

    if not keep:  # the part does not fit: only the chunk LRU keeps anything
        monkeypatch.setattr(hdf5, "CACHE_BYTES", 0)
    # as a data set too large to check whole at load: its values are checked batch by batch
    monkeypatch.setattr(hdf5, "CHECK_ALL_VALUES", 0)
    d = tmp_path / "h5"
    d.mkdir()
    data = samples(0, 64)
    with h5py.File(d / "a.h5", "w") as f:
        f.attrs["n_examples"] = 64
        f.create_dataset(
            "data",
            data=data,
            dtype="i4",
            chunks=(chunk_rows, 3, T),
            compression="gzip",
            shuffle=shuffle,
        )  # with a filter: h5py reads
    decoded = []
    real = hdf5.H5Samples._decode

    def counting(self, j, c):  # a chunk decoded (on whichever thread)
        decoded.append(c)
        return real(self, j, c)

    monkeypatch.setattr(hdf5.H5Samples, "_decode", counting)
    real_rows = hdf5.H5Samples._inflate_rows

    def counting_rows(self, j, rows, out):  # one-sample chunks inflated in a run
        decoded.extend(int(c) for c in rows)
        return real_rows(self, j, rows, out)

    monkeypatch.setattr(hdf5.H5Samples, "_inflate_rows", counting_rows)
    with build_input(params(d, shuffle=True, shuffle_seed=3), "train", "gpt2", 1) as s:
        first = next(s)
        # loading read nothing; the first batch decoded only the chunks of its 8 samples
        assert len(decoded) <= 8
        seen = [first] + [next(s) for _ in range(2 * s.batches_per_epoch - 1)]
    for b in seen:
        rows = b["input_ids"][:, 0] * 256 + b["input_ids"][:, 1]  # (B,) the sample numbers
        assert np.array_equal(b["input_ids"], data[rows, 0])
        assert np.array_equal(b["labels"], data[rows, 2])
    chunks = -(-64 // chunk_rows)  # 5: the last chunk is partly past the end
    if keep:  # every chunk decoded once; the second epoch came from memory
        assert sorted(decoded) == list(range(chunks))
    else:
        assert len(decoded) >= chunks


def test_each_input_streamer_loads_only_its_part_of_an_hdf5_data_set(tmp_path):
    from cs2sim.runtime.job.remote_stream import for_streamers
    from cs2sim.runtime.job.streamers import ShardProducer

    d = tmp_path / "h5"
    data = h5_dir(d, sizes=(40, 24))  # 64 samples; parts of 32 for 2 streamers
    p = params(d, shuffle=True, shuffle_seed=5)
    producers = [
        ShardProducer(build_input(for_streamers(p, "train", 2), "train", "gpt2", 1))
        for _ in range(2)
    ]
    s0 = 3  # a session resumed at batch 3: streamer r makes batches 3+r, 5+r, ...
    got = {}
    for r, prod in enumerate(producers):
        for g, b in prod.batches(s0 + r, 2, lambda: False):
            if g >= s0 + 16:  # two epochs of 8 batches
                break
            got[g] = ids_of(b)
        assert list(prod.data) == [(s0 + r) % 2]  # one part loaded
        assert len(prod.data[(s0 + r) % 2]) == 32  # and it holds half the samples
    # the chief's order: batch g from streamer (g - s0) % 2, as one run with 2 workers makes it
    with build_input(
        p | {"train_input": {**p["train_input"], "num_workers": 2}}, "train", "gpt2", 1
    ) as ref:
        ref.load_state_dict({"epoch": 0, "index": s0, "batches_per_epoch": 8, "batch_size": 8})
        for g in range(s0, s0 + 16):
            assert got[g] == ids_of(next(ref))
    epoch = [i for g in range(8, 16) for i in got[g]]  # epoch 1, whole
    assert sorted(epoch) == list(range(len(data)))
    for prod in producers:
        for ds in prod.data.values():
            ds.close()


def test_padding_is_skipped_by_the_decoder_loss(tmp_path):
    """A padded position (attention mask 0) adds nothing to the loss or its gradient, whatever
    its stored label; the loss keeps the batch's B * T scale (micro-batches agree)."""
    from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy

    got = []
    for pad_label in (7, 9):
        d = tmp_path / f"pad{pad_label}"
        d.mkdir()
        data = samples(0, 8)
        data[:, 1, 40:] = 0  # the last 24 positions are padding
        data[:, 2, 40:] = pad_label
        write_h5(d / "a.h5", data)
        with build_input(params(d), "train", "gpt2", 1) as s:
            got.append(next(s))
    assert (got[0]["labels"][:, 40:] == -1).all()
    assert np.array_equal(got[0]["labels"][:, :40], data[:, 2, :40])
    logits = np.random.default_rng(0).normal(size=(8, T, VOCAB)).astype(np.float32)
    losses, grads = [], []
    for b in got:
        ce = SoftmaxCrossEntropy()
        losses.append(ce.forward(logits, b["labels"], 1.0 / (8 * T)))
        assert ce.count == 8 * 40
        grads.append(ce.backward())
    assert losses[0] == losses[1] and np.array_equal(grads[0], grads[1])
    assert not grads[0][:, 40:].any()  # no gradient from padding
    z = logits[:, :40] - logits[:, :40].max(-1, keepdims=True)  # (8, 40, V)
    ref = np.log(np.exp(z).sum(-1)) - np.take_along_axis(z, data[:, 2, :40, None], -1)[..., 0]
    assert np.isclose(losses[0], ref.sum() / (8 * T), rtol=1e-5)


@pytest.mark.slow
def test_padded_hdf5_trains_the_same_on_the_cs2_executors_and_ignores_pad_labels(tmp_path):
    """Padding is skipped in every executor's loss alike (micro-batches, 4 CS-X): the CS-2
    losses match the host's, and the labels stored under padding change nothing."""
    from cs2sim.runtime.executors.pipelined import PipelinedExecutor
    from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision
    from cs2sim.runtime.params import load_params, validate_params
    from cs2sim.runtime.training.trainer import Trainer

    def losses(data_dir: Path, name: str, executor) -> list[float]:
        raw = load_params(model_home("gpt2") / "configs" / "params_tiny.yaml")
        raw["train_input"].pop("stand_in_data", None)
        raw["train_input"].update(
            data_processor="GptHDF5DataProcessor", data_dir=str(data_dir), batch_size=8
        )
        raw["runconfig"].update(max_steps=3, log_steps=1, checkpoint_steps=0)
        params, _ = validate_params(raw, "gpt2", source="test")
        half, _ = resolve_precision(params)
        params["runconfig"]["model_dir"] = str(tmp_path / name)
        result = Trainer("gpt2", params, tmp_path / name, half=half, executor=executor).train()
        return [result.losses[s] for s in sorted(result.losses)]

    dirs = []
    for pad_label, mask in ((0, 0), (200, 0), (0, 1)):
        d = tmp_path / f"pad{pad_label}-{mask}"
        d.mkdir()
        data = samples(0, 32)
        data[:, 1, 48:] = mask  # mask 0: a quarter of every sample is padding
        data[:, 2, 48:] = pad_label
        write_h5(d / "a.h5", data)
        dirs.append(d)
    cpu = losses(dirs[0], "cpu", None)
    assert losses(dirs[1], "cpu-other-pad", None) == cpu
    unmasked = losses(dirs[2], "cpu-unmasked", None)  # the same tokens, counted
    assert all(abs(a - b) > 1e-3 * abs(b) for a, b in zip(unmasked, cpu, strict=True))
    for name, ex in (("pipelined", PipelinedExecutor()), ("ws4", WeightStreamingExecutor(4))):
        np.testing.assert_allclose(losses(dirs[0], name, ex), cpu, rtol=1e-5, atol=0)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_the_consumer_keeps_no_file_open_that_only_the_workers_read(tmp_path, workers):
    h5_dir(tmp_path / "h5", sizes=(40, 24))

    def open_h5() -> list[str]:  # this process's descriptors on the data set's files
        fds = Path("/proc/self/fd")
        links = [os.readlink(f) for f in fds.iterdir() if f.is_symlink()] if fds.is_dir() else []
        return [link for link in links if link.endswith(".h5")]

    before = open_h5()
    s = build_input(params(tmp_path / "h5", num_workers=workers), "train", "gpt2", 1)
    try:
        # loading checked and counted every file; with workers, each opens its own part
        names = {Path(link).name for link in open_h5()}
        assert names == ({"data-0.h5", "data-1.h5"} if workers == 0 else set())
    finally:
        s.close()
    assert open_h5() == before
