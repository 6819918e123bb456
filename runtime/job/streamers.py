"""Input workers of a launched job: STREAMER tasks feed the CHIEF's training loop over TCP.

Every task of a csrun_wse job runs the same run.py command; runtime/job/roles.py says which part it
is. The chief (task 0) trains; each STREAMER task builds the same input pipeline from the same
params and streams its shard of the batch sequence to the chief; COORDINATOR tasks wait for the
chief's end and exit with its outcome.

Channel. The chief listens on a TCP socket and writes its address to
`<model_dir>/.cs2sim/rendezvous/<job id>/chief.json` (runtime/job/rendezvous.py: 0600 in a 0700
directory, removed at the job's end, or by the next reader after a kill -9); model_dir is on the
file system every node shares (Cerebras' Performance Optimization Practices), so the tasks find each
other on one host or many.
Every connection must first prove it holds the job's secret (runtime/job/channel.py: HMAC
challenge-response, bounded frames); one that does not is closed and named in the job's log,
and the job goes on. TCP was measured against the alternatives (bench/input_bench.py, `channel`):
one loopback stream moved 0.6-2.2 GB/s of batches, 1.5-6x a pickling multiprocessing.Queue;
a shared-memory ring was 3-8x faster still but works on one host only, and TCP's ceiling is
far above what this host's executors consume, so the channel is TCP.

Frames (runtime/job/channel.py): a 4-byte length, a JSON header, then the batch arrays' raw
bytes, received straight into preallocated numpy arrays (no pickle, no extra copy) once the
header's arrays have been checked against the batch layout the chief expects: the batch's rows
from the chief's own plan, and the names, numeric dtypes and per-sample shapes of the split's
first batch (every later batch of the split must match them exactly).

Order (determinism). With S streamers and a session starting at batch s0, streamer r makes
batches s0+r, s0+r+S, s0+r+2S, ... (round-robin by streamer rank, the ranks being SLURM_PROCID
order), and the chief takes batch g from streamer (g - s0) % S. Batch g is always the samples
`Plan.indices(g)` of runtime/data/stream.py, so the sequence the model sees is exactly the one a
plain `python run.py` sees, whatever S is and whatever the streamers' speeds: each streamer reads
a disjoint slice of every epoch's sample order (1/S of it), and the data position in a checkpoint
(epoch, index) resumes a launched run exactly (a new session starts at the restored batch).

Failure. A streamer that dies closes its socket (the kernel does it, even after SIGKILL): the
chief's reader sees EOF at once and the next batch it needs from that streamer raises a
RuntimeFailure naming the streamer (rank, Slurm task, node, pid). A streamer that hangs is named
after CS2SIM_STREAMER_TIMEOUT seconds without a batch; one that never connects, after the same
timeout at start-up. A streamer whose input function raises sends the error text, which the chief
raises. Streamers and coordinators whose chief disappears (EOF without an `end` frame) exit 1.

End. Whatever its exit code, a chief that ends writes `ended.json` (its outcome) into the same
rendezvous directory before it stops listening, then removes `chief.json`. A streamer or
coordinator that has not connected yet (or whose connection closes) looks there at every try and
exits at once with it: a chief that finds nothing to do (the rerun of a completed run) ends the
whole job in seconds, not after the rendezvous timeout. Streamers exit 0 (they did nothing
wrong), coordinators with the chief's exit code, as when the chief says goodbye over the socket.
A record older than the task itself by more than ENDED_FRESH_S is another job's with the same id
(a store made anew, same model_dir): it is ignored, and a chief removes it when it starts.

Test knob: CS2SIM_INPUT_EXTRA_WORK=<rounds> adds real CPU work to every sample a streamer makes
(rounds of SHA-256 over the sample's bytes; hashlib releases the GIL, so a streamer's threads
share it); it stands for a heavier input function, e.g. to see cs_input_analyzer's
recommendation grow.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.data.stream import DataPosition
from cs2sim.runtime.job import channel, rendezvous
from cs2sim.runtime.job.channel import Closed, FrameError, Layout, recv_frame, send_frame
from cs2sim.runtime.job.roles import Role, TaskInfo, task_info
from cs2sim.system import procfs
from cs2sim.system.errors import CsError, RuntimeFailure

__all__ = [
    "ChiefEnded",
    "ChiefHub",
    "read_ended",
    "write_ended",
    "RemoteStream",
    "ShardProducer",
    "StreamerConnection",
    "chief_task",
    "serve_task",
    "streamed_input",
    "active_hub",
    "streamer_loop",
    "extra_work_rounds",
    "recv_frame",
    "send_frame",
]

log = logging.getLogger("cs2sim.run")

ADDR_FILE = rendezvous.ADDR_FILE
ENDED_FILE = "ended.json"
ENDED_FRESH_S = 120.0  # an ended record this much older than the reading task is another job's
ENDED_KEEP_S = 86400.0  # a chief removes other jobs' rendezvous directories ended this long ago
POLL_S = 0.1  # how often a blocked side looks at liveness and stop flags
MAX_THREADS = 32  # a streamer's producing threads: SLURM_CPUS_PER_TASK, at most this
CHIEF_BUFFER = 64  # batches the chief holds ready over all its streamers (>= 1 per streamer)
HELLO_TIMEOUT_S = 5.0  # a connecting peer has this long to complete the handshake
MAX_HANDSHAKES = 64  # handshakes in progress at once; more connections are closed at once
MAX_REFUSAL_LINES = 50  # refused connections named in the log, one line each, per job


def _timeout(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def producing_threads(cpus_per_task: int | None) -> int:
    """A streamer's threads: its SLURM_CPUS_PER_TASK, but no more than this host's CPUs (more
    threads cannot run at once; on the embedded cluster every "node" is this host)."""
    return max(1, min(cpus_per_task or 1, os.cpu_count() or 1, MAX_THREADS))


def streamer_timeout() -> float:
    """Seconds without a batch (or a connection at start-up) before a streamer is named dead."""
    return _timeout("CS2SIM_STREAMER_TIMEOUT", 120.0)


def rendezvous_timeout() -> float:
    """Seconds a streamer or coordinator waits for the chief's address."""
    return _timeout("CS2SIM_RENDEZVOUS_TIMEOUT", 600.0)


