"""Every sample exactly once per epoch, whatever the number of input workers and the files' sizes.

Files of unequal size (900 + 100, and 300/257/250/193 samples) in HDF5, TFRecord and BERT CSV,
read with 0, 2 and 3 input workers (real processes), in training (two shuffled epochs) and in
eval (repeat false: the stream ends after one pass). Each sample carries its own number, so
the test counts how often each one is served. The same cut serves the streamers of csrun_wse
and run.py CSX (`for_streamers` + ShardProducer, the code a streamer task runs)."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.data import build_input
from cs2sim.runtime.data.shards import ShardPlan, part_sizes
from cs2sim.runtime.data.stream import Plan
from cs2sim.runtime.data.tfrecord import encode_example, write_records

h5py = pytest.importorskip("h5py")

T, VOCAB = 16, 1000
UNEVEN = {"two": (900, 100), "four": (300, 257, 250, 193)}


# -- the arithmetic --------------------------------------------------------------------------------
@pytest.mark.parametrize("drop_last", [False, True])
def test_parts_have_equal_batch_counts_and_cover_every_sample(drop_last):
    for total in (1, 7, 15, 16, 17, 100, 193, 1000, 1001):
        for n in (1, 2, 3, 4, 8):
            for b in (1, 4, 16, 64):
                if drop_last and total < b:
                    continue
                sizes = part_sizes(total, n, b, drop_last)
                assert sum(sizes) == total and 1 <= len(sizes) <= n
                assert max(sizes) - min(sizes) <= 1
                counts = {s // b if drop_last else -(-s // b) for s in sizes}
                assert len(counts) == 1 and counts.pop() >= 1, (total, n, b, sizes)
    # as many parts as workers whenever the samples allow it
    assert len(part_sizes(1000, 3, 16, False)) == 3 and len(part_sizes(1000, 2, 16, True)) == 2
    assert part_sizes(15, 2, 4, True) == [15]  # 8 + 7 would make 2 and 1 full batches


def test_an_epoch_of_unequal_parts_is_refused_not_served_unevenly():
    plan = lambda n: Plan(n, 16, False, 0, drop_last=False)  # noqa: E731
    with pytest.raises(ValueError, match="as many batches per epoch"):
        ShardPlan((plan(900), plan(100)))
    sp = ShardPlan((plan(500), plan(500)))
    assert sp.batches_per_epoch == 64 and sp.samples_per_epoch == 1000


# -- files -----------------------------------------------------------------------------------------
def _ids(first: int, n: int) -> np.ndarray:
    """(n, T+1) token windows; sample s has s // 100 and s % 100 as its first two tokens."""
    rng = np.random.default_rng(first)
    ids = rng.integers(0, VOCAB, (n, T + 1))
    s = np.arange(first, first + n)
    ids[:, 0], ids[:, 1] = s // 100, s % 100
    return ids


def write_h5(d: Path, sizes: tuple[int, ...]) -> None:
    first = 0
    for k, n in enumerate(sizes):
        ids = _ids(first, n)
        data = np.stack([ids[:, :-1], np.ones((n, T), np.int64), ids[:, 1:]], axis=1)
        with h5py.File(d / f"examples_{k}_0.h5", "w") as f:
            f.attrs["n_examples"] = n
            gz = {"chunks": (1, 3, T), "compression": "gzip"} if k % 2 else {}
            f.create_dataset("data", data=data.astype(np.int32), **gz)
        first += n


def write_tfrecords(d: Path, sizes: tuple[int, ...]) -> None:
    first = 0
    for k, n in enumerate(sizes):
        recs = [
            encode_example(
                {"input_ids": w[:-1], "input_mask": np.ones(T, np.int64), "labels": w[1:]}
            )
            for w in _ids(first, n)
        ]
        write_records(d / f"part-{k}.tfrecords", recs)
        first += n


WORDS = [f"w{i}" for i in range(100)]
CSV_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]


