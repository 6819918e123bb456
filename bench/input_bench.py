"""Input streamers on this host: the channel, and samples/s delivered by 1, 2, 4, 8 workers.

    python bench/input_bench.py [--seconds S] [--quick]

1. Channel: the same batches (fc_mnist: 256 x 784 float32 = 784 KiB; gpt2 small: 32 x 1024 x 2
   int32 = 256 KiB) moved from one producer process to one consumer by
     - TCP loopback with our frames (runtime/job/channel.py; received into numpy arrays),
     - multiprocessing.Queue (pickle through a pipe, what runtime/data/workers.py uses),
     - shared memory (a ring of slots in multiprocessing.shared_memory, two semaphores; the
       consumer copies the batch out, as it must own it),
   in MB/s and batches/s.
2. Delivery: `measure_delivery` (runtime/job/input_measure.py: real streamer processes, the real
   ChiefHub and RemoteStream) for fc_mnist (configs/params.yaml) and gpt2
   (configs/params_gpt2_small.yaml), at 1, 2, 4, 8 workers: total and per-worker samples/s and the
   speed-up over 1 worker, with the plain input (cheap per sample: the chief's intake decides)
   and with CS2SIM_INPUT_EXTRA_WORK (per-sample CPU work: the workers decide), with the share
   of a core the chief's process used: the peak, and (estimate) the rate at which receiving
   alone would saturate the chief, i.e. from how many workers the chief is the bottleneck.
3. Per processor: one input worker's samples/s for each data processor (bench/processor_bench.py,
   its `run`; --processor-samples sets the data set size, --skip-processors leaves it out).
Every figure is a host measurement (wall clock on this machine; other processes share its CPUs).
Results are also written to bench/results/input.md (and the processor rows to processors.md).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cs2sim.runtime.cli.main import _load, build_parser, model_home  # noqa: E402
from cs2sim.runtime.job.channel import recv_frame, send_frame  # noqa: E402
from cs2sim.runtime.job.input_measure import measure_delivery  # noqa: E402

CTX = mp.get_context("spawn")
CONFIGS = {"fc_mnist": "params.yaml", "gpt2": "params_gpt2_small.yaml"}
SHAPES = {
    "fc_mnist": {"x": ((256, 784), np.float32), "y": ((256,), np.int32)},
    "gpt2": {"input_ids": ((32, 1024), np.int32), "labels": ((32, 1024), np.int32)},
}


def _batch(model: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: rng.integers(0, 255, shape).astype(dt) for k, (shape, dt) in SHAPES[model].items()}


# -- 1. channels ----------------------------------------------------------------------------------
def _tcp_producer(port: int, model: str, n: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    batch = _batch(model)
    for g in range(n):
        send_frame(sock, {"g": g}, batch)
    sock.close()


def _queue_producer(q: mp.Queue, model: str, n: int) -> None:
    batch = _batch(model)
    for g in range(n):
        q.put((g, batch))


def _shm_producer(
    name: str, slots: int, empty: mp.Semaphore, full: mp.Semaphore, model: str, n: int
) -> None:
    shm = shared_memory.SharedMemory(name=name)
    batch = _batch(model)
    flat = np.concatenate([a.view(np.uint8).ravel() for a in batch.values()])  # (bytes,)
    size = flat.nbytes
    ring = np.ndarray((slots, size), np.uint8, buffer=shm.buf)  # (slots, bytes)
    for g in range(n):
        empty.acquire()
        ring[g % slots] = flat
        full.release()
    del ring
    shm.close()


def channel(model: str, kind: str, n: int) -> tuple[float, float]:
    """(MB/s, batches/s) moving n batches producer -> consumer."""
    nbytes = sum(a.nbytes for a in _batch(model).values())
    if kind == "tcp":
        srv = socket.create_server(("127.0.0.1", 0))
        p = CTX.Process(target=_tcp_producer, args=(srv.getsockname()[1], model, n))
        p.start()
        conn, _ = srv.accept()
        # the chief's receive path: every frame's arrays checked against the expected layout
        layout = [(k, a.dtype, a.shape) for k, a in _batch(model).items()]
        t0 = time.perf_counter()
        for _ in range(n):
            recv_frame(conn, layout)
        dt = time.perf_counter() - t0
        conn.close()
        srv.close()
    elif kind == "queue":
        q = CTX.Queue(maxsize=8)
        p = CTX.Process(target=_queue_producer, args=(q, model, n))
        p.start()
        q.get()  # the producer's start-up is not the channel
        t0 = time.perf_counter()
        for _ in range(n - 1):
            q.get()
        dt = time.perf_counter() - t0
        n -= 1
    else:
        slots = 8
        shm = shared_memory.SharedMemory(create=True, size=slots * nbytes)
        empty, full = CTX.Semaphore(slots), CTX.Semaphore(0)
        p = CTX.Process(target=_shm_producer, args=(shm.name, slots, empty, full, model, n))
        p.start()
        ring = np.ndarray((slots, nbytes), np.uint8, buffer=shm.buf)  # (slots, bytes)
        full.acquire()
        _ = ring[0].copy()
        empty.release()
        t0 = time.perf_counter()
        for g in range(1, n):
            full.acquire()
            _ = ring[g % slots].copy()  # the consumer owns its batch
            empty.release()
        dt = time.perf_counter() - t0
        n -= 1
        del ring
        p.join()
        shm.close()
        shm.unlink()
    p.join()
    return n * nbytes / dt / 1e6, n / dt


# -- 2. delivery ----------------------------------------------------------------------------------
def params_of(model: str) -> dict:
    """The model's config as run.py loads it, on stand-in data: the published GPT-2 config's
    data_dir is a placeholder, which the runtime refuses unless stand-in data is asked for."""
    cfg = str(model_home(model) / "configs" / CONFIGS[model])
    params = _load(model, build_parser(model).parse_args(["-m", "train", "-p", cfg]))[0]
    params.setdefault("train_input", {})["stand_in_data"] = True
    return params


def delivery(
    model: str, workers: list[int], seconds: float, work: int
) -> list[tuple[int, float, float]]:
    """(workers, samples/s, chief CPU share) per worker count."""
    params = params_of(model)
    out = []
    for w in workers:
        m = measure_delivery(model, params, workers=w, threads=1, seconds=seconds, extra_work=work)
        out.append((w, m.samples_per_sec, m.chief_cpu))
    return out


def bottleneck(rows: list[tuple[int, float, float]]) -> list[str]:
    """Where the delivery peaks, and the worker count at which the chief would be saturated.

    The chief's ceiling is an estimate: samples/s divided by the share of a core the chief's
    process used for them (taken at the busiest measurement), i.e. the rate at which receiving
    alone would keep it 100% busy. Workers needed to reach it = ceiling / 1-worker rate.
    """
    w_peak, r_peak, c_peak = max(rows, key=lambda r: r[1])
    w_busy, r_busy, c_busy = max(rows, key=lambda r: r[2])
    one = rows[0][1]
    lines = [
        f"Peak: {r_peak:,.0f} samples/s at {w_peak} worker(s) ({r_peak / one:.2f}x 1 "
        f"worker); the chief's process was {c_peak:.0%} busy there, so at this load it is "
        f"{'the chief' if c_peak > 0.8 else 'this host (CPUs shared), not the chief,'} "
        "that stops the growth."
    ]
    if c_busy > 0:
        ceiling = r_busy / c_busy
        lines.append(
            f"Chief ceiling (estimate: {r_busy:,.0f} samples/s / {c_busy:.0%} of a "
            f"core): about {ceiling:,.0f} samples/s, i.e. the chief becomes the "
            f"bottleneck from about {max(1.0, ceiling / one):.0f} worker(s) of "
            f"{one:,.0f} samples/s each, given free cores for them."
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    ap.add_argument("--quick", action="store_true", help="shorter runs, workers 1, 2, 4")
    ap.add_argument(
        "--work",
        type=int,
        default=20,
        help="CS2SIM_INPUT_EXTRA_WORK rounds for the heavy-input series",
    )
    ap.add_argument(
        "--processor-samples",
        type=int,
        default=2048,
        help="samples per data set in the per-processor rows",
    )
    ap.add_argument(
        "--skip-processors",
        action="store_true",
        help="leave out the per-processor rows (bench/processor_bench.py)",
    )
    a = ap.parse_args()
    seconds = 0.5 if a.quick else a.seconds
    workers = [1, 2, 4] if a.quick else [1, 2, 4, 8]
    load = os.getloadavg()[0]
    lines = [
        f"# Input streamers (host measurements, {os.cpu_count()} CPUs, load average "
        f"{load:.1f} at the start, {time.strftime('%Y-%m-%d %H:%M')})",
        "",
        "A load average above the CPU count means other processes share the CPUs: then "
        "the host, not the chief or the workers, limits the figures below.",
        "",
        "## Channel: one producer process -> one consumer",
        "",
        "| batch | channel | MB/s | batches/s |",
        "|---|---|---:|---:|",
    ]
    for model in SHAPES:
        for kind in ("tcp", "queue", "shm"):
            mbs, bps = channel(model, kind, 100 if a.quick else 400)
            lines.append(f"| {model} | {kind} | {mbs:,.0f} | {bps:,.0f} |")
            print(lines[-1], flush=True)
    for model in CONFIGS:
        for label, work in (("plain input", 0), (f"extra work {a.work}", a.work)):
            rows = delivery(model, workers, seconds, work)
            base = rows[0][1]
            lines += [
                "",
                f"## {model} ({CONFIGS[model]}), {label}",
                "",
                "| workers | samples/s | per worker | speed-up | chief CPU |",
                "|---:|---:|---:|---:|---:|",
            ]
            for w, r, c in rows:
                lines.append(f"| {w} | {r:,.0f} | {r / w:,.0f} | {r / base:.2f}x | {c:.0%} |")
            lines.append("")
            lines += bottleneck(rows)
            print("\n".join(lines[-len(rows) - 7 :]), flush=True)
    if not a.skip_processors:
        import processor_bench  # bench/ is this script's directory, so on sys.path

        rows = processor_bench.run(a.processor_samples, seconds)
        lines += ["", "## Per processor, one input worker (bench/processor_bench.py)", ""]
        lines += rows[2:]  # its own heading is the section's
    out = ROOT / "bench" / "results" / "input.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