def extra_work_rounds() -> int:
    """The CS2SIM_INPUT_EXTRA_WORK test knob (see the module docstring); 0 when unset."""
    try:
        return max(0, int(os.environ.get("CS2SIM_INPUT_EXTRA_WORK", "0")))
    except ValueError:
        return 0


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers are small writes
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)  # a vanished host is noticed


# -- the chief's side -----------------------------------------------------------------------------
@dataclass
class _Link:
    """One connected streamer as the chief sees it."""

    rank: int
    procid: int
    node: str
    pid: int
    sock: socket.socket
    q: queue.Queue = field(default_factory=lambda: queue.Queue(maxsize=4))
    session: int = -1  # frames of other sessions are dropped
    dead: str | None = None  # why the connection ended
    last: float = field(default_factory=time.monotonic)  # when it last delivered a frame
    reader: threading.Thread | None = None

    @property
    def name(self) -> str:
        return (f"input streamer {self.rank} (task {self.procid} on node {self.node}, "
                f"pid {self.pid})")


class ChiefHub:
    """The chief's listener: accepts its streamers and coordinators, serves RemoteStreams."""

    def __init__(self, info: TaskInfo, model_dir: Path, *, prefetch: int = 4,
                 host: str | None = None) -> None:
        self.info = info
        self.num_streamers = info.num_streamers
        # ready batches per streamer: a 96-streamer job must not hold 96 x 4 batches
        self.prefetch = max(1, min(prefetch, CHIEF_BUFFER // max(1, info.num_streamers)))
        self.dir = rendezvous.make_job_dir(model_dir, info.job_id)
        with contextlib.suppress(OSError):
            (self.dir / ENDED_FILE).unlink()  # an earlier job's with this id (a new store)
        for job in rendezvous.clean_stale(model_dir, keep=str(info.job_id)):
            log.info(f"Removed the rendezvous files of job {job}, whose chief was killed.")
        _prune(self.dir.parent)
        secret = channel.env_secret()
        if secret is None:  # started without our launcher: the tasks read it next to chief.json
            secret = channel.new_secret()
            rendezvous.write_secret(self.dir, secret)
        self._secret = secret
        self._sock = socket.create_server(("", 0), backlog=max(128, info.num_streamers + 8))
        self.port = self._sock.getsockname()[1]
        self.links: dict[int, _Link] = {}
        self.coordinators: list[socket.socket] = []
        self._lock = threading.Lock()
        self._joined = threading.Condition(self._lock)
        self._closing = False
        self._session = 0
        self._sessions: dict[int, tuple[str, Any, int]] = {}  # session -> (split, plan, start)
        self._layouts: dict[str, Layout] = {}  # split -> its first batch's layout (rows = 0)
        self._expect: dict[tuple[str, int], Layout] = {}  # (split, rows) -> the exact layout
        self._handshakes = threading.BoundedSemaphore(MAX_HANDSHAKES)
        self.refused = 0  # connections refused (named in the log)
        self.bad_hello: str | None = None
        hosts = [h for h in (host or os.environ.get("CS2SIM_CHIEF_HOST"),
                             _host_address(), "127.0.0.1") if h]
        rendezvous.write_address(self.dir, {
            "hosts": list(dict.fromkeys(hosts)), "port": self.port, "node": info.node,
            "job": info.job_id, "streamers": self.num_streamers})
        self._acceptor = threading.Thread(target=self._accept, name="chief-accept", daemon=True)
        self._acceptor.start()

    # connections ---------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, addr = self._sock.accept()
            except OSError:
                return
            if not self._handshakes.acquire(blocking=False):
                self._refuse(addr, None, f"arrived while {MAX_HANDSHAKES} other connections "
                             "were still in their handshake")
                conn.close()
                continue
            threading.Thread(target=self._hello, args=(conn, addr), daemon=True,
                             name="chief-hello").start()

    def _refuse(self, addr: Any, claim: dict[str, Any] | None, why: str) -> None:
        """Name a refused connection in the job's log (at most MAX_REFUSAL_LINES lines)."""
        with self._lock:
            self.refused += 1
            n = self.refused
        if n > MAX_REFUSAL_LINES + 1:
            return
        if n == MAX_REFUSAL_LINES + 1:
            log.warning(f"More than {MAX_REFUSAL_LINES} connections to the chief were refused; "
                        "further ones are not logged.")
            return
        where = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"
        log.warning(f"Refused a connection to the chief from {where}{_claimed(claim)}: it {why}; "
                    "it is not a task of this job, and the job goes on.")

    def _hello(self, conn: socket.socket, addr: Any) -> None:
        """The handshake (runtime/job/channel.py); a peer that fails it is closed and named."""
        header: dict[str, Any] | None = None
        try:
            try:
                _tune(conn)
                conn.settimeout(HELLO_TIMEOUT_S)
                chief_nonce = channel.nonce()
                send_frame(conn, {"type": "challenge", "nonce": chief_nonce})
                header, _ = recv_frame(conn)
                why = self._check_hello(header, chief_nonce)
                if why is None:
                    send_frame(conn, {"type": "welcome", "proof": channel.welcome_proof(
                        self._secret, header["nonce"], chief_nonce)})
                    conn.settimeout(None)
            except TimeoutError:
                why = f"sent no complete hello within {HELLO_TIMEOUT_S:g} s"
            except Closed:
                why = "closed the connection before its hello"
            except FrameError as e:
                why = f"sent {e}"
            except OSError as e:
                why = f"failed ({e.strerror or e})"
            if why is not None:
                self._refuse(addr, header, why)
                conn.close()
                return
            assert header is not None
            self._join(conn, header)
        except Exception as e:  # noqa: BLE001 - a peer must never put a traceback in the log
            self._refuse(addr, header, f"caused an error ({type(e).__name__})")
            with contextlib.suppress(OSError):
                conn.close()
        finally:
            self._handshakes.release()

    def _check_hello(self, header: dict[str, Any], chief_nonce: str) -> str | None:
        """Why this hello is refused, or None when it proves the job's secret."""
        if header.get("type") not in ("streamer", "coordinator"):
            return "sent no hello"
        task_nonce = header.get("nonce")
        if not isinstance(task_nonce, str) or not 16 <= len(task_nonce) <= 128:
            return "sent a hello without a valid nonce"
        expected = channel.hello_proof(self._secret, chief_nonce, task_nonce,
                                       channel.claim_text(header))
        if not channel.proof_ok(header.get("proof"), expected):
            return "did not prove it holds the job's secret"
        if header.get("job") != self.info.job_id:  # a task of another job, same secret: no
            return f"belongs to job {str(header.get('job'))[:40]}"
        rank = header.get("rank")
        if header["type"] == "streamer" and type(rank) is not int:
            return "claimed no streamer rank"
        return None

    def _join(self, conn: socket.socket, header: dict[str, Any]) -> None:
        """An authenticated task joins: a coordinator, or the streamer of its rank."""
        with self._joined:
            if header.get("type") == "coordinator":
                self.coordinators.append(conn)
                log.debug(f"Coordinator task {header.get('procid')} on node "
                          f"{header.get('node')} joined")
                return
            rank = int(header["rank"])
            if not 0 <= rank < self.num_streamers or rank in self.links:
                self.bad_hello = (f"task {header.get('procid')} on node {header.get('node')} "
                                  f"announced streamer rank {rank} of {self.num_streamers}")
                conn.close()
                self._joined.notify_all()
                return
            procid, pid = header.get("procid"), header.get("pid")
            link = _Link(rank, procid if type(procid) is int else -1,
                         str(header.get("node", "?"))[:64], pid if type(pid) is int else -1,
                         conn, queue.Queue(maxsize=self.prefetch))
            link.reader = threading.Thread(target=self._read, args=(link,), daemon=True,
                                           name=f"chief-read-{rank}")
            self.links[rank] = link
            link.reader.start()
            self._joined.notify_all()

    def _expected(self, link: _Link, header: dict[str, Any]) -> Layout:
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
        if type(g) is not int or g < start or (total is not None and g >= total) \
                or (g - start) % self.num_streamers != link.rank:
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

    def _read(self, link: _Link) -> None:
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
                    shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10
                                                                 else "")
                    raise RuntimeFailure(
                        f"{len(missing)} of {self.num_streamers} input streamer(s) did not "
                        f"connect to the chief within {timeout:g} s (rank(s) {shown}); check "
                        f"their task logs, or raise CS2SIM_STREAMER_TIMEOUT.")
                self._joined.wait(min(left, POLL_S))
            if self.bad_hello:
                raise RuntimeFailure(f"the job's tasks disagree on its layout: "
                                     f"{self.bad_hello}; relaunch the job.")

    # sessions ----------------------------------------------------------------------------------
    def open(self, split: str, start: int, plan: Any) -> int:
        """Ask every streamer for `split` from batch `start` on; returns the session id.
        `plan` (the chief's own) says how many rows each batch of the session has."""
        with self._lock:
            self._session += 1
            session = self._session
            self._sessions[session] = (split, plan, start)
        for link in self.links.values():
            link.session = session
            link.last = time.monotonic()  # idle between sessions is not a stall
            _drain(link.q)
            self._send(link, {"type": "open", "session": session, "split": split,
                              "start": start, "n": self.num_streamers})
        return session

    def close_session(self) -> None:
        """Stop the streamers producing (they wait for the next session or the end)."""
        with self._lock:
            self._session += 1
        for link in self.links.values():
            link.session = -1
            _drain(link.q)
            if link.dead is None:
                with contextlib.suppress(OSError):
                    self._send(link, {"type": "close"})

    def _send(self, link: _Link, header: dict[str, Any]) -> None:
        try:
            send_frame(link.sock, header)
        except OSError as e:
            raise RuntimeFailure(f"{link.name} cannot be reached ({e.strerror or e}); the "
                                 "task died: see its log.") from None

    def get(self, link: _Link, g: int, session: int) -> dict[str, np.ndarray]:
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
                        "task's log (the job stops).") from None
                if time.monotonic() - max(link.last, since) > limit:
                    raise RuntimeFailure(
                        f"{link.name} sent nothing for {limit:g} s while batch {g} was due; "
                        "it is stuck (see its log) or raise CS2SIM_STREAMER_TIMEOUT.") from None
        if header.get("type") == "error":
            raise RuntimeFailure(f"{link.name} failed: {header.get('text')}")
        if header.get("g") != g:
            raise RuntimeFailure(f"{link.name} sent batch {header.get('g')} where {g} was "
                                 "expected; the tasks disagree on the input (same params?).")
        return arrays

    # end ---------------------------------------------------------------------------------------
    def end(self, status: int, text: str = "") -> None:
        """Tell every task the chief's outcome (the ended record first, for the tasks that have
        not connected yet; then over each socket), wait briefly for them to leave, close."""
        if self._closing:
            return
        self._closing = True
        write_ended(self.dir, self.info, status, text)
        with contextlib.suppress(OSError):
            (self.dir / ADDR_FILE).unlink()
        with contextlib.suppress(OSError):
            self._sock.close()
        with self._lock:
            socks = [link.sock for link in self.links.values() if link.dead is None]
            socks += self.coordinators
        for s in socks:
            with contextlib.suppress(OSError):
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


