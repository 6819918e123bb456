"""The data processors' input throughput per worker, and the preprocessing command's tokens/s.

    python bench/processor_bench.py [--samples N] [--seconds S] [--rounds R] [--only gzip]

For each processor of runtime/data/processors.py, a data set written here in its on-disk
layout is read the way one input worker reads it: `build_input` with num_workers 0 (the
worker's own loop, in this process), shuffled, batch after batch for about S seconds, after
the load (opening / parsing the files: timed apart as "load s"). Figures are samples/s of one
worker (host measurements, wall clock, on a machine shared with other processes), with the
GPT rows at max_sequence_length 1024, batch 32 (GPT-2 small's input), BERT at 128, batch 32:
  tokens    nanoGPT-style uint16 .bin (TokenFileDataProcessor), memory-mapped;
  hdf5-gz   GptHDF5DataProcessor on the Model Zoo's layout: gzip, chunks of one sample;
  hdf5      GptHDF5DataProcessor on an uncompressed, contiguous `data` (memory-mapped);
  tfrecords GptTfRecordsProcessor; bert-csv BertCSVDynamicMaskDataProcessor (masking per
  sample); sst2 SST2DataProcessor; mnist MNIST IDX.
Then, in interleaved rounds (the order rotating, so the machine's load falls on each alike;
median (min-max) of the per-round ratios, by wall clock and by CPU time per sample): epoch 0
of the gzip reader against the inflate floor (the same chunks, already in memory, inflated
alone with the same inflater into preallocated rows on the same threads), against plain h5py as
the Model Zoo's HDF5IterableDataset reads, and against itself on one thread (with an A/A pair:
the one-thread run against itself, the machine's noise); and after the first epoch, every
processor against the token files.
Then `cs2sim-preprocess gpt2-hdf5` over the Python standard library's sources (real text):
tokens/s end to end (reading, GPT-2 BPE, writing gzip HDF5). Results also go to
bench/results/processors.md. `--only gzip`: only the interleaved epoch-0 rounds of the gzip
reader (against the floors, h5py and itself on one thread), printed, the results file untouched.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import h5py  # noqa: E402

from cs2sim.runtime.data import build_input  # noqa: E402
from cs2sim.runtime.data.inflate import BACKEND  # noqa: E402
from cs2sim.runtime.data.preprocess import GptHdf5Args, write_gpt_hdf5  # noqa: E402
from cs2sim.runtime.data.tfrecord import encode_example, write_records  # noqa: E402

T, B, VOCAB = 1024, 32, 50257
FEATURES = ("input_ids", "attention_mask", "labels")
BERT_T = 128


def _gpt(d: Path, n: int) -> tuple[dict, dict[str, tuple[str, Path]]]:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, n * T + 1).astype(np.uint16)  # (n*T+1,)
    (d / "tok").mkdir()
    tokens.tofile(d / "tok" / "train.bin")
    win = np.lib.stride_tricks.sliding_window_view(tokens, T + 1)[::T][:n].astype(np.int32)
    data = np.stack([win[:, :-1], np.ones((n, T), np.int32), win[:, 1:]], axis=1)  # (n, 3, T)
    for name, kw in (("h5gz", {"chunks": (1, 3, T), "compression": "gzip"}), ("h5", {})):
        (d / name).mkdir()
        half = n // 2
        for k, part in enumerate((data[:half], data[half:])):
            with h5py.File(d / name / f"examples_{k}.h5", "w") as f:
                f.attrs["n_examples"] = len(part)
                f.create_dataset("data", data=part, dtype="i4", **kw)
    (d / "tfr").mkdir()
    write_records(
        d / "tfr" / "a.tfrecords",
        [encode_example({"input_ids": r[0], "input_mask": r[1], "labels": r[2]}) for r in data],
    )
    model = {"vocab_size": VOCAB, "max_position_embeddings": T}
    return model, {
        "tokens": ("TokenFileDataProcessor", d / "tok"),
        "hdf5-gz": ("GptHDF5DataProcessor", d / "h5gz"),
        "hdf5": ("GptHDF5DataProcessor", d / "h5"),
        "tfrecords": ("GptTfRecordsProcessor", d / "tfr"),
    }


def _bert(d: Path, n: int) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(1)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(30000)]
    vocab = d / "vocab.txt"
    vocab.write_text("\n".join(words) + "\n")
    (d / "csv").mkdir()
    with open(d / "csv" / "part.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens", "segment_ids", "is_random_next"])
        for i in range(n):
            ids = rng.integers(5, len(words), BERT_T - 3)
            a = int(rng.integers(1, BERT_T - 4))
            toks = [
                "[CLS]",
                *[words[j] for j in ids[:a]],
                "[SEP]",
                *[words[j] for j in ids[a:]],
                "[SEP]",
            ]
            w.writerow([repr(toks), repr([0] * (a + 2) + [1] * (BERT_T - a - 2)), i % 2])
    (d / "sst").mkdir()
    with open(d / "sst" / "train.tsv", "w") as f:
        f.write("sentence\tlabel\n")
        for i in range(n):
            f.write(" ".join(words[j] for j in rng.integers(5, len(words), 40)) + f"\t{i % 2}\n")
    (d / "mnist").mkdir()
    imgs = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    lbls = rng.integers(0, 10, n, dtype=np.uint8)
    (d / "mnist" / "train-images-idx3-ubyte").write_bytes(
        (0x803).to_bytes(4, "big")
        + b"".join(x.to_bytes(4, "big") for x in (n, 28, 28))
        + imgs.tobytes()
    )
    (d / "mnist" / "train-labels-idx1-ubyte").write_bytes(
        (0x801).to_bytes(4, "big") + n.to_bytes(4, "big") + lbls.tobytes()
    )
    return vocab, d / "csv", d / "sst"


def _measure(params: dict, model: str, seconds: float) -> tuple[float, float, float, float]:
    """(load seconds, samples/s of one worker over its first epoch, load included, and
    after it, and the CPU seconds (every thread) per sample of that first epoch)."""
    c0, t0 = time.process_time(), time.perf_counter()
    s = build_input(params, "train", model, 1)
    key = params["_keys"][0]
    next(s)
    load = time.perf_counter() - t0  # opening/parsing the files and the first batch
    n, t0 = 0, time.perf_counter()
    for _ in range(s.batches_per_epoch - 1):  # the rest of epoch 0
        n += len(next(s)[key])
    first = (n + s.batch_size) / (time.perf_counter() - t0 + load)  # the load included
    cpu = (time.process_time() - c0) / (n + s.batch_size)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += len(next(s)[key])
    later = n / max(time.perf_counter() - t0, 1e-9)
    s.close()
    return load, first, later, cpu


def _inflate_floor(h5dir: Path) -> tuple[float, float]:
    """samples/s of inflating every stored chunk of the gzip files, and nothing else: the
    chunks already in memory (read before the clock starts), each inflated with the fastest
    inflate this host has (runtime/data/inflate.py's BACKEND) straight into its row of one
    preallocated array, 64 to a task on the runtime's worker threads: what any reader of this
    layout pays at least. -> (samples/s, CPU seconds per sample)"""
    from cs2sim.runtime import threads
    from cs2sim.runtime.data.inflate import inflate_rows

    raws = []
    for p in sorted(h5dir.glob("*.h5")):
        with h5py.File(p, "r") as f:
            ds = f["data"]
            raws += [ds.id.read_direct_chunk((i, 0, 0))[1] for i in range(ds.shape[0])]
    store = np.frombuffer(b"".join(raws), np.uint8)  # every chunk, back to back
    sizes = [len(r) for r in raws]
    src = (store.ctypes.data + np.concatenate([[0], np.cumsum(sizes)[:-1]])).tolist()
    out = np.empty((len(raws), 3, T), np.int32)  # (N, 3, T)
    nb, step = out[0].nbytes, 64

    def some(k: int) -> None:
        rows = range(k * step, min(len(raws), (k + 1) * step))
        done, why = inflate_rows(src, sizes, rows, 0, out.ctypes.data + k * step * nb, nb)
        assert done == len(rows), why

    c0, t0 = time.process_time(), time.perf_counter()
    threads.run_chunks(some, -(-len(raws) // step), idle_only=True)  # as the reader
    return len(raws) / (time.perf_counter() - t0), (time.process_time() - c0) / len(raws)


def _isal_floor(h5dir: Path) -> tuple[float, float]:
    """`_inflate_floor` with the inflater libdeflate's absence leaves (ISA-L, else zlib)."""
    from cs2sim.runtime.data import inflate

    lib, inflate._LIB = inflate._LIB, None
    try:
        return _inflate_floor(h5dir)
    finally:
        inflate._LIB = lib


def _model_zoo_reader(h5dir: Path) -> tuple[float, float]:
    """samples/s of plain h5py as the Model Zoo's HDF5IterableDataset reads these files: each
    file in turn, `h5_file["data"][idx : idx + batch_size]`, then one int32 array per feature
    and sample (its `__iter__`); the load (opening the files) included. -> (samples/s, CPU
    seconds per sample)"""
    c0, t0, n = time.process_time(), time.perf_counter(), 0
    for p in sorted(h5dir.glob("*.h5")):
        with h5py.File(p, "r") as f:
            ds, total = f["data"], int(f.attrs["n_examples"])
            for idx in range(0, total, B):
                load = ds[idx : idx + B]
                for i in range(len(load)):
                    _ = {k: np.array(load[i][c], np.int32) for c, k in enumerate(FEATURES)}
                    n += 1
    return n / (time.perf_counter() - t0), (time.process_time() - c0) / n


def _with_threads(n: int, fn: Any, *args: Any) -> Any:
    """fn(*args) with the runtime's worker threads set to n (then back to the default)."""
    from cs2sim.runtime import threads

    threads.set_workers(n)
    try:
        return fn(*args)
    finally:
        threads.set_workers(threads.available_cores())


GZIP_JOBS = ("hdf5-gz", "hdf5-gz-1", "hdf5-gz-1b", "inflate", "inflate-isal", "h5py")


def _first_epochs(
    cases: dict, h5gz: Path, rounds: int, only: tuple[str, ...] | None = None
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Epoch 0 (load included) of the token files and both HDF5 layouts (the gzip one on all
    threads, and twice on one: the second an A/A pair that shows the noise of the machine),
    the inflate floor and the Model Zoo's h5py reader, `rounds` times interleaved (the order
    rotating), so the machine's load falls on each alike: (samples/s per round, CPU seconds
    per sample per round)."""
    cores = os.cpu_count() or 1

    def first(name: str, threads: int) -> tuple[float, float]:
        _, rate, _, cpu = _with_threads(threads, _measure, *cases[name], 0.0)
        return rate, cpu

    jobs: dict[str, Any] = {
        "tokens": lambda: first("tokens", cores),
        "hdf5-gz": lambda: first("hdf5-gz", cores),
        "hdf5-gz-1": lambda: first("hdf5-gz", 1),
        "hdf5-gz-1b": lambda: first("hdf5-gz", 1),
        "hdf5": lambda: first("hdf5", cores),
        "inflate": lambda: _with_threads(cores, _inflate_floor, h5gz),
        "inflate-isal": lambda: _with_threads(cores, _isal_floor, h5gz),
        "h5py": lambda: _model_zoo_reader(h5gz),
    }
    names = [n for n in jobs if only is None or n in only]
    rates: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            rate, cpu = jobs[n]()
            rates[n].append(rate)
            cpus[n].append(cpu)
    return rates, cpus


def _later_rounds(
    cases: dict, seconds: float, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """After the first epoch: every processor's stream opened once and read through its epoch
    0, then `seconds` of batches from each, `rounds` times interleaved (the order rotating):
    (samples/s per round, CPU seconds per sample per round)."""
    streams = {}
    for name, (params, model) in cases.items():
        s = build_input(params, "train", model, 1)
        for _ in range(s.batches_per_epoch):
            next(s)
        streams[name] = (s, params["_keys"][0])
    names = list(streams)
    rates: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            s, key = streams[name]
            n, c0, t0 = 0, time.process_time(), time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                n += len(next(s)[key])
            rates[name].append(n / (time.perf_counter() - t0))
            cpus[name].append((time.process_time() - c0) / n)
    for s, _ in streams.values():
        s.close()
    return rates, cpus


def _spread(values: list[float]) -> str:
    """median (min-max)."""
    v = sorted(values)
    return f"{v[len(v) // 2]:,.2f}x ({v[0]:,.2f}-{v[-1]:,.2f})"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=2048)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved epoch-0 comparisons")
    ap.add_argument(
        "--only",
        choices=["gzip"],
        help="gzip: only the gzip reader's interleaved epoch-0 rounds (printed, no results file)",
    )
    args = ap.parse_args()
    if args.only == "gzip":
        print(gzip_rounds(args.samples, args.rounds))
        return 0
    run(args.samples, args.seconds, args.rounds)
    return 0


def _gzip_line(firsts: dict[str, list[float]], cpus: dict[str, list[float]], rounds: int) -> str:
    """The sentence of the gzip reader's interleaved epoch-0 rounds (`_first_epochs`)."""

    def ratios(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(firsts[a], firsts[b], strict=True)]

    def cpu_ratios(a: str, b: str) -> list[float]:  # b's CPU per sample / a's
        return [y / x for x, y in zip(cpus[a], cpus[b], strict=True)]

    inv = [1 / x for x in ratios("hdf5-gz", "inflate")]
    return (
        f"Epoch 0 with the load, {rounds} rounds interleaved (median (min-max) of the "
        f"per-round ratios of samples/s): the gzip HDF5 reader runs at "
        f"{_spread(ratios('hdf5-gz', 'inflate'))} of the rate of inflating the same chunks "
        f"alone with {BACKEND} on the same {os.cpu_count()} threads, i.e. "
        f"{_spread(inv)} its time (target <= 1.5x); "
        f"{_spread(ratios('hdf5-gz', 'inflate-isal'))} of that floor with ISA-L; at "
        f"{_spread(ratios('hdf5-gz', 'h5py'))} of plain h5py as the Model Zoo's "
        f"HDF5IterableDataset reads (target >= 2x), and at "
        f"{_spread(ratios('hdf5-gz', 'hdf5-gz-1'))} of its own rate on one thread (target "
        f">= 1x; the same one-thread run against itself, the machine's noise: "
        f"{_spread(ratios('hdf5-gz-1b', 'hdf5-gz-1'))}). The same by CPU time per sample "
        f"(every thread; less moved by the load than wall time): the reader at "
        f"{_spread(cpu_ratios('hdf5-gz', 'inflate'))} of the floor's rate "
        f"({_spread(cpu_ratios('hdf5-gz', 'inflate-isal'))} of ISA-L's), "
        f"{_spread(cpu_ratios('hdf5-gz', 'h5py'))} of h5py's, "
        f"{_spread(cpu_ratios('hdf5-gz', 'hdf5-gz-1'))} of its own on one thread. "
        f"Load average {os.getloadavg()[0]:.1f} at the end of these rounds."
    )


