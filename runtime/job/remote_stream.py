"""The chief's input stream: RemoteStream, the BatchStream interface fed by the streamers.

Order (determinism). With S streamers and a session starting at batch s0, streamer r makes
batches s0+r, s0+r+S, s0+r+2S, ... (round-robin by streamer rank, the ranks being SLURM_PROCID
order), and the chief takes batch g from streamer (g - s0) % S. Batch g is always the samples
`Plan.indices(g)` of runtime/data/stream.py, so the sequence the model sees is exactly the one a
plain `python run.py` sees, whatever S is and whatever the streamers' speeds: each streamer reads
a disjoint slice of every epoch's sample order (1/S of it), and the data position in a checkpoint
(epoch, index) resumes a launched run exactly (a new session starts at the restored batch).
A data_dir list, or an HDF5 data set, is instead sharded across the S streamers as across S
input workers (`for_streamers`): batch g is then local batch g // S of shard g % S, so streamer
r only ever makes batches of shard (s0 + r) % S and loads that part alone; the sequence is the
one a plain run with num_workers S sees, and every sample is still served once per epoch.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.data.stream import BatchStream, DataPosition
from cs2sim.runtime.job.hub import ChiefHub, Link, active_hub, streamer_timeout
from cs2sim.system.errors import RuntimeFailure

__all__ = ["RemoteStream", "for_streamers", "streamed_input"]

log = logging.getLogger("cs2sim.run")


class RemoteStream(DataPosition):
    """The chief's input stream: the same interface as BatchStream, fed by the streamers.

    It takes the local BatchStream's plan (so it knows the batch count and the data position),
    never its data. `start()` opens a session at the current position and waits until every
    streamer has delivered its first batch (the two lines a Model Zoo run prints); that wait is
    start-up (`startup_seconds`), later waits are `wait_seconds` (the wafer waiting on input).
    """

    def __init__(self, hub: ChiefHub, local: BatchStream, split: str) -> None:
        self.hub, self.split = hub, split
        self.plan = local.plan
        self.batch_size = local.batch_size
        self.samples_per_epoch = local.samples_per_epoch
        self.batches_per_epoch = local.batches_per_epoch
        self.num_workers = hub.num_streamers
        self.source = f"{local.source}, streamed by {hub.num_streamers} input streamer task(s)"
        self.wait_seconds = 0.0
        self.startup_seconds = 0.0
        self.batches_served = 0
        self.last_streamer: int | None = None  # rank that delivered the last batch
        self._g = 0
        self._s0 = 0  # the session's first batch
        self._session: int | None = None
        self._closed = False

    def __iter__(self) -> RemoteStream:
        return self

    def _exhausted(self) -> bool:
        total = self.plan.total_batches
        return total is not None and self._g >= total

    def start(self) -> None:
        """Open a session at the current position and wait for every streamer's first batch."""
        if self._closed:
            raise RuntimeError("RemoteStream is closed")
        if self._session is not None:
            return
        t0 = time.perf_counter()
        n = self.hub.num_streamers
        log.info(f"Waiting for {n} streamer(s) to prime the data pipeline")
        self.hub.wait_connected()
        self._s0 = self._g
        self._session = self.hub.open(self.split, self._g, self.plan)
        total = self.plan.total_batches
        for link in self.hub.links.values():  # primed: each has its first batch queued
            if total is not None and self._s0 + link.rank >= total:
                continue  # a short stream: this streamer has nothing to send
            self._wait_primed(link)
        log.info("Streamers are ready")
        self.startup_seconds += time.perf_counter() - t0

    def _wait_primed(self, link: Link) -> None:
        limit = time.monotonic() + streamer_timeout()
        while link.q.empty():
            if link.dead is not None:
                raise RuntimeFailure(
                    f"{link.name} died: it {link.dead} before its first "
                    "batch; see that task's log (the job stops)."
                )
            if time.monotonic() > limit:
                raise RuntimeFailure(
                    f"{link.name} sent no batch within "
                    f"{streamer_timeout():g} s of the start; see its log."
                )
            time.sleep(0.005)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._closed:
            raise RuntimeError("RemoteStream is closed")
        if self._exhausted():
            raise StopIteration
        if self._session is None:
            self.start()
        session = self._session
        assert session is not None  # start() opened it
        t0 = time.perf_counter()
        link = self.hub.links[(self._g - self._s0) % self.hub.num_streamers]
        batch = self.hub.get(link, self._g, session)
        self.wait_seconds += time.perf_counter() - t0
        self.last_streamer = link.rank
        self.batches_served += 1
        self._g += 1
        return batch

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Continue from a saved position; an open session restarts there."""
        g = self.index_of(d)
        if g != self._g and self._session is not None:
            self.hub.close_session()
            self._session = None
        self._g = g

    def close(self) -> None:
        """End this stream's session (the streamers wait for the next one)."""
        if self._closed:
            return
        self._closed = True
        if self._session is not None:
            self.hub.close_session()
            self._session = None

    def __enter__(self) -> RemoteStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        epoch, index = self.position
        return (
            f"RemoteStream({self.split}, streamers={self.hub.num_streamers}, "
            f"epoch={epoch}, index={index})"
        )


def for_streamers(params: dict[str, Any], split: str, n: int) -> dict[str, Any]:
    """Params as the chief and its n streamers build the input: a data_dir LIST is sharded
    across the n streamers in order (runtime/data/shards.py, as across n input workers), and an
    HDF5 data set is cut into n contiguous parts (runtime/data/hdf5.py), so each streamer reads
    only its own part."""
    from cs2sim.runtime.data import SECTION, STREAMERS_KEY, input_config
    from cs2sim.runtime.data.hdf5 import find_h5_files
    from cs2sim.runtime.data.shards import data_dirs

    cfg = input_config(params, split)
    dirs = data_dirs(cfg.get("data_dir"))
    if len(dirs) < 2 and not any(Path(d).exists() and find_h5_files(d) for d in dirs):
        return params
    # the number of parts, not input worker processes the user asked for (no num_workers)
    return {**params, SECTION[split]: {**cfg, STREAMERS_KEY: n}}


def streamed_input(
    params: dict[str, Any], split: str, model_name: str, seed: int
) -> BatchStream | RemoteStream:
    """The trainer's input stream: a RemoteStream when this process is a chief with streamers,
    else the in-process BatchStream (runtime/data)."""
    from cs2sim.runtime.data import build_input

    hub = active_hub()
    if hub is None or hub.num_streamers == 0:
        return build_input(params, split, model_name, seed)
    local = build_input(for_streamers(params, split, hub.num_streamers), split, model_name, seed)
    remote = RemoteStream(hub, local, split)
    local.close()  # only its plan is used; the streamers make the batches
    return remote