def _claimed(claim: dict[str, Any] | None) -> str:
    """`, claiming to be streamer 0 (task 3 on node n1, pid 77)` for a refused peer's hello."""
    if not claim:
        return ""

    def show(key: str) -> str:
        return str(claim.get(key))[:40]

    who = show("type")
    if claim.get("rank") is not None:
        who += f" {show('rank')}"
    return (f", claiming to be {who} of job {show('job')} (task {show('procid')} on node "
            f"{show('node')}, pid {show('pid')})")


def _rows(plan: Any, g: int) -> int:
    """Rows of batch g under the chief's plan (a shard plan asks its shard's plan)."""
    if hasattr(plan, "shard_of"):
        return len(plan.local(plan.shard_of(g)).indices(g))
    return len(plan.indices(g))


def write_ended(directory: Path, info: TaskInfo, status: int, text: str = "") -> None:
    """The chief's ended record: where late streamers and coordinators find its outcome."""
    with contextlib.suppress(OSError):
        atomic_write(directory / ENDED_FILE, json.dumps({
            "job": info.job_id, "status": int(status), "text": text, "at": time.time(),
            "pid": os.getpid(), "node": info.node,
        }) + "\n", mode=0o600)


class ChiefEnded(Exception):
    """The chief of this task's job has ended (its record): status and text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"the chief ended with exit code {status}")
        self.status = status
        self.text = text


def read_ended(directory: Path, job_id: str) -> ChiefEnded | None:
    """This job's chief's ended record, if it has written one (see ENDED_FRESH_S)."""
    raw = rendezvous.read_own(directory / ENDED_FILE)  # ours, bounded, not a symlink
    try:
        record = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    try:
        if str(record["job"]) != str(job_id) or float(record["at"]) < _started() - ENDED_FRESH_S:
            return None
        return ChiefEnded(int(record["status"]), str(record.get("text", "")))
    except (KeyError, TypeError, ValueError):
        return None


def _started() -> float:
    """When this process started (epoch seconds; /proc), else when this module was imported."""
    started = procfs.started_at()
    return started if started is not None else _IMPORTED


_IMPORTED = time.time()


def _prune(parent: Path) -> None:
    """Remove other jobs' rendezvous directories whose chief ended over ENDED_KEEP_S ago."""
    cutoff = time.time() - ENDED_KEEP_S
    with contextlib.suppress(OSError):
        for d in parent.iterdir():
            ended = d / ENDED_FILE
            with contextlib.suppress(OSError):
                if ended.stat().st_mtime < cutoff and not (d / ADDR_FILE).exists():
                    ended.unlink()
                    d.rmdir()