def write_csv(d: Path, sizes: tuple[int, ...]) -> None:
    first, meta = 0, []
    for k, n in enumerate(sizes):
        name = f"part{k}.csv"
        with open(d / name, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["tokens", "segment_ids", "is_random_next"])
            w.writeheader()
            for s in range(first, first + n):
                toks = ["[CLS]", WORDS[s // 100], WORDS[s % 100], "w7", "[SEP]"]
                w.writerow(
                    {"tokens": repr(toks), "segment_ids": repr([0] * 5), "is_random_next": 0}
                )
        meta.append(f"{name} {n}")
        first += n
    (d / "meta.dat").write_text("\n".join(meta) + "\n")
    (d.parent / "vocab.txt").write_text("\n".join(CSV_VOCAB) + "\n")


def section(fmt: str, d: Path, **kw) -> tuple[dict, str]:
    common = {"data_dir": str(d), "batch_size": 16, "max_sequence_length": T, **kw}
    if fmt == "csv":
        sec = {
            **common,
            "data_processor": "BertCSVDynamicMaskDataProcessor",
            "vocab_file": str(d.parent / "vocab.txt"),
            "max_predictions_per_seq": 2,
            "masked_lm_prob": 0.4,
        }
        model = {"vocab_size": len(CSV_VOCAB), "max_position_embeddings": T, "disable_nsp": True}
        return {"model": model, "train_input": sec, "eval_input": sec}, "bert"
    proc = "GptHDF5DataProcessor" if fmt == "hdf5" else "GptTfRecordsProcessor"
    sec = {**common, "data_processor": proc, "vocab_size": VOCAB}
    model = {"vocab_size": VOCAB, "max_position_embeddings": T}
    return {"model": model, "train_input": sec, "eval_input": sec}, "gpt2"


def sample_numbers(batch: dict) -> list[int]:
    ids = np.array(batch["input_ids"])  # (B, T)
    if "masked_lm_positions" in batch:  # put back the masked tokens: the originals
        for r in range(len(ids)):
            keep = batch["masked_lm_weights"][r] > 0
            ids[r, batch["masked_lm_positions"][r][keep]] = batch["masked_lm_ids"][r][keep]
        return [(int(a) - 5) * 100 + int(b) - 5 for a, b in ids[:, 1:3]]
    return [int(a) * 100 + int(b) for a, b in ids[:, :2]]


WRITERS = {"hdf5": write_h5, "tfrecord": write_tfrecords, "csv": write_csv}


def data(tmp_path: Path, fmt: str, sizes: tuple[int, ...]) -> Path:
    d = tmp_path / fmt
    d.mkdir()
    WRITERS[fmt](d, sizes)
    return d


@pytest.mark.slow  # up to 3 input worker processes per stream, 18 streams
@pytest.mark.parametrize("fmt", ["hdf5", "tfrecord", "csv"])
@pytest.mark.parametrize("sizes", list(UNEVEN), ids=list(UNEVEN))
def test_every_sample_once_per_epoch_in_train_and_eval(tmp_path, fmt, sizes):
    sizes = UNEVEN[sizes]
    total = sum(sizes)
    d = data(tmp_path, fmt, sizes)
    for workers in (0, 2, 3):
        params, model = section(fmt, d, shuffle=True, drop_last_batch=False, num_workers=workers)
        params["eval_input"] = {**params["eval_input"], "shuffle": False, "repeat": False}
        with build_input(params, "eval", model, 1) as s:
            seen = Counter(i for b in s for i in sample_numbers(b))
            assert s.num_workers <= max(workers, 0) and (workers == 0 or s.num_workers == workers)
            assert seen == Counter(range(total)), f"eval, {workers} workers"
            assert s.batches_served == s.batches_per_epoch
        with build_input(params, "train", model, 1) as s:
            epochs = [
                Counter(i for _ in range(s.batches_per_epoch) for i in sample_numbers(next(s)))
                for _ in range(2)
            ]
            for e, seen in enumerate(epochs):
                assert seen == Counter(range(total)), f"train epoch {e}, {workers} workers"


@pytest.mark.slow  # 2 and 3 input worker processes
def test_drop_last_drops_fewer_than_a_batch_per_part_and_never_repeats(tmp_path):
    d = data(tmp_path, "hdf5", UNEVEN["four"])
    for workers in (2, 3):
        params, model = section("hdf5", d, shuffle=True, drop_last_batch=True, num_workers=workers)
        with build_input(params, "train", model, 1) as s:
            for _ in range(3):
                seen = Counter(
                    i for _ in range(s.batches_per_epoch) for i in sample_numbers(next(s))
                )
                assert max(seen.values()) == 1  # nothing served twice in an epoch
                assert 1000 - len(seen) < s.num_workers * 16  # each part drops < one batch


def test_the_streamers_of_csrun_wse_and_csx_serve_every_sample_once(tmp_path):
    from cs2sim.runtime.job.remote_stream import for_streamers
    from cs2sim.runtime.job.streamers import ShardProducer

    d = data(tmp_path, "hdf5", UNEVEN["four"])
    params, model = section("hdf5", d, shuffle=True, drop_last_batch=False)
    for n in (2, 3):
        params["eval_input"] = {**params["eval_input"], "shuffle": False, "repeat": False}
        for split, epochs in (("train", 2), ("eval", 1)):
            streamers = [
                ShardProducer(build_input(for_streamers(params, split, n), split, model, 1))
                for _ in range(n)
            ]
            plan = streamers[0].plan
            assert plan.n == n  # cut by samples: 4 files or not, n parts
            for e in range(epochs):
                seen: Counter[int] = Counter()
                for r, prod in enumerate(streamers):  # streamer r makes batches r, r+n, ...
                    for g, b in prod.batches(e * plan.batches_per_epoch + r, n, lambda: False):
                        if g >= (e + 1) * plan.batches_per_epoch:
                            break
                        seen.update(sample_numbers(b))
                assert seen == Counter(range(1000)), (split, n, e)
            for prod in streamers:
                for ds in prod.data.values():
                    ds.close()
