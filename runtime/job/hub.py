"""The chief's hub: the listener its streamers and coordinators connect to, one link per
streamer, the sessions it opens and the batches it takes (runtime/job/remote_stream.py reads
them in order).

Channel. The chief listens on a TCP socket and writes its address to
`<model_dir>/.cs2sim/rendezvous/<job id>/chief.json` (runtime/job/rendezvous.py: 0600 in a 0700
directory, removed at the job's end, or by the next reader after a kill -9); model_dir is on the
file system every node shares, so the tasks find each other on one host or many. Every
connection must first prove it holds the job's secret (runtime/job/channel.py: HMAC
challenge-response, bounded frames) at the chief's door (runtime/job/door.py: one deadline per
handshake, bounded lanes evicted oldest-first); one that does not is closed and named in the
job's log, and the job goes on. TCP was measured against the alternatives
(bench/input_bench.py, `channel`): one loopback stream moved 0.6-2.2 GB/s of batches, 1.5-6x a
pickling multiprocessing.Queue; a shared-memory ring was 3-8x faster still but works on one
host only, and TCP's ceiling is far above what this host's executors consume, so the channel is
TCP.

Frames (runtime/job/channel.py): a 4-byte length, a JSON header, then the batch arrays' raw
bytes, received straight into preallocated numpy arrays (no pickle, no extra copy) once the
header's arrays have been checked against the batch layout the chief expects: the batch's rows
from the chief's own plan, and the names, numeric dtypes and per-sample shapes of the split's
first batch (every later batch of the split must match them exactly).

Failure. A streamer that dies closes its socket (the kernel does it, even after SIGKILL): the
chief's reader sees EOF at once and the next batch it needs from that streamer raises a
RuntimeFailure naming the streamer (rank, Slurm task, node, pid). A streamer that hangs is named
after CS2SIM_STREAMER_TIMEOUT seconds without a batch; one that never connects, after the same
timeout at start-up. A streamer whose input function raises sends the error text, which the
chief raises. At its end the chief writes its outcome (runtime/job/ended.py) and tells every
connected task.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.job import channel, ended, rendezvous
from cs2sim.runtime.job.channel import POLL_S, Closed, FrameError, Layout, printable, send_frame
from cs2sim.runtime.job.door import Door
from cs2sim.runtime.job.roles import Role, TaskInfo
from cs2sim.system import knobs
from cs2sim.system.errors import RuntimeFailure

if TYPE_CHECKING:
    from cs2sim.runtime.data.stream import Plan, PlanOfParts

__all__ = ["ChiefHub", "Link", "chief_task", "active_hub", "streamer_timeout"]

log = logging.getLogger("cs2sim.run")

CHIEF_BUFFER = 64  # batches the chief holds ready over all its streamers (>= 1 per streamer)
# How far a streamer may run ahead of the batches the chief has taken from it: its queue here,
# one batch in the reader's hands, one on the wire. Without a window only the sockets' buffers
# held a streamer back, and loopback TCP grows them to megabytes: each of a 96-streamer job's
# streamers made ~500 small batches for a 4-step run, which the chief never read.
IN_FLIGHT = 2


def streamer_timeout() -> float:
    """Seconds without a batch (or a connection at start-up) before a streamer is named dead."""
    return knobs.number("CS2SIM_STREAMER_TIMEOUT", 120.0)


@dataclass
class Link:
    """One connected streamer as the chief sees it."""

    rank: int
    procid: int
    node: str
    pid: int
    sock: socket.socket
    # (header, arrays) of each batch the reader thread received
    q: queue.Queue[tuple[dict[str, Any], dict[str, np.ndarray]]] = field(
        default_factory=lambda: queue.Queue(maxsize=4)
    )
    session: int = -1  # frames of other sessions are dropped
    taken: int = 0  # batches of the session the chief has taken from the queue
    send_lock: threading.Lock = field(default_factory=threading.Lock)  # whole frames only
    dead: str | None = None  # why the connection ended
    last: float = field(default_factory=time.monotonic)  # when it last delivered a frame
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return (
            f"input streamer {self.rank} (task {self.procid} on node "
            f"{printable(self.node, 64)}, pid {self.pid})"
        )


class ChiefHub:
    """The chief's listener: accepts its streamers and coordinators, serves RemoteStreams."""

    def __init__(
        self, info: TaskInfo, model_dir: Path, *, prefetch: int = 4, host: str | None = None
    ) -> None:
        self.info = info
        self.num_streamers = info.num_streamers
        # ready batches per streamer: a 96-streamer job must not hold 96 x 4 batches
        self.prefetch = max(1, min(prefetch, CHIEF_BUFFER // max(1, info.num_streamers)))
        self.dir = rendezvous.make_job_dir(model_dir, info.job_id)
        with contextlib.suppress(OSError):
            (self.dir / ended.ENDED_FILE).unlink()  # an earlier job's with this id (a new store)
        for job in rendezvous.clean_stale(model_dir, keep=str(info.job_id)):
            log.info(f"Removed the rendezvous files of job {job}, whose chief was killed.")
        ended.prune(self.dir.parent)
        secret = channel.env_secret()
        if secret is None:  # started without our launcher: the tasks read it next to chief.json
            secret = channel.new_secret()
            rendezvous.write_secret(self.dir, secret)
        self._secret = secret
        self._sock = socket.create_server(("", 0), backlog=max(128, info.num_streamers + 8))
        self.port = self._sock.getsockname()[1]
        self.links: dict[int, Link] = {}
        self.coordinators: list[socket.socket] = []
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        self._closing = False
        self._session = 0
        self._sessions: dict[int, tuple[str, Any, int]] = {}  # session -> (split, plan, start)
        self._layouts: dict[str, Layout] = {}  # split -> its first batch's layout (rows = 0)
        self._expect: dict[tuple[str, int], Layout] = {}  # (split, rows) -> the exact layout
        self.bad_hello: str | None = None
        hosts = [
            h for h in (host or knobs.raw("CS2SIM_CHIEF_HOST"), _host_address(), "127.0.0.1") if h
        ]
        rendezvous.write_address(
            self.dir,
            {
                "hosts": list(dict.fromkeys(hosts)),
                "port": self.port,
                "node": info.node,
                "job": info.job_id,
                "streamers": self.num_streamers,
            },
        )
        self.door = Door(
            self._sock, self._check_hello, self._welcome, self._join, lambda: self._closing
        )

    @property
    def refused(self) -> int:
        """Connections refused so far (not tasks of this job, or too slow to prove it)."""
        return self.door.refused

    # connections ---------------------------------------------------------------------------------
    def _check_hello(self, header: dict[str, Any], chief_nonce: str) -> str | None:
        """Why this hello is refused, or None when it proves the job's secret."""
        if header.get("type") not in ("streamer", "coordinator"):
            return "sent no hello"
        task_nonce = header.get("nonce")
        if not isinstance(task_nonce, str) or not 16 <= len(task_nonce) <= 128:
            return "sent a hello without a valid nonce"
        expected = channel.hello_proof(
            self._secret, chief_nonce, task_nonce, channel.claim_text(header)
        )
        if not channel.proof_ok(header.get("proof"), expected):
            return "did not prove it holds the job's secret"
        if header.get("job") != self.info.job_id:  # a task of another job, same secret: no
            return f"belongs to job {str(header.get('job'))[:40]}"
        rank = header.get("rank")
        if header["type"] == "streamer" and type(rank) is not int:
            return "claimed no streamer rank"
        return None

    def _welcome(self, hello: dict[str, Any], chief_nonce: str) -> dict[str, Any]:
        return {
            "type": "welcome",
            "proof": channel.welcome_proof(self._secret, hello["nonce"], chief_nonce),
        }

    def _join(self, conn: socket.socket, header: dict[str, Any]) -> None:
        """An authenticated task joins: a coordinator, or the streamer of its rank."""
        with self._joined:
            if header.get("type") == "coordinator":
                self.coordinators.append(conn)
                log.debug(
                    f"Coordinator task {printable(header.get('procid'))} on node "
                    f"{printable(header.get('node'))} joined"
                )
                return
            rank = int(header["rank"])
            stale = self.links.get(rank)
            if stale is not None and self._same_task(stale, header) and stale.session == -1:
                # The task gave up waiting for our welcome (a loaded host: its handshake
                # deadline passed while the welcome was on its way) and connected again. The
                # first link never carried an order, so the new one simply takes its place.
                log.debug(f"{stale.name} connected again; its first connection is closed")
                with contextlib.suppress(OSError):
                    stale.sock.close()
                del self.links[rank]
            if not 0 <= rank < self.num_streamers or rank in self.links:
                self.bad_hello = (
                    f"task {printable(header.get('procid'))} on node "
                    f"{printable(header.get('node'))} announced streamer rank "
                    f"{rank} of {self.num_streamers}"
                )
                conn.close()
                self._joined.notify_all()
                return
            procid, pid = header.get("procid"), header.get("pid")
            link = Link(
                rank,
                procid if type(procid) is int else -1,
                str(header.get("node", "?"))[:64],
                pid if type(pid) is int else -1,
                conn,
                queue.Queue(maxsize=self.prefetch),
            )
            link.reader = threading.Thread(
                target=self._read, args=(link,), daemon=True, name=f"chief-read-{rank}"
            )
            self.links[rank] = link
            link.reader.start()
            self._joined.notify_all()

    @staticmethod
    def _same_task(link: Link, header: dict[str, Any]) -> bool:
        """Is this hello from the process that `link` is (task, node and pid as it claimed)?"""
        return (
            header.get("procid") == link.procid
            and str(header.get("node", "?"))[:64] == link.node
            and header.get("pid") == link.pid
        )

    def _expected(self, link: Link, header: dict[str, Any]) -> Layout:
        """The exact array layout the frame `header` announces must have (FrameError if the
        header itself is wrong): none for an error; for batch g of a session, the split's
        names, dtypes and per-sample shapes with g's rows from the chief's own plan."""
        kind = header.get("type")
        if kind == "error":
            return []
        if kind != "batch":
            raise FrameError(f"a frame of type {str(kind)[:20]!r}")
        session, g = header.get("session"), header.get("g")
        if type(session) is not int or session not in self._sessions:
            raise FrameError(f"a batch of the unknown session {str(session)[:20]}")
        split, plan, start = self._sessions[session]
        total = plan.total_batches
        if (
            type(g) is not int
            or g < start
            or (total is not None and g >= total)
            or (g - start) % self.num_streamers != link.rank
        ):
            raise FrameError(f"batch {str(g)[:20]}, which is not one of its batches")
        rows = _rows(plan, g)
        layout = channel.check_arrays(header)  # well formed; now the exact shapes:
        with self._lock:
            known = self._layouts.get(split)
            if known is None:  # the split's first batch fixes names, dtypes, sample shapes
                if not layout or any(s[:1] != (rows,) for _, _, s in layout):
                    raise FrameError(f"a first batch whose arrays do not have {rows} rows")
                known = self._layouts[split] = [(n, d, (0, *s[1:])) for n, d, s in layout]
            key = (split, rows)
            if key not in self._expect:  # one object per shape: channel's check is then cheap
                self._expect[key] = [(n, d, (rows, *s[1:])) for n, d, s in known]
            return self._expect[key]

    def _read(self, link: Link) -> None:
        """Move the streamer's frames into its queue (dropping other sessions' frames)."""
        try:
            while True:
                header = channel.recv_header(link.sock)
                layout = channel.check_arrays(header, self._expected(link, header))
                arrays = channel.recv_arrays(link.sock, layout)
                header.pop("arrays", None)
                link.last = time.monotonic()
                if header.get("session") != link.session or self._closing:
                    continue
                item = (header, arrays)
                while True:  # bounded: the streamer blocks in sendall meanwhile
                    try:
                        link.q.put(item, timeout=POLL_S)
                        break
                    except queue.Full:
                        if header.get("session") != link.session or self._closing:
                            break
        except Closed:
            link.dead = "closed its connection"
        except FrameError as e:
            link.dead = f"sent {e}"
            with contextlib.suppress(OSError):
                link.sock.close()
        except OSError as e:
            link.dead = f"connection failed ({e.strerror or e})"
        except Exception as e:  # noqa: BLE001 - no thread traceback: the chief names the task
            link.dead = f"broke the channel ({type(e).__name__}: {e})"

    def wait_connected(self, timeout: float | None = None) -> None:
        """Block until every streamer has connected; RuntimeFailure names the missing ones."""
        timeout = streamer_timeout() if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._joined:
            while len(self.links) < self.num_streamers and self.bad_hello is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.num_streamers)) - set(self.links))
                    shown = ", ".join(map(str, missing[:10])) + (
                        " ..." if len(missing) > 10 else ""
                    )
                    raise RuntimeFailure(
                        f"{len(missing)} of {self.num_streamers} input streamer(s) did not "
                        f"connect to the chief within {timeout:g} s (rank(s) {shown}); check "
                        f"their task logs, or raise CS2SIM_STREAMER_TIMEOUT."
                    )
                self._joined.wait(min(left, POLL_S))
            if self.bad_hello:
                raise RuntimeFailure(
                    f"the job's tasks disagree on its layout: {self.bad_hello}; relaunch the job."
                )

    # sessions ----------------------------------------------------------------------------------
    def open(self, split: str, start: int, plan: Plan | PlanOfParts) -> int:
        """Ask every streamer for `split` from batch `start` on; returns the session id.
        `plan` (the chief's own) says how many rows each batch of the session has."""
        with self._lock:
            self._session += 1
            session = self._session
            self._sessions[session] = (split, plan, start)
        for link in list(self.links.values()):  # a task reconnecting may replace its own
            link.session, link.taken = session, 0
            link.last = time.monotonic()  # idle between sessions is not a stall
            _drain(link.q)
            self._send(
                link,
                {
                    "type": "open",
                    "session": session,
                    "split": split,
                    "start": start,
                    "n": self.num_streamers,
                    "window": self.window,
                },
            )
        return session

    def close_session(self) -> None:
        """Stop the streamers producing (they wait for the next session or the end)."""
        with self._lock:
            self._session += 1
        for link in list(self.links.values()):  # a task reconnecting may replace its own
            link.session = -1
            _drain(link.q)
            if link.dead is None:
                with contextlib.suppress(OSError):
                    self._send(link, {"type": "close"})

    @property
    def window(self) -> int:
        """Batches a streamer may send beyond those the chief has taken from it."""
        return self.prefetch + IN_FLIGHT

    def _credit(self, link: Link, session: int) -> None:
        """Tell the streamer how many batches the chief has taken, every half window (a
        streamer that died is named by the next `get`)."""
        link.taken += 1
        if link.taken % max(1, self.window // 2) == 0:
            with contextlib.suppress(OSError):
                self._send(link, {"type": "credit", "session": session, "taken": link.taken})

    def _send(self, link: Link, header: dict[str, Any]) -> None:
        try:
            with link.send_lock:
                send_frame(link.sock, header)
        except OSError as e:
            raise RuntimeFailure(
                f"{link.name} cannot be reached ({e.strerror or e}); the task died: see its log."
            ) from None

    def get(self, link: Link, g: int, session: int) -> dict[str, np.ndarray]:
        """Batch g from `link` (blocks; names the streamer if it died or stalled)."""
        limit = streamer_timeout()
        since = time.monotonic()  # a stall: nothing arrived for `limit` s while the chief waited
        while True:
            try:
                header, arrays = link.q.get(timeout=POLL_S)
                if header.get("session") != session:
                    continue  # queued by the reader just before the session changed
                break
            except queue.Empty:
                if link.dead is not None and link.q.empty():
                    raise RuntimeFailure(
                        f"{link.name} died: it {link.dead} before sending batch {g}; see that "
                        "task's log (the job stops)."
                    ) from None
                if time.monotonic() - max(link.last, since) > limit:
                    raise RuntimeFailure(
                        f"{link.name} sent nothing for {limit:g} s while batch {g} was due; "
                        "it is stuck (see its log) or raise CS2SIM_STREAMER_TIMEOUT."
                    ) from None
        if header.get("type") == "error":
            raise RuntimeFailure(f"{link.name} failed: {header.get('text')}")
        if header.get("g") != g:
            raise RuntimeFailure(
                f"{link.name} sent batch {header.get('g')} where {g} was "
                "expected; the tasks disagree on the input (same params?)."
            )
        self._credit(link, session)
        return arrays

    # end ---------------------------------------------------------------------------------------
    def end(self, status: int, text: str = "") -> None:
        """Tell every task the chief's outcome (the ended record first, for the tasks that have
        not connected yet; then over each socket), wait briefly for them to leave, close."""
        if self._closing:
            return
        self._closing = True
        ended.write_ended(self.dir, self.info, status, text)
        with contextlib.suppress(OSError):
            (self.dir / rendezvous.ADDR_FILE).unlink()
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            live = [(link.sock, link.send_lock) for link in self.links.values() if not link.dead]
            live += [(s, threading.Lock()) for s in self.coordinators]
            dead = [link.sock for link in self.links.values() if link.dead is not None]
        socks = [s for s, _ in live]
        for s in dead:  # a link that broke left its socket open: nothing more goes over it
            with contextlib.suppress(OSError):
                s.close()
        for s, lock in live:
            with contextlib.suppress(OSError), lock:
                send_frame(s, {"type": "end", "status": status, "text": text})
                s.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 5.0
        for link in list(self.links.values()):  # readers drain until the streamer hangs up
            if link.reader is not None:
                link.reader.join(max(0.0, deadline - time.monotonic()))
        for s in self.coordinators:
            with contextlib.suppress(OSError):
                s.settimeout(max(0.05, deadline - time.monotonic()))
                while s.recv(4096):
                    pass
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()
        rendezvous.remove_job_dir(self.dir)  # chief.json and the secret; ended.json stays


def _rows(plan: Any, g: int) -> int:  # Plan | PlanOfParts, told apart by shard_of
    """Rows of batch g under the chief's plan (a shard plan asks its shard's plan)."""
    if hasattr(plan, "shard_of"):
        return len(plan.local(plan.shard_of(g)).indices(g))
    return len(plan.indices(g))


def _drain(q: queue.Queue[Any]) -> None:
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return


def _host_address() -> str | None:
    """This host's address as other nodes reach it (None when it does not resolve)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


_ACTIVE: ChiefHub | None = None


def active_hub() -> ChiefHub | None:
    """The chief's hub while a launched chief runs (None otherwise)."""
    return _ACTIVE


@contextlib.contextmanager
def chief_task(info: TaskInfo, model_dir: Path, prefetch: int = 4) -> Iterator[ChiefHub | None]:
    """While the chief runs: its hub is active; at the end every task hears its outcome."""
    global _ACTIVE
    if info.role is not Role.CHIEF or not (info.num_streamers or info.num_coordinators):
        yield None
        return
    hub = ChiefHub(info, model_dir, prefetch=prefetch)
    log.debug(
        f"Chief of job {info.job_id} listening on port {hub.port} for "
        f"{info.num_streamers} streamer(s) and {info.num_coordinators} coordinator(s)"
    )
    _ACTIVE = hub
    try:
        yield hub
    except BaseException as e:
        hub.end(ended.exit_status(e), f"{type(e).__name__}: {e}")
        raise
    else:
        hub.end(0)
    finally:
        _ACTIVE = None