def _drain(q: queue.Queue) -> None:
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


class RemoteStream(DataPosition):
    """The chief's input stream: the same interface as BatchStream, fed by the streamers.

    It takes the local BatchStream's plan (so it knows the batch count and the data position),
    never its data. `start()` opens a session at the current position and waits until every
    streamer has delivered its first batch (the two lines of the PSC Neocortex run transcript,
    docs/sources.md); that wait is
    start-up (`startup_seconds`), later waits are `wait_seconds` (the wafer waiting on input).
    """

    def __init__(self, hub: ChiefHub, local: Any, split: str) -> None:
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

    def _wait_primed(self, link: _Link) -> None:
        limit = time.monotonic() + streamer_timeout()
        while link.q.empty():
            if link.dead is not None:
                raise RuntimeFailure(f"{link.name} died: it {link.dead} before its first "
                                     "batch; see that task's log (the job stops).")
            if time.monotonic() > limit:
                raise RuntimeFailure(f"{link.name} sent no batch within "
                                     f"{streamer_timeout():g} s of the start; see its log.")
            time.sleep(0.005)

    def __next__(self) -> dict[str, np.ndarray]:
        if self._closed:
            raise RuntimeError("RemoteStream is closed")
        if self._exhausted():
            raise StopIteration
        if self._session is None:
            self.start()
        t0 = time.perf_counter()
        link = self.hub.links[(self._g - self._s0) % self.hub.num_streamers]
        batch = self.hub.get(link, self._g, self._session)  # type: ignore[arg-type]
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
        return (f"RemoteStream({self.split}, streamers={self.hub.num_streamers}, "
                f"epoch={epoch}, index={index})")


