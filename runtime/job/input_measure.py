"""Measure the input pipeline alone: n real streamer processes feeding a real chief hub.

`measure_delivery(...)` starts `workers` spawned processes, each running exactly the streamer
task's loop (runtime/job/streamers.py: its ShardProducer with `threads` threads, the TCP frames)
for the model's training input, and a ChiefHub + RemoteStream in this process that consumes the
batches as fast as it can and does nothing with them. The time to the first batch of every
worker (process start, imports, data loading) is start-up and not counted; the rate is samples
consumed over the following `seconds`. These are host measurements, used by cs_input_analyzer
and bench/input_bench.py.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cs2sim.runtime.data.workers import _main_hidden
from cs2sim.runtime.job.client import StreamerConnection
from cs2sim.runtime.job.hub import ChiefHub
from cs2sim.runtime.job.remote_stream import RemoteStream, for_streamers
from cs2sim.runtime.job.roles import Role, TaskInfo
from cs2sim.runtime.job.streamers import ShardProducer, producing_threads, streamer_loop

__all__ = ["Measurement", "measure_delivery"]

_CTX = mp.get_context("spawn")


@dataclass(frozen=True)
class Measurement:
    """One measured configuration (host measurement)."""

    threads: int  # producing threads per worker
    workers: int  # worker processes
    samples: int  # samples consumed in the timed window
    seconds: float  # length of the timed window
    startup_seconds: float  # to every worker's first batch (not in the rate)
    batch_size: int
    chief_cpu: float = 0.0  # CPU seconds of the consuming process per second (1.0 = one core)

    @property
    def samples_per_sec(self) -> float:
        """Total samples/s the chief received."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def per_worker(self) -> float:
        """samples/s per worker."""
        return self.samples_per_sec / self.workers

    def to_json(self) -> dict[str, Any]:
        """JSON-able, with the rates."""
        return {
            **asdict(self),
            "chief_cpu": round(self.chief_cpu, 3),
            "samples_per_sec": round(self.samples_per_sec, 3),
            "per_worker_samples_per_sec": round(self.per_worker, 3),
        }


def _worker(
    model_dir: str,
    job: str,
    rank: int,
    n: int,
    model_name: str,
    params: dict[str, Any],
    seed: int,
    threads: int,
    extra_work: int,
    models: dict[str, Any] | None = None,
) -> None:
    """A streamer task without Slurm: the same connection and loop as the real one."""
    from cs2sim.runtime import registry
    from cs2sim.runtime.data import build_input

    for cls in (models or {}).values():  # a user's own model, registered by its run.py
        registry.register(cls)

    info = TaskInfo(
        Role.STREAMER,
        job_id=job,
        procid=rank + 1,
        node=socket.gethostname(),
        streamer_rank=rank,
        num_streamers=n,
        cpus_per_task=threads,
    )
    conn = StreamerConnection(info, Path(model_dir), {"type": "streamer", "rank": rank})

    def producers(split: str) -> ShardProducer:
        stream = build_input(for_streamers(params, split, n), split, model_name, seed)
        return ShardProducer(stream, producing_threads(threads), extra_work)

    sys.exit(streamer_loop(conn.sock, rank, producers))


def measure_delivery(
    model_name: str,
    params: dict[str, Any],
    *,
    workers: int,
    threads: int,
    seconds: float = 1.0,
    extra_work: int = 0,
    seed: int | None = None,
    split: str = "train",
) -> Measurement:
    """samples/s that `workers` streamer processes of `threads` threads deliver to one chief."""
    from cs2sim.runtime.data import build_input

    if seed is None:
        seed = int((params.get("runconfig") or {}).get("seed") or 1)
    job = f"measure-{os.getpid()}-{time.monotonic_ns()}"
    with tempfile.TemporaryDirectory(prefix="cs2sim-measure-") as tmp:
        info = TaskInfo(Role.CHIEF, job_id=job, node=socket.gethostname(), num_streamers=workers)
        hub = ChiefHub(info, Path(tmp), prefetch=4)
        procs = _streamer_processes(
            tmp, job, workers, model_name, params, seed, threads, extra_work
        )
        try:
            with _main_hidden():
                for p in procs:
                    p.start()
            local = build_input(for_streamers(params, split, workers), split, model_name, seed)
            stream = RemoteStream(hub, local, split)
            local.close()
            stream.start()
            samples, elapsed, cpu = _consume(stream, seconds)
            stream.close()
            return Measurement(
                threads,
                workers,
                samples,
                elapsed,
                stream.startup_seconds,
                stream.batch_size,
                cpu / max(elapsed, 1e-9),
            )
        finally:
            hub.end(0)
            for p in procs:
                p.join(5.0)
                if p.is_alive():
                    p.kill()
                    p.join()


def _streamer_processes(
    tmp: str,
    job: str,
    workers: int,
    model_name: str,
    params: dict[str, Any],
    seed: int,
    threads: int,
    extra_work: int,
) -> list[mp.process.BaseProcess]:
    """The `workers` streamer processes (spawned, not yet started), each reading its share
    with `threads` threads and streaming to the chief hub in `tmp`."""
    from cs2sim.runtime import registry

    return [
        _CTX.Process(
            target=_worker,
            daemon=True,
            name=f"cs2sim-measure-{k}",
            args=(
                tmp,
                job,
                k,
                workers,
                model_name,
                params,
                seed,
                threads,
                extra_work,
                registry.explicit(),
            ),
        )
        for k in range(workers)
    ]


def _consume(stream: RemoteStream, seconds: float) -> tuple[int, float, float]:
    """Take batches for `seconds` (or until a non-repeating input ends): the samples taken,
    the seconds it took and the CPU seconds this process (readers + consumer) spent."""
    samples = 0
    cpu0 = time.process_time()  # every thread of this process: readers + consumer
    t0 = time.perf_counter()
    end = t0 + seconds
    now = t0
    while True:
        try:
            batch = next(stream)
        except StopIteration:  # an input that does not repeat ran out: rate so far
            break
        samples += len(next(iter(batch.values())))
        now = time.perf_counter()
        if now >= end:
            break
    cpu = time.process_time() - cpu0
    return samples, now - t0, cpu