def _gpt_params(proc: str, path: Path, model: dict[str, Any]) -> dict[str, Any]:
    """A GPT data set's params as the bench reads it: shuffled batches of B rows of T tokens."""
    return {
        "train_input": {
            "data_processor": proc,
            "data_dir": str(path),
            "batch_size": B,
            "max_sequence_length": T,
            "vocab_size": VOCAB,
            "shuffle": True,
        },
        "model": model,
        "_keys": ["input_ids"],
    }


def gzip_rounds(samples: int, rounds: int) -> str:
    """Only the gzip reader's interleaved epoch-0 rounds (`--only gzip`): their sentence."""
    os.environ.setdefault("CS2_HOME", tempfile.mkdtemp(prefix="cs2bench-"))
    with tempfile.TemporaryDirectory() as tmp:
        gpt_model, gpt = _gpt(Path(tmp), samples)
        proc, path = gpt["hdf5-gz"]
        cases = {"hdf5-gz": (_gpt_params(proc, path, gpt_model), "gpt2")}
        firsts, cpus = _first_epochs(cases, path, rounds, GZIP_JOBS)
        return _gzip_line(firsts, cpus, rounds)


def run(samples: int, seconds: float, rounds: int = 5) -> list[str]:
    """Measure every processor and the preprocessing; write processors.md; its lines."""
    args = argparse.Namespace(samples=samples, seconds=seconds, rounds=rounds)
    os.environ.setdefault("CS2_HOME", tempfile.mkdtemp(prefix="cs2bench-"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        gpt_model, gpt = _gpt(d, args.samples)
        vocab, csv_dir, sst_dir = _bert(d, args.samples)
        cases = {
            name: (_gpt_params(proc, path, gpt_model), "gpt2") for name, (proc, path) in gpt.items()
        }
        bert_model = {"vocab_size": 30005, "max_position_embeddings": BERT_T, "num_labels": 2}
        cases["bert-csv"] = (
            {
                "train_input": {
                    "data_processor": "BertCSVDynamicMaskDataProcessor",
                    "data_dir": str(csv_dir),
                    "vocab_file": str(vocab),
                    "batch_size": B,
                    "max_sequence_length": BERT_T,
                    "max_predictions_per_seq": 20,
                },
                "model": bert_model,
                "_keys": ["input_ids"],
            },
            "bert",
        )
        cases["sst2"] = (
            {
                "train_input": {
                    "data_processor": "SST2DataProcessor",
                    "data_dir": str(sst_dir),
                    "vocab_file": str(vocab),
                    "batch_size": B,
                    "max_sequence_length": BERT_T,
                },
                "model": bert_model,
                "_keys": ["input_ids"],
            },
            "bert_classifier",
        )
        cases["mnist"] = (
            {"train_input": {"data_dir": str(d / "mnist"), "batch_size": 256}, "_keys": ["x"]},
            "fc_mnist",
        )
        for name, (params, model) in cases.items():
            load, first, rate, _ = _measure(params, model, args.seconds)
            rows.append(
                (
                    name,
                    params["train_input"].get("data_processor", "MNISTDataProcessor"),
                    load,
                    first,
                    rate,
                )
            )
            print(
                f"{name:10s} load {load:6.2f} s  epoch 0 {first:12,.0f}  later {rate:12,.0f} "
                f"samples/s per worker",
                flush=True,
            )
        by = {r[0]: r for r in rows}
        ratio = by["tokens"][4] / by["hdf5-gz"][4]
        ratio0 = by["tokens"][3] / by["hdf5-gz"][3]
        ratio_raw = by["tokens"][4] / by["hdf5"][4]
        print(
            f"token files / HDF5 (Model Zoo layout, gzip): epoch 0 {ratio0:.2f}x, later "
            f"{ratio:.2f}x; / HDF5 uncompressed: {ratio_raw:.2f}x"
        )
        firsts, cpus = _first_epochs(cases, gpt["hdf5-gz"][1], args.rounds)

        def ratios(a: str, b: str) -> list[float]:
            return [x / y for x, y in zip(firsts[a], firsts[b], strict=True)]

        interleaved = (
            _gzip_line(firsts, cpus, args.rounds)
            + f" Token files / HDF5 epoch 0 (the same rounds): gzip "
            f"{_spread(ratios('tokens', 'hdf5-gz'))}, uncompressed "
            f"{_spread(ratios('tokens', 'hdf5'))}."
        )
        rates, cpus_later = _later_rounds(cases, args.seconds, args.rounds)

        def slower(name: str, by_cpu: bool) -> str:  # tokens' rate / name's, per round
            if by_cpu:
                v = [b / a for a, b in zip(cpus_later["tokens"], cpus_later[name], strict=True)]
            else:
                v = [a / b for a, b in zip(rates["tokens"], rates[name], strict=True)]
            return _spread(v)

        others = [n for n in cases if n != "tokens"]
        later = (
            f"After the first epoch, {args.rounds} rounds of {args.seconds:g} s interleaved, "
            f"token files' samples/s / each processor's (target <= 1.5x): "
            + "; ".join(f"{n} {slower(n, False)}" for n in others)
            + "; by CPU time per sample: "
            + "; ".join(f"{n} {slower(n, True)}" for n in others)
            + "."
        )
        print(later)
        print(interleaved)
        # preprocessing: the standard library's sources as raw text
        raw = d / "raw"
        raw.mkdir()
        stdlib, size = Path(sysconfig.get_paths()["stdlib"]), 0
        for p in sorted(stdlib.glob("*.py")):
            if size > 4 * 2**20:
                break
            text = p.read_text(encoding="utf-8", errors="replace")
            (raw / f"{p.stem}.txt").write_text(text)
            size += len(text)
        done = write_gpt_hdf5(
            GptHdf5Args(str(raw), str(d / "pre"), max_seq_length=1024, files_per_record=1000)
        )
        print(
            f"cs2sim-preprocess gpt2-hdf5: {done.tokens:,} tokens from {size / 2**20:.1f} MiB "
            f"in {done.seconds:.2f} s = {done.tokens_per_sec:,.0f} tokens/s"
        )
    load_avg = os.getloadavg()[0]
    out = ROOT / "bench" / "results" / "processors.md"
    lines = [
        f"# Data processors, one input worker (host measurements, {os.cpu_count()} CPUs, "
        f"load average {load_avg:.1f}, {time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"`python bench/processor_bench.py --samples {args.samples} --seconds "
        f"{args.seconds} --rounds {args.rounds}`; GPT rows: max_sequence_length {T}, "
        f"batch {B}; BERT rows: "
        f"{BERT_T}, batch {B}; shuffled.",
        "",
        "| data | processor | load s | epoch 0 samples/s (load included) | later samples/s |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {n} | {p} | {lo:.2f} | {f:,.0f} | {r:,.0f} |" for n, p, lo, f, r in rows]
    lines += [
        "",
        f"Token files / HDF5 in the Model Zoo's layout (gzip, one-sample chunks): "
        f"{ratio0:.2f}x over epoch 0 with the load (read lazily, chunk by chunk, as "
        f"batches ask; decoded samples kept), {ratio:.2f}x after it; token files / "
        f"uncompressed HDF5: "
        f"{ratio_raw:.2f}x.",
        "",
        interleaved,
        "",
        later,
        "",
        f"Preprocessing (`cs2sim-preprocess gpt2-hdf5`, max_seq_length 1024, over "
        f"{size / 2**20:.1f} MiB of the standard library's sources): "
        f"{done.tokens_per_sec:,.0f} tokens/s ({done.tokens:,} tokens in "
        f"{done.seconds:.2f} s).",
    ]
    out.write_text("\n".join(lines) + "\n")
    return lines


if __name__ == "__main__":
    sys.exit(main())
