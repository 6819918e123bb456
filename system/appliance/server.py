"""The cluster management server: wsjobs over system/wire.py's framing, on a Unix socket (and
optionally TCP with TLS, see tls.py).

One process per $CS2_HOME: `<home>/wsjob/server.sock` (a lock file keeps a second one from
starting), its book `<home>/wsjob/server.db`, its log `<home>/wsjob/server.log`. A connection
is served by a thread; the caller is who the kernel says (SO_PEERCRED) or whom a TLS token
names. Limits per caller: MAX_CONNS_PER_UID connections (MAX_CONNS in all), MAX_REQUEST bytes a
request, REQUEST_S to send one, IDLE_S between requests; a violation closes the connection with
one line in the server's log, never a traceback.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import logging
import os
import pwd
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs2sim.system import knobs, wire
from cs2sim.system.appliance import ops
from cs2sim.system.appliance.address import (
    MAX_REQUEST,
    cluster_identity,
    server_dir,
    socket_path,
)
from cs2sim.system.appliance.asuser import (
    Account,
    AsUserError,
    TimedOut,
    TooLarge,
    call_as,
)
from cs2sim.system.appliance.export import build_zip, export_request
from cs2sim.system.appliance.jobs import (
    ENDED,
    KINDS,
    PRIORITIES,
    JobBook,
    WsJob,
    label_problem,
    new_id,
)
from cs2sim.system.appliance.replicas import COMPILE_FROM_ENV, COUNTS, SERVERS_ENV, plan_for
from cs2sim.system.appliance.runs import Dispatcher, Launchers, make_log_dir
from cs2sim.system.appliance.submission import check_spec, compile_env
from cs2sim.system.appliance.watch import stream
from cs2sim.system.errors import CsError, PermissionDenied, UsageError
from cs2sim.system.state import ExecMode
from cs2sim.system.store import Store

__all__ = ["Server", "server_dir", "socket_path", "SERVER_VERSION", "MAX_REQUEST"]

SERVER_VERSION = "1.9.1-cs2sim"
# a user's every queued or running `run.py CSX` holds one watch: a site's user may have tens
MAX_CONNS, MAX_CONNS_PER_UID = 512, 64
REQUEST_S, IDLE_S = 10.0, 300.0
MAX_EXPORT = 64 * 1024 * 1024  # a log export's whole archive (logs and compile) is refused past it
EXPORT_S = 3600.0  # csctl log-export's --timeout default, as the real tool's
HEARTBEAT_DEFAULT_S = 5.0  # CS2_HEARTBEAT_SECONDS unset (system/knobs.py)
IDLE_EXIT_DEFAULT_S = 3600.0  # CS2_SERVER_IDLE_SECONDS unset: an auto-started server's idle life
HISTORY_S = 7 * 24 * 3600  # `csctl get jobs -a`: the past week, as the real tool
log = logging.getLogger("cs2sim.appliance")


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid{uid}"


# who is at the other end of a new connection (and the socket to go on with), or None: refused
Identify = Callable[[socket.socket], "tuple[ops.Caller, socket.socket] | None"]


class Refused(Exception):
    """A request the server answers with an error (its text is the one sentence shown)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Server:
    """The server: call `serve_forever()`; `stop()` from another thread ends it."""

    def __init__(self, home: Path, launchers: Launchers) -> None:
        self.home = Path(home)
        self.dir = server_dir(self.home)
        self._lock = open(self.dir / "server.lock", "a+")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"a cluster server already runs for {self.home}; use it, or stop "
                "it with `cs-cluster-server stop`."
            ) from None
        with contextlib.suppress(FileNotFoundError):  # who ran what is not every member's
            os.chmod(self.dir / "server.log", 0o600)
        self.store = Store.open()
        self.book = JobBook(self.dir / "server.db")
        self.epoch = self.book.next_epoch()
        self.started = time.time()
        self.uid = os.getuid()
        beat = knobs.number("CS2_HEARTBEAT_SECONDS", HEARTBEAT_DEFAULT_S)
        self.heartbeat_s = beat if beat > 0 else HEARTBEAT_DEFAULT_S
        self.idle_exit_s = 0.0  # > 0: an auto-started server, which exits when idle this long
        self._busy_at = self._idle_check = time.monotonic()
        self.cluster = cluster_identity()  # the cluster file it serves (ping says which)
        for job in self.book.recover(self.epoch, time.time()):
            log.info("%s: %s", job.id, job.reason)
        self.changed = threading.Condition()
        self.generation = 0
        self.dispatcher = Dispatcher(
            self.home, self.book, self.store, launchers, self.epoch, self._changed
        )
        self.conns: dict[int, int] = {}  # uid -> open connections
        self.conns_lock = threading.Lock()
        self.listeners: list[tuple[socket.socket, Identify]] = []
        self._stop = threading.Event()
        # stop() writes a byte here so the accept loop's select returns at once (stop runs in
        # a signal handler too: one os.write, nothing that takes a lock)
        self._wake_r, self._wake_w = os.pipe()
        self.tokens: Any = None  # tls.TokenBook when TCP is on
        path = socket_path(self.home)
        path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with wire.unix_address(path) as address:
            sock.bind(address)
        os.chmod(path, 0o666)  # any local user may connect; the kernel says who they are
        sock.listen(64)
        self.listeners.append((sock, self._unix_caller))
        (self.dir / "server.pid").write_text(f"{os.getpid()}\n")

    def add_tcp(self, sock: socket.socket, identify: Identify, tokens: Any) -> None:
        """Serve TCP too (tls.py wraps and identifies its connections)."""
        self.listeners.append((sock, identify))
        self.tokens = tokens

    # --- who is calling -----------------------------------------------------------------------
    def caller_for(self, uid: int, via: str) -> ops.Caller:
        name = _user_name(uid)
        return ops.Caller(uid, name, uid == self.uid or uid == 0 or self._store_admin(name), via)

    def _store_admin(self, name: str) -> bool:
        from cs2sim.system.users import Role, list_users

        try:
            return any(n == name and role is Role.ADMIN for n, role, _ in list_users(self.store))
        except CsError:
            return False

    def _unix_caller(self, conn: socket.socket) -> tuple[ops.Caller, socket.socket] | None:
        return self.caller_for(wire.peer_cred(conn).uid, "unix"), conn

    # --- serving ------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self.dispatcher.thread.start()
        socks = {s.fileno(): (s, ident) for s, ident in self.listeners}
        while not self._stop.is_set():
            ready, _, _ = select.select([*socks, self._wake_r], [], [], 0.5)
            if not ready and self._idle_out():
                break
            for fd in ready:
                if fd == self._wake_r:
                    continue
                sock, ident = socks[fd]
                try:
                    conn, _ = sock.accept()
                except OSError:
                    continue
                threading.Thread(target=self._serve_conn, args=(conn, ident), daemon=True).start()
        for s, _ in self.listeners:
            s.close()
        socket_path(self.home).unlink(missing_ok=True)
        self.dispatcher.stop()
        (self.dir / "server.pid").unlink(missing_ok=True)

    def _idle_out(self) -> bool:
        """Whether an auto-started server has had no connection and no job queued or running
        for `idle_exit_s` (then it exits: the next client starts one with its own environment)."""
        if self.idle_exit_s <= 0:
            return False
        now = time.monotonic()
        if now < self._idle_check:
            return False
        self._idle_check = now + min(5.0, self.idle_exit_s / 4)
        with self.conns_lock:
            busy = sum(self.conns.values()) > 0
        if busy or self.dispatcher.launches or self.book.all(active_only=True, with_spec=False):
            self._busy_at = now
            return False
        if now - self._busy_at < self.idle_exit_s:
            return False
        log.info(
            "no connection and no job for %.0f s: this auto-started server exits "
            "(CS2_SERVER_IDLE_SECONDS)",
            now - self._busy_at,
        )
        return True

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _serve_conn(self, conn: socket.socket, identify: Identify) -> None:
        caller = None
        try:
            known = identify(conn)
            if known is None:
                return  # identify logged why
            caller, conn = known  # a TCP connection continues inside its TLS session
            if not self._admit(caller.uid):
                log.info(
                    "refused a connection of %s: more than %d open", caller.name, MAX_CONNS_PER_UID
                )
                wire.send_obj(
                    conn,
                    {
                        "ok": False,
                        "error": "too many connections from you to "
                        "the cluster server; close some and retry.",
                    },
                )
                return
            try:
                self._requests(conn, caller)
            finally:
                self._leave(caller.uid)
        except (wire.Closed, OSError) as e:  # a client that hung up: routine, not news
            log.debug(
                "connection of %s closed: %s", caller.name if caller else "?", type(e).__name__
            )
        except wire.FrameError as e:
            log.info("closed a connection of %s: it sent %s", caller.name if caller else "?", e)
        except Exception as e:  # noqa: BLE001 - one line in the log, never a traceback
            log.error(
                "a connection of %s failed: %s: %s",
                caller.name if caller else "?",
                type(e).__name__,
                e,
            )
        finally:
            conn.close()

    def _admit(self, uid: int) -> bool:
        with self.conns_lock:
            if self.conns.get(uid, 0) >= MAX_CONNS_PER_UID or sum(self.conns.values()) >= MAX_CONNS:
                return False
            self.conns[uid] = self.conns.get(uid, 0) + 1
            return True

    def _leave(self, uid: int) -> None:
        with self.conns_lock:
            self.conns[uid] -= 1

    def _requests(self, conn: socket.socket, caller: ops.Caller) -> None:
        while True:
            buffered = isinstance(conn, ssl.SSLSocket) and conn.pending() > 0
            if not buffered and not select.select([conn], [], [], IDLE_S)[0]:
                return  # idle too long
            req = wire.recv_obj(conn, MAX_REQUEST, time.monotonic() + REQUEST_S)
            op = ops.OPS.get(str(req.get("op")))
            if op is None:
                wire.send_obj(
                    conn,
                    {
                        "ok": False,
                        "error": f"unknown operation {req.get('op')!r}"
                        f"; known: {', '.join(sorted(ops.OPS))}.",
                    },
                )
                continue
            try:
                args = ops.check_args(op, req.get("args", {}))
                self._allow(op, caller, args)
                if op.streams:
                    getattr(self, op.handler)(conn, caller, args)
                    return
                reply = getattr(self, op.handler)(caller, args)
            except ops.ArgError as e:
                reply = {"ok": False, "error": f"bad request: {e}."}
            except Refused as e:
                reply = {"ok": False, "error": str(e), "code": e.code}
            except CsError as e:  # worded for the appliance's user (no --cs_ip, no python-ws)
                reply = {"ok": False, "error": ops.csx_wording(str(e)), "code": e.exit_code}
            except (ValueError, KeyError, TypeError) as e:  # a value the schema let through
                reply = {"ok": False, "error": f"bad request: {type(e).__name__} {e}.", "code": 2}
            except Exception as e:  # noqa: BLE001 - one line in the log, never a traceback
                log.error("%s failed for %s: %s: %s", op.name, caller.name, type(e).__name__, e)
                reply = {
                    "ok": False,
                    "error": f"the cluster server failed to {op.name} "
                    f"({type(e).__name__}); see its log {self.dir / 'server.log'}.",
                }
            wire.send_obj(conn, {"ok": True, **reply} if "ok" not in reply else reply)
            if reply.get("stopping") is True:
                self.stop()
                return

    def _allow(self, op: ops.Op, caller: ops.Caller, args: dict[str, Any]) -> None:
        if op.who == "anyone":
            return
        if op.who == "runner":
            if caller.uid != self.uid and self.uid != 0:
                raise Refused(
                    f"the cluster server runs as {_user_name(self.uid)} and cannot run "
                    f"jobs for {caller.name}; start your own (cs-cluster-server start "
                    "with your own CS2_HOME) or ask the admin to run it as root.",
                    77,
                )
            return
        if op.who == "admin":
            if not caller.admin:
                self._deny(caller, op.name, "needs an admin of the store")
            return
        job = self._job(args.get("name", ""))
        if job.uid != caller.uid and not caller.admin:
            self._deny(caller, f"{op.name} {job.id}", f"{job.id} belongs to {job.user}")

    def _deny(self, caller: ops.Caller, what: str, why: str) -> None:
        from cs2sim.system import audit

        message = (
            f"Permission denied: {why}; only its owner or an admin of the store may do "
            f"that (you are {caller.name})."
        )
        try:
            with self.store.transaction() as db:
                audit.record(
                    db, user=caller.name, command=f"csctl {what}", outcome="denied", detail=message
                )
        except CsError:
            log.info("could not audit a denied %s by %s", what, caller.name)
        raise PermissionDenied(message)

    def _job(self, name: str) -> WsJob:
        job = self.book.get(name)
        if job is None:
            raise Refused(f"no job {name!r}; list jobs with `csctl get jobs -a`.", 1)
        return job

    def _changed(self) -> None:
        with self.changed:
            self.generation += 1
            self.changed.notify_all()

    # --- operations ---------------------------------------------------------------------------
    def op_ping(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "version": SERVER_VERSION,
            "protocol": ops.PROTOCOL,
            "pid": os.getpid(),
            "user": caller.name,
            "admin": caller.admin,
            "started": self.started,
            "cluster": list(self.cluster),
            "auto": self.idle_exit_s > 0,
        }

    def op_submit(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        kind, priority = args.get("kind", ""), args.get("priority", "p2")
        if kind not in KINDS or priority not in PRIORITIES:
            raise Refused(f"kind must be one of {KINDS} and priority one of {PRIORITIES}.", 2)
        spec = dict(args.get("spec", {}))
        # its form here, and every path it names looked at AS THE CALLER (submission.py)
        check_spec(spec, Account.of(caller.uid))
        spec.setdefault("args", [])
        num_csx = int(args.get("num_csx", 0)) if kind == "execute" else 0
        mode = ExecMode(args.get("mode", ExecMode.WEIGHT_STREAMING.value))
        spec["exec_mode"] = mode.value
        if kind == "execute":
            if num_csx < 1:
                raise Refused("num_csx must be 1 or more.", 2)
            # JobRefused (69) before anything is reserved: the systems, then the nodes
            self.dispatcher.refusal(mode, num_csx)
            plan = plan_for(num_csx, spec, self.store)
            spec["num_wgt_servers"] = plan.wgt_servers  # what it holds (the unset ones chosen)
            spec["num_act_servers"] = plan.act_servers // plan.num_csx
            # the server decides the launch's shape and what its tasks are told, not the client
            spec["shape"] = plan.shape()
            told = {
                k: v
                for k, v in dict(spec.get("env") or {}).items()
                if k not in (SERVERS_ENV, COMPILE_FROM_ENV)
            }
            spec["env"] = {**told, **plan.env(), **compile_env(spec)}
        labels = {str(k): str(v) for k, v in args.get("labels", {}).items()}
        job = WsJob(
            id=new_id(),
            kind=kind,
            user=caller.name,
            uid=caller.uid,
            priority=priority,
            created=time.time(),
            labels=labels,
            num_csx=num_csx,
            spec=spec,
            epoch=self.epoch,
            compile_hash=str(spec.get("compile_hash", ""))[:80],
        )
        make_log_dir(self.home, job)
        self.book.add(job)
        self.dispatcher.wake()
        self._changed()
        return {"job": job.public(self.home)}

    def op_check(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        """Could an execute job of num_csx systems in this mode ever run? (JobRefused if not)."""
        num_csx = max(1, int(args.get("num_csx", 1)))
        self.dispatcher.refusal(ExecMode(args.get("mode", "WEIGHT_STREAMING")), num_csx)
        plan_for(num_csx, {k: args.get(k) for k in COUNTS}, self.store)
        return {}

    def op_get_jobs(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        jobs = self.book.all(
            active_only=not args.get("all"),
            since=time.time() - HISTORY_S if args.get("all") else None,
            with_spec=False,
        )
        if args.get("mine"):
            jobs = [j for j in jobs if j.uid == caller.uid]
        want = args.get("labels") or {}
        jobs = [j for j in jobs if all(j.labels.get(k) == v for k, v in want.items())]
        limit = int(args.get("limit", 5000))
        jobs.sort(key=lambda j: j.created)
        if limit > 0:
            jobs = jobs[-limit:]
        return {
            "jobs": [j.public(self.home) for j in jobs],
            "now": time.time(),
            "notes": self.dispatcher.queue_notes,
        }

    def op_get_job(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        job = self._job(args["name"])
        return {"job": job.public(self.home), "note": self.dispatcher.queue_notes.get(job.id, "")}

    def op_cancel(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        job = self._job(args["name"])
        if job.phase in ENDED:
            raise Refused(
                f"{job.id} has already ended ({job.phase}); there is nothing to cancel.", 1
            )
        reason = args.get("reason") or f"cancelled by {caller.name} (csctl cancel job)"
        self.dispatcher.stop_job(job, "CANCELLED", reason)
        return {"name": job.id}

    def op_label(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        job = self._job(args["name"])
        for k, v in args.get("set", {}).items():
            problem = label_problem(str(k), str(v))
            if problem:
                raise Refused(problem, 2)
            job.labels[str(k)] = str(v)
        for k in args.get("remove", []):
            job.labels.pop(str(k), None)
        self.book.set_labels(job.id, job.labels)
        return {"name": job.id}

    def op_log_export(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        """The job's logs (and compile), zipped by a child running as the job's owner
        (export.py): the owner or an admin gets at most what the owner may read, one cap for
        the whole archive."""
        job = self._job(args["name"])
        req = export_request(self.home, job, args, MAX_EXPORT)
        timeout = float(args.get("timeout") or EXPORT_S)
        try:
            data = call_as(
                Account.of(job.uid), lambda: build_zip(req), limit=MAX_EXPORT, timeout=timeout
            )
        except TooLarge:
            raise Refused(
                f"{job.id}'s export passed the cap of {MAX_EXPORT >> 20} MiB for one archive; "
                "ask for less (--num-lines N, --tasks, or without -c).",
                1,
            ) from None
        except TimedOut:
            raise Refused(
                f"Job timed out after {timeout:g} seconds; retry with a larger --timeout, or "
                "ask for less (--num-lines N, --tasks).",
                1,
            ) from None
        except AsUserError as e:
            raise Refused(f"{job.id}'s logs could not be exported: {e}.", e.exit_code) from None
        return {"zip": base64.b64encode(data).decode(), "base": req.base}

    def op_cluster(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        from cs2sim.system.appliance.facts import cluster_facts

        names = {
            j.sched_job: j.id
            for j in self.book.all(active_only=True, with_spec=False)
            if j.sched_job
        }
        return cluster_facts(self.store, str(args.get("what", "cluster")), SERVER_VERSION, names)

    def op_token(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        if self.tokens is None:
            raise Refused(
                "this cluster server does not listen on TCP; start it with "
                "--tcp HOST:PORT to use --mgmt_address.",
                1,
            )
        if caller.via != "unix":
            raise Refused("a token is issued on the local socket only.", 77)
        return {"token": self.tokens.issue(caller.uid)}

    def op_shutdown(self, caller: ops.Caller, args: dict[str, Any]) -> dict[str, Any]:
        # stopped by _requests once this reply is sent: stopping here would race the main loop's
        # exit against the reply, and the admin would read "no cluster server runs"
        return {"stopping": True}

    def op_watch(self, conn: socket.socket, caller: ops.Caller, args: dict[str, Any]) -> None:
        """Stream a job: its phase changes and its log lines until it ends. With `attach` the
        connection is the job's client: when it goes away before the end the job is
        cancelled (a killed `run.py CSX` leaves no job running)."""
        job = self._job(args["name"])
        try:
            stream(self, conn, job, args)
        except (OSError, wire.Closed):
            job = self._job(job.id)
            if args.get("attach") and job.phase not in ENDED:
                self._client_gone(job)
            raise

    def _client_gone(self, job: WsJob) -> None:
        log.info("%s: its client went away; cancelling it", job.id)
        self.dispatcher.stop_job(
            job, "CANCELLED", "its client (run.py CSX) went away before the job ended"
        )
