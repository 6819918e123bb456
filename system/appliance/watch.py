"""A watch of one wsjob, the cluster server's side: the frames `csctl`'s and `run.py CSX`'s watch
reads until the job ends (system/appliance/client.py reads them).

Frames: `phase` when the job's phase, queue note or systems change; `lines`, the job's launch
log as it grows (whole lines only); `heartbeat` every `server.heartbeat_s` whatever happens
(CS2_HEARTBEAT_SECONDS; the reply to the watch announces the period so the client knows when
heartbeats are missed); `end` with the job as it ended. A watch whose client closed its end is
noticed within QUEUED_POLL_S (WATCH_POLL_S while the job runs), and an attached client's job is
then cancelled.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from cs2sim.system import wire
from cs2sim.system.appliance.asuser import open_job_log
from cs2sim.system.appliance.jobs import ENDED, WsJob, job_log_dir

__all__ = ["stream", "WATCH_POLL_S", "QUEUED_POLL_S"]

WATCH_POLL_S = 0.1  # a running job's log is followed this closely
QUEUED_POLL_S = 1.0  # a queued job's watch wakes at least this often (a client gone: cancelled)


def stream(server: Any, conn: socket.socket, job: WsJob, args: dict[str, Any]) -> None:
    """The watch's frames: a phase event when the phase, the queue note or the systems
    change, the log's new lines, a heartbeat every `heartbeat_s` whatever happens (a queued
    or quiet job included: the client tells a live server from a frozen one by them), and
    the end. While the job is queued nothing is read but the book's generation, so thirty
    waiting clients cost the server next to nothing."""
    log_path = job_log_dir(server.home, job.id) / "launch.log"
    offset = max(0, int(args.get("offset", 0)))
    last: tuple[str, str, str] | None = None
    period = server.heartbeat_s
    wire.send_obj(conn, {"ok": True, "heartbeat": period, "pid": os.getpid()})
    next_beat = time.monotonic() + period
    seen = -1
    while True:
        with server.changed:
            gen = server.generation
        if gen != seen or job.phase != "QUEUED":
            job, seen = server._job(job.id), gen
        note = server.dispatcher.queue_notes.get(job.id, "")
        state = (job.phase, note, ",".join(job.systems))
        if state != last:
            wire.send_obj(conn, {"event": "phase", "job": job.public(server.home), "note": note})
            last = state
        offset = _send_lines(conn, log_path, offset)
        if job.phase in ENDED:
            offset = _send_lines(conn, log_path, offset)
            wire.send_obj(conn, {"event": "end", "job": job.public(server.home)})
            return
        now = time.monotonic()
        if now >= next_beat:
            wire.send_obj(conn, {"event": "heartbeat", "phase": job.phase, "note": note})
            next_beat = now + period
        if _peer_gone(conn):
            if args.get("attach"):
                server._client_gone(job)
            return
        # a queued job has no log to follow: wake for a change, the next heartbeat, or (at
        # most a second later) to notice a client that went away
        poll = QUEUED_POLL_S if job.phase == "QUEUED" else WATCH_POLL_S
        with server.changed:
            if server.generation == gen:
                server.changed.wait(max(0.0, min(poll, next_beat - time.monotonic())))


def _send_lines(conn: socket.socket, path: Path, offset: int) -> int:
    try:
        with open_job_log(path) as f:  # the job's user's file: never through a symlink
            f.seek(offset)
            data = f.read(1 << 20)
    except OSError:
        return offset
    end = data.rfind(b"\n")
    if end < 0:
        return offset
    chunk = data[: end + 1]
    wire.send_obj(
        conn,
        {
            "event": "lines",
            "text": chunk.decode("utf-8", "replace"),
            "offset": offset + len(chunk),
        },
    )
    return offset + len(chunk)


def _peer_gone(conn: socket.socket) -> bool:
    """Has a watching client closed its end? (It sends nothing while it watches, so anything
    readable is its end of file, or a TLS close.)"""
    if not select.select([conn], [], [], 0)[0]:
        return False
    try:
        if isinstance(conn, ssl.SSLSocket):
            return True
        return not conn.recv(1, socket.MSG_PEEK)
    except OSError:
        return True