_ACTIVE: ChiefHub | None = None


def active_hub() -> ChiefHub | None:
    """The chief's hub while a launched chief runs (None otherwise)."""
    return _ACTIVE


def for_streamers(params: dict, split: str, n: int) -> dict:
    """Params as the chief and its n streamers build the input: a data_dir LIST is sharded
    across the n streamers in order (runtime/data/shards.py, as across n input workers)."""
    from cs2sim.runtime.data import SECTION, input_config

    cfg = input_config(params, split)
    dirs = cfg.get("data_dir")
    if not isinstance(dirs, (list, tuple)) or len(dirs) < 2:
        return params
    return {**params, SECTION[split]: {**cfg, "num_workers": n}}


def streamed_input(params: dict, split: str, model_name: str, seed: int) -> Any:
    """The trainer's input stream: a RemoteStream when this process is a chief with streamers,
    else the in-process BatchStream (runtime/data)."""
    from cs2sim.runtime.data import build_input

    hub = _ACTIVE
    if hub is None or hub.num_streamers == 0:
        return build_input(params, split, model_name, seed)
    local = build_input(for_streamers(params, split, hub.num_streamers), split, model_name, seed)
    remote = RemoteStream(hub, local, split)
    local.close()  # only its plan is used; the streamers make the batches
    return remote


