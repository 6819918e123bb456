"""Input streamer tasks: each builds the run's input pipeline and streams its shard of the batch
sequence to the chief (runtime/job/hub.py) over the channel of runtime/job/channel.py.

Every task of a csrun_wse job runs the same run.py command; runtime/job/roles.py says which part it
is. The chief (task 0) trains; each STREAMER task builds the same input pipeline from the same
params and streams batches s0+r, s0+r+S, ... (runtime/job/remote_stream.py says why that order);
COORDINATOR tasks wait for the chief's end and exit with its outcome
(runtime/job/coordinator.py). Streamers and coordinators whose chief disappears (EOF without an
`end` frame and no ended record, runtime/job/ended.py) exit 1.

Test knob: CS2SIM_INPUT_EXTRA_WORK=<rounds> adds real CPU work to every sample a streamer makes
(rounds of SHA-256 over the sample's bytes; hashlib releases the GIL, so a streamer's threads
share it); it stands for a heavier input function, e.g. to see cs_input_analyzer's
recommendation grow.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.data.workers import batch_at
from cs2sim.runtime.job.channel import POLL_S, send_frame
from cs2sim.runtime.job.client import Control, StreamerConnection, rendezvous_timeout
from cs2sim.runtime.job.coordinator import coordinate
from cs2sim.runtime.job.ended import ChiefEnded, exit_status
from cs2sim.runtime.job.remote_stream import for_streamers
from cs2sim.runtime.job.roles import Role, TaskInfo
from cs2sim.system import knobs

__all__ = ["ShardProducer", "streamer_loop", "serve_task", "producing_threads", "extra_work_rounds"]

log = logging.getLogger("cs2sim.run")

MAX_THREADS = 32  # a streamer's producing threads: SLURM_CPUS_PER_TASK, at most this


def producing_threads(cpus_per_task: int | None) -> int:
    """A streamer's threads: its SLURM_CPUS_PER_TASK, but no more than this host's CPUs (more
    threads cannot run at once; on the embedded cluster every "node" is this host)."""
    return max(1, min(cpus_per_task or 1, os.cpu_count() or 1, MAX_THREADS))


def extra_work_rounds() -> int:
    """The CS2SIM_INPUT_EXTRA_WORK test knob (see the module docstring); 0 when unset."""
    return max(0, knobs.integer("CS2SIM_INPUT_EXTRA_WORK", 0))


# -- the streamer's side ---------------------------------------------------------------------------
class ShardProducer:
    """Makes batch g of a split's stream, with `threads` threads working ahead in order."""

    def __init__(self, stream: Any, threads: int = 1, extra_work: int = 0) -> None:
        self.plan = stream.plan
        self.recipe = getattr(stream, "worker_recipe", None) or stream._worker_recipe
        self.data: dict[int, Any] = {}  # loaded on first use: shard -> dataset
        self.threads = max(1, min(int(threads), MAX_THREADS))
        self.extra_work = extra_work
        self.source = stream.source
        self._lock = threading.Lock()
        stream.close()

    def _part(self, g: int) -> tuple[Any, Any]:
        """(dataset, plan) that make batch g: a data_dir list's ShardPlan names a shard."""
        k, recipe, plan = 0, self.recipe, self.plan
        if hasattr(plan, "shard_of"):  # runtime/data/shards.py: global batch g is in shard k
            k = plan.shard_of(g)
            recipe, plan = recipe[k], plan.local(k)
        with self._lock:  # threads share one loaded copy
            if k not in self.data:
                self.data[k] = recipe.load()
        return self.data[k], plan

    def batch(self, g: int) -> dict[str, np.ndarray]:
        """Batch g: the samples Plan.indices(g), plus the test knob's work per sample."""
        data, plan = self._part(g)
        batch = batch_at(data, plan, g)
        if self.extra_work:
            first = next(iter(batch.values()))  # (B, ...)
            for row in first:
                sample = row.tobytes()  # >= 2 KiB for every model: hashlib drops the GIL
                for _ in range(self.extra_work):
                    hashlib.sha256(sample).digest()
        return batch

    def batches(
        self, first: int, step: int, stop: Callable[[], bool]
    ) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """(g, batch) for g = first, first+step, ... in order, until the plan or `stop` ends."""
        total = self.plan.total_batches

        def more(g: int) -> bool:
            return (total is None or g < total) and not stop()

        if self.threads == 1:
            g = first
            while more(g):
                yield g, self.batch(g)
                g += step
            return
        with ThreadPoolExecutor(self.threads, thread_name_prefix="streamer-work") as pool:
            pending: list[tuple[int, Any]] = []
            g = first
            try:
                while True:
                    while len(pending) < self.threads and more(g):
                        pending.append((g, pool.submit(self.batch, g)))
                        g += step
                    if not pending:
                        return
                    got, fut = pending.pop(0)
                    yield got, fut.result()
            finally:
                for _, fut in pending:
                    fut.cancel()


