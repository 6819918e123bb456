"""The client side of the cluster server's protocol (`run.py CSX` and `csctl` use it).

`connect()` reaches the server of $CS2_HOME on its Unix socket, or one at `--mgmt_address
host:port` over TLS (tls.py), starting a local one on demand with the command its caller gives
(a single-machine install has no admin to start it). Errors are ServerGone / RequestFailed
with one sentence each; nothing here prints.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cs2sim.system import wire
from cs2sim.system.appliance.address import MAX_REQUEST, cluster_identity, socket_path
from cs2sim.system.appliance.errors import RequestFailed, ServerGone
from cs2sim.system.errors import CsError

__all__ = ["Connection", "ServerGone", "RequestFailed", "connect", "MAX_REPLY", "START_WAIT_S"]

MAX_REPLY = 96 * 1024 * 1024  # a log export's zip travels in one reply
REPLY_S = 60.0
START_WAIT_S = 15.0
# A watch has no deadline of its own: the server sends a heartbeat every period it announces
# (CS2_HEARTBEAT_SECONDS, read by the server), and MISSED_HEARTBEATS missed in a row mean the
# server is frozen (stopped or overloaded) - said once, then the watch goes on waiting, as a
# Kubernetes node is only "NotReady" after missed heartbeats and Slurm marks a node DOWN only
# after SlurmdTimeout; only a closed connection means the server is gone.
MISSED_HEARTBEATS = 6
FRAME_S = 60.0  # once a frame has begun, the rest of it must arrive within this


class Connection:
    """One connection to the server."""

    def __init__(self, sock: socket.socket, where: str, *, local: bool = True) -> None:
        self.sock = sock
        self.where = where
        self.local = local  # on this host's socket (the server's pid means something here)

    def close(self) -> None:
        self.sock.close()

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        """One request, one reply; RequestFailed with the server's sentence on a refusal."""
        try:
            wire.send_obj(self.sock, {"op": op, "args": args}, MAX_REQUEST)
            # a request with its own time limit (log_export's --timeout) is waited for that long
            wait = REPLY_S + max(0, int(args.get("timeout") or 0))
            reply = wire.recv_obj(self.sock, MAX_REPLY, time.monotonic() + wait)
        except (wire.Closed, wire.FrameError, OSError) as e:
            raise ServerGone(
                f"the cluster server at {self.where} closed the connection "
                f"({type(e).__name__}); check it with `cs-cluster-server status` "
                "and retry."
            ) from None
        if not reply.get("ok"):
            raise RequestFailed(
                str(reply.get("error", "the cluster server refused")), int(reply.get("code", 1))
            )
        return reply

    def watch(
        self,
        name: str,
        *,
        attach: bool = False,
        offset: int = 0,
    ) -> Iterator[dict[str, Any]]:
        """The job's events until its end (heartbeats included); ServerGone if the connection
        closes first. Two events are this side's own: `silent` once the server has missed
        MISSED_HEARTBEATS heartbeats (with `seconds`, `period`, `stopped`: whether its process
        is stopped, when it is local), and `answered` when it speaks again after that."""
        reply = self.call("watch", name=name, attach=attach, offset=offset)
        period = float(reply.get("heartbeat") or 0.0)
        pid = int(reply.get("pid") or 0) if self.local else 0
        # a server without heartbeats (an older one) is waited for without a limit
        patience = period * MISSED_HEARTBEATS if period > 0 else None
        heard = time.monotonic()
        silent = False
        while True:
            if not self._readable(patience):
                if not silent:
                    silent = True
                    yield {
                        "event": "silent",
                        "seconds": time.monotonic() - heard,
                        "period": period,
                        "missed": MISSED_HEARTBEATS,
                        "pid": pid,
                        "stopped": _stopped(pid),
                    }
                continue
            try:
                event = wire.recv_obj(self.sock, MAX_REPLY, time.monotonic() + FRAME_S)
            except (wire.Closed, wire.FrameError, OSError):
                raise ServerGone(
                    f"the cluster management server closed the connection while {name} "
                    "was being watched (it exited or was killed), so its running jobs "
                    "ended with it; start it again (`cs-cluster-server start`, or just "
                    "rerun: the client starts one) and resubmit."
                ) from None
            if silent:
                silent = False
                yield {"event": "answered", "seconds": time.monotonic() - heard}
            heard = time.monotonic()
            yield event
            if event.get("event") == "end":
                return

    def _readable(self, patience: float | None) -> bool:
        """Whether a frame begins within `patience` seconds (None: wait as long as it takes)."""
        pending = getattr(self.sock, "pending", None)  # TLS may hold decrypted bytes already
        if pending is not None and pending() > 0:
            return True
        return bool(select.select([self.sock], [], [], patience)[0])