def exit_status(exc: BaseException | None) -> int:
    """The exit code run.py gives for `exc` (cli.main's mapping)."""
    if exc is None:
        return 0
    if isinstance(exc, CsError):
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


@contextlib.contextmanager
def chief_task(info: TaskInfo, model_dir: Path, prefetch: int = 4) -> Iterator[ChiefHub | None]:
    """While the chief runs: its hub is active; at the end every task hears its outcome."""
    global _ACTIVE
    if info.role is not Role.CHIEF or not (info.num_streamers or info.num_coordinators):
        yield None
        return
    hub = ChiefHub(info, model_dir, prefetch=prefetch)
    log.debug(f"Chief of job {info.job_id} listening on port {hub.port} for "
              f"{info.num_streamers} streamer(s) and {info.num_coordinators} coordinator(s)")
    _ACTIVE = hub
    try:
        yield hub
    except BaseException as e:
        hub.end(exit_status(e), f"{type(e).__name__}: {e}")
        raise
    else:
        hub.end(0)
    finally:
        _ACTIVE = None


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
        batch = data.batch(plan.indices(g))
        if self.extra_work:
            first = next(iter(batch.values()))  # (B, ...)
            for row in first:
                sample = row.tobytes()  # >= 2 KiB for every model: hashlib drops the GIL
                for _ in range(self.extra_work):
                    hashlib.sha256(sample).digest()
        return batch

    def batches(self, first: int, step: int, stop: Callable[[], bool]
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


class StreamerConnection:
    """A streamer's or coordinator's link to its chief, found through the rendezvous file and
    opened with the handshake of runtime/job/channel.py (the chief proves the secret too)."""

    def __init__(self, info: TaskInfo, model_dir: Path, hello: dict[str, Any],
                 secret: bytes | None = None) -> None:
        self.info = info
        self.dir = d = rendezvous.job_dir(model_dir, info.job_id)
        claim = {"job": info.job_id, "procid": info.procid, "node": info.node,
                 "pid": os.getpid(), **hello}
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
                raise RuntimeFailure(f"{info.name} found no chief at {d / ADDR_FILE} within "
                                     f"{rendezvous_timeout():g} s; is task 0 running?")
            time.sleep(POLL_S)

    def ended(self) -> ChiefEnded | None:
        """The chief's ended record, once the connection closed without an `end` frame."""
        return read_ended(self.dir, self.info.job_id)


def _handshake(sock: socket.socket, secret: bytes, claim: dict[str, Any]) -> socket.socket:
    """Answer the chief's challenge and check its proof; the connected socket."""
    sock.settimeout(HELLO_TIMEOUT_S)
    challenge, _ = recv_frame(sock)
    chief_nonce = challenge.get("nonce")
    if challenge.get("type") != "challenge" or not isinstance(chief_nonce, str):
        raise FrameError("no challenge")
    task_nonce = channel.nonce()
    hello = {**claim, "nonce": task_nonce}
    hello["proof"] = channel.hello_proof(secret, chief_nonce, task_nonce,
                                         channel.claim_text(hello))
    send_frame(sock, hello)
    welcome, _ = recv_frame(sock)
    expected = channel.welcome_proof(secret, task_nonce, chief_nonce)
    if welcome.get("type") != "welcome" or not channel.proof_ok(welcome.get("proof"), expected):
        raise RuntimeFailure("the process listening at the chief's address did not prove it "
                             "holds the job's secret; the job's rendezvous files were replaced "
                             "or the launcher's secret differs between tasks.")
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
        _tune(sock)
        return sock
    return None


class _Control:
    """The chief's orders, read by a thread while the streamer produces."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.cv = threading.Condition()
        self.request: dict[str, Any] | None = None  # the open session
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
                        self.request = header
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


def streamer_loop(conn: socket.socket, rank: int, producers: Callable[[str], ShardProducer],
                  ended: Callable[[], ChiefEnded | None] = lambda: None) -> int:
    """Serve the chief's sessions until its end; returns this task's exit code. `ended` reads
    the chief's ended record when the connection closes without an `end` frame."""
    control = _Control(conn)
    cache: dict[str, ShardProducer] = {}
    while True:
        with control.cv:
            while control.request is None and not control.done():
                control.cv.wait(POLL_S)
            if control.done():
                break
            req = control.request
        session, split = req["session"], req["split"]
        try:
            if split not in cache:
                cache[split] = producers(split)
            prod = cache[split]
            for g, batch in prod.batches(int(req["start"]) + rank, int(req["n"]),
                                         lambda req=req: control.request is not req):
                send_frame(conn, {"type": "batch", "session": session, "g": g}, batch)
        except OSError:
            control.thread.join(5.0)  # the chief hung up: did it say goodbye first?
            break
        except Exception as e:  # noqa: BLE001 - the chief reports it with this task's name
            with contextlib.suppress(OSError):
                send_frame(conn, {"type": "error", "session": session,
                                  "text": f"{type(e).__name__}: {e}"})
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
    log.error("the chief closed the connection without ending the job (it failed or was "
              "stopped); this streamer stops too.")
    return 1


def serve_task(info: TaskInfo, model_name: str, params: dict, model_dir: Path) -> int:
    """Run a STREAMER or COORDINATOR task to the chief's end; returns its exit code."""
    if info.role is Role.COORDINATOR:
        return _coordinate(info, model_dir)
    from cs2sim.runtime.data import build_input
    from cs2sim.runtime.training.runconfig import LoopConfig

    seed = LoopConfig.from_params(params).seed
    threads = producing_threads(info.cpus_per_task)
    work = extra_work_rounds()

    def producers(split: str) -> ShardProducer:
        stream = build_input(for_streamers(params, split, info.num_streamers), split,
                             model_name, seed)
        return ShardProducer(stream, threads, work)

    log.info(f"Input {info.name} of job {info.job_id}: streaming batches "
             f"{info.streamer_rank}, {info.streamer_rank}+{info.num_streamers}, ... to the chief")
    try:
        conn = StreamerConnection(info, model_dir,
                                  {"type": "streamer", "rank": info.streamer_rank})
    except ChiefEnded as e:
        log.info(f"The chief ended (exit code {e.status}) before this streamer connected; "
                 "nothing to stream.")
        return 0
    return streamer_loop(conn.sock, int(info.streamer_rank or 0), producers, conn.ended)


def _coordinate(info: TaskInfo, model_dir: Path) -> int:
    """A coordinator: no work of its own here; it ends with the chief's outcome."""
    log.info(f"{info.name} of job {info.job_id}: waiting for the chief's end")
    try:
        conn = StreamerConnection(info, model_dir, {"type": "coordinator"})
    except ChiefEnded as e:
        log.info(f"The chief ended with exit code {e.status} before this coordinator connected")
        return e.status
    control = _Control(conn.sock)
    control.thread.join()
    if control.ended is None:
        late = conn.ended()
        if late is not None:
            log.info(f"The chief ended with exit code {late.status}")
            return late.status
        log.error("the chief closed the connection without ending the job; this coordinator "
                  "stops too.")
        return 1
    status = int(control.ended.get("status", 1))
    log.info(f"The chief ended with exit code {status}")
    return status


def current_task() -> TaskInfo:
    """This process's TaskInfo (runtime/job/roles.py)."""
    return task_info()