def streamer_loop(
    conn: socket.socket,
    rank: int,
    producers: Callable[[str], ShardProducer],
    ended: Callable[[], ChiefEnded | None] = lambda: None,
) -> int:
    """Serve the chief's sessions until its end; returns this task's exit code. `ended` reads
    the chief's ended record when the connection closes without an `end` frame."""
    control = Control(conn)
    cache: dict[str, ShardProducer] = {}
    while True:
        with control.cv:
            while control.request is None and not control.done():
                control.cv.wait(POLL_S)
            if control.done():
                break
            req = control.request
        if req is None:
            continue
        session, split = req["session"], req["split"]
        try:
            if split not in cache:
                cache[split] = producers(split)
            prod = cache[split]

            def superseded(mine: dict[str, Any] = req) -> bool:  # a newer request replaced it
                return control.request is not mine

            batches = prod.batches(int(req["start"]) + rank, int(req["n"]), superseded)
            for j, (g, batch) in enumerate(batches):
                if not control.room_for(j, req):
                    break  # a new order, or the end
                send_frame(conn, {"type": "batch", "session": session, "g": g}, batch)
        except OSError:
            control.thread.join(5.0)  # the chief hung up: did it say goodbye first?
            break
        except Exception as e:  # noqa: BLE001 - the chief reports it with this task's name
            with contextlib.suppress(OSError):
                send_frame(
                    conn, {"type": "error", "session": session, "text": f"{type(e).__name__}: {e}"}
                )
            control.thread.join(rendezvous_timeout())
            return exit_status(e) or 1
        with control.cv:  # the stream ended (repeat: false) or a new order came
            while control.request is req and not control.done():
                control.cv.wait(POLL_S)
    control.thread.join(5.0)
    with contextlib.suppress(OSError):
        conn.close()
    if control.ended is not None or ended() is not None:
        return 0
    log.error(
        "the chief closed the connection without ending the job (it failed or was "
        "stopped); this streamer stops too."
    )
    return 1


def serve_task(info: TaskInfo, model_name: str, params: dict[str, Any], model_dir: Path) -> int:
    """Run a STREAMER or COORDINATOR task to the chief's end; returns its exit code."""
    if info.role is Role.COORDINATOR:
        return coordinate(info, model_dir)
    from cs2sim.runtime.data import build_input
    from cs2sim.runtime.training.runconfig import LoopConfig

    seed = LoopConfig.from_params(params).seed
    threads = producing_threads(info.cpus_per_task)
    work = extra_work_rounds()

    def producers(split: str) -> ShardProducer:
        stream = build_input(
            for_streamers(params, split, info.num_streamers), split, model_name, seed
        )
        return ShardProducer(stream, threads, work)

    log.info(
        f"Input {info.name} of job {info.job_id}: streaming batches "
        f"{info.streamer_rank}, {info.streamer_rank}+{info.num_streamers}, ... to the chief"
    )
    try:
        conn = StreamerConnection(info, model_dir, {"type": "streamer", "rank": info.streamer_rank})
    except ChiefEnded as e:
        log.info(
            f"The chief ended (exit code {e.status}) before this streamer connected; "
            "nothing to stream."
        )
        return 0
    code = streamer_loop(conn.sock, int(info.streamer_rank or 0), producers, conn.ended)
    log.info(f"Input {info.name} of job {info.job_id}: done (exit code {code})")
    return code