def _stopped(pid: int) -> bool:
    """Whether a local process is stopped (SIGSTOP, a debugger): its state in /proc is T or t."""
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] in ("T", "t")


def _unix(home: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with wire.unix_address(socket_path(home)) as address:
            sock.connect(address)
    except OSError:
        sock.close()
        raise
    return sock


def _may_start(home: Path) -> bool:
    """Could this user start a server for `home`? (Its directory, or home itself, writable.)"""
    wsjob = Path(home) / "wsjob"
    return os.access(wsjob if wsjob.is_dir() else home, os.W_OK) if Path(home).exists() else True


def _unreachable(home: Path, e: OSError) -> str:
    """Why a user cannot use the server of someone else's home, and what they can do."""
    try:
        import pwd

        owner = pwd.getpwuid(Path(home).stat().st_uid).pw_name
    except (OSError, KeyError):
        owner = "its owner"
    if isinstance(e, PermissionError):
        return (
            f"you may not reach the cluster server of {home} ({e.strerror}); ask {owner} to "
            "share it with your group (`cs-store share GROUP`), or set CS2_HOME to a home of "
            "your own."
        )
    return (
        f"no cluster server runs for {home}, and only {owner} may start one there; ask them "
        "to (`cs-cluster-server start`), or set CS2_HOME to a home of your own."
    )


def connect(
    home: Path,
    *,
    start: Sequence[str] | None = None,
    mgmt_address: str | None = None,
    credentials_path: str | None = None,
) -> Connection:
    """A connection to the cluster server (module docstring)."""
    if mgmt_address:
        from cs2sim.system.appliance.tls import connect_tls

        return Connection(
            connect_tls(home, mgmt_address, credentials_path), mgmt_address, local=False
        )
    where = str(socket_path(home))
    try:
        conn = Connection(_unix(home), where)
    except OSError as e:
        if isinstance(e, PermissionError) or (start is not None and not _may_start(home)):
            raise ServerGone(_unreachable(home, e)) from None
        if start is None:
            raise ServerGone(
                f"no cluster server runs for {home} ({e.strerror}); start one "
                "with `cs-cluster-server start`."
            ) from None
    else:
        if start is not None:  # a caller that would start one: it must describe our cluster
            _same_cluster(conn, home)
        return conn
    subprocess.run(
        list(start),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env=dict(os.environ),
    )
    deadline = time.monotonic() + START_WAIT_S
    while True:
        try:
            return Connection(_unix(home), where)
        except OSError as e:
            if time.monotonic() > deadline:
                raise ServerGone(
                    f"the cluster server for {home} did not start within "
                    f"{START_WAIT_S:.0f} s ({e.strerror}); see "
                    f"{Path(home) / 'wsjob' / 'server.log'}."
                ) from None
            time.sleep(0.05)


def _same_cluster(conn: Connection, home: Path) -> None:
    """Refuse an auto-started server that serves another cluster file than this caller's: it
    keeps the environment of whoever started it (CS2_CLUSTER), which this caller may not
    share. A server started by hand (a site's) is the admin's choice and is not second-guessed."""
    try:
        info = conn.call("ping")
    except CsError:
        conn.close()
        raise
    theirs = info.get("cluster")
    if not info.get("auto") or not isinstance(theirs, list) or len(theirs) != 2:
        return
    mine = cluster_identity()
    if list(mine) == theirs:
        return
    conn.close()
    how = (
        f"{theirs[0]} as it was when the server started (the file changed since)"
        if theirs[0] == mine[0]
        else f"{theirs[0] or 'an unreadable file'}, yours is {mine[0] or 'unreadable'}"
    )
    raise RequestFailed(
        f"the cluster server for {home} (pid {info.get('pid')}) was started by an earlier "
        f"command with another cluster description ({how}; CS2_CLUSTER); stop it with "
        "`cs-cluster-server stop` (the next run starts one with yours) and retry.",
        1,
    )
