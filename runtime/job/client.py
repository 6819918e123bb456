"""A task's connection to its chief: found through the rendezvous file, opened with the
handshake of runtime/job/channel.py (the chief proves the job's secret too), and the thread that
reads the chief's orders (`open`, `close`, `end`) while the task works.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from cs2sim.runtime.job import channel, rendezvous
from cs2sim.runtime.job.channel import POLL_S, Closed, FrameError, recv_frame, send_frame
from cs2sim.runtime.job.ended import ChiefEnded, read_ended
from cs2sim.runtime.job.roles import TaskInfo
from cs2sim.system import knobs
from cs2sim.system.errors import RuntimeFailure

__all__ = ["StreamerConnection", "Control", "rendezvous_timeout", "HANDSHAKE_S"]

HANDSHAKE_S = 5.0  # the chief's challenge and welcome must both arrive within this


def rendezvous_timeout() -> float:
    """Seconds a streamer or coordinator waits for the chief's address."""
    return knobs.number("CS2SIM_RENDEZVOUS_TIMEOUT", 600.0)


class StreamerConnection:
    """A streamer's or coordinator's link to its chief, found through the rendezvous file and
    opened with the handshake of runtime/job/channel.py (the chief proves the secret too)."""

    def __init__(
        self, info: TaskInfo, model_dir: Path, hello: dict[str, Any], secret: bytes | None = None
    ) -> None:
        self.info = info
        self.dir = d = rendezvous.job_dir(model_dir, info.job_id)
        claim = {
            "job": info.job_id,
            "procid": info.procid,
            "node": info.node,
            "pid": os.getpid(),
            **hello,
        }
        deadline = time.monotonic() + rendezvous_timeout()
        refused: str | None = None
        while True:
            key = secret or channel.env_secret() or rendezvous.read_secret(d)
            sock = _connect(d, info.job_id) if key is not None else None
            if sock is not None:
                assert key is not None
                try:
                    self.sock = _handshake(sock, key, claim)
                    return
                except (OSError, Closed, FrameError, RuntimeFailure) as e:
                    refused = str(e) if isinstance(e, RuntimeFailure) else None
                    with contextlib.suppress(OSError):
                        sock.close()
            ended = read_ended(d, info.job_id)  # the chief ended (maybe just now): its outcome
            if ended is not None:
                raise ended
            if time.monotonic() > deadline:
                if refused:
                    raise RuntimeFailure(refused)
                raise RuntimeFailure(
                    f"{info.name} found no chief at {d / rendezvous.ADDR_FILE} "
                    f"within {rendezvous_timeout():g} s; is task 0 running?"
                )
            time.sleep(POLL_S)

    def ended(self) -> ChiefEnded | None:
        """The chief's ended record, once the connection closed without an `end` frame."""
        return read_ended(self.dir, self.info.job_id)


def _handshake(sock: socket.socket, secret: bytes, claim: dict[str, Any]) -> socket.socket:
    """Answer the chief's challenge and check its proof; the connected socket."""
    deadline = time.monotonic() + HANDSHAKE_S  # one deadline for the whole exchange
    sock.settimeout(HANDSHAKE_S)
    challenge, _ = recv_frame(sock, deadline=deadline)
    chief_nonce = challenge.get("nonce")
    if challenge.get("type") != "challenge" or not isinstance(chief_nonce, str):
        raise FrameError("no challenge")
    task_nonce = channel.nonce()
    hello = {**claim, "nonce": task_nonce}
    hello["proof"] = channel.hello_proof(secret, chief_nonce, task_nonce, channel.claim_text(hello))
    send_frame(sock, hello)
    welcome, _ = recv_frame(sock, deadline=deadline)
    expected = channel.welcome_proof(secret, task_nonce, chief_nonce)
    if welcome.get("type") != "welcome" or not channel.proof_ok(welcome.get("proof"), expected):
        raise RuntimeFailure(
            "the process listening at the chief's address did not prove it "
            "holds the job's secret; the job's rendezvous files were replaced "
            "or the launcher's secret differs between tasks."
        )
    sock.settimeout(None)
    return sock


def _connect(d: Path, job_id: str) -> socket.socket | None:
    """A TCP connection to the chief chief.json names (None: no live chief there yet)."""
    addr = rendezvous.read_address(d)
    if addr is None or addr.get("job") != job_id:
        return None
    if rendezvous.chief_gone(addr):  # a kill -9'd chief's leftover (the next chief removes it)
        return None
    port = addr.get("port")
    hosts = addr.get("hosts")
    if type(port) is not int or not isinstance(hosts, list):
        return None
    for host in hosts[:8]:
        if not isinstance(host, str):
            continue
        try:
            sock = socket.create_connection((host, port), timeout=2.0)
        except (OSError, ValueError, OverflowError):
            continue
        sock.settimeout(None)
        channel.tune(sock)
        return sock
    return None


class Control:
    """The chief's orders, read by a thread while the streamer produces."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.cv = threading.Condition()
        self.request: dict[str, Any] | None = None  # the open session
        self.taken = 0  # batches of the open session the chief has taken (its credit frames)
        self.ended: dict[str, Any] | None = None  # the chief's end frame
        self.lost = False  # EOF without an end frame
        self.thread = threading.Thread(target=self._run, daemon=True, name="streamer-control")
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                header, _ = recv_frame(self.sock)
                with self.cv:
                    kind = header.get("type")
                    if kind == "open":
                        self.request, self.taken = header, 0
                    elif kind == "credit":
                        taken = header.get("taken")
                        if (
                            self.request is not None
                            and header.get("session") == self.request.get("session")
                            and type(taken) is int
                        ):
                            self.taken = max(self.taken, taken)
                    elif kind == "close":
                        self.request = None
                    elif kind == "end":
                        self.ended, self.request = header, None
                        self.cv.notify_all()
                        return
                    self.cv.notify_all()
        except Exception:  # noqa: BLE001 - EOF, a bad frame or an error: the chief is lost
            with self.cv:
                self.lost = self.ended is None
                self.request = None
                self.cv.notify_all()

    def done(self) -> bool:
        return self.ended is not None or self.lost

    def room_for(self, j: int, request: dict[str, Any]) -> bool:
        """Block until the session's j-th batch (from 0) is within the chief's window: fewer than
        `window` batches beyond those it has taken (an `open` without a window: always). False
        when the session was replaced or the chief ended meanwhile."""
        window = request.get("window")
        with self.cv:
            while (
                type(window) is int
                and j >= self.taken + window
                and self.request is request
                and not self.done()
            ):
                self.cv.wait(POLL_S)
            return self.request is request and not self.done()
