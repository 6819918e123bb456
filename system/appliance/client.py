"""The client side of the cluster server's protocol (`run.py CSX` and `csctl` use it).

`connect()` reaches the server of $CS2_HOME on its Unix socket, or one at `--mgmt_address
host:port` over TLS (tls.py), starting a local one on demand with the command its caller gives
(a single-machine install has no admin to start it). Errors are ServerGone / RequestFailed
with one sentence each; nothing here prints.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cs2sim.system import wire
from cs2sim.system.appliance.address import MAX_REQUEST, socket_path
from cs2sim.system.appliance.errors import RequestFailed, ServerGone

__all__ = ["Connection", "ServerGone", "RequestFailed", "connect", "MAX_REPLY", "START_WAIT_S"]

MAX_REPLY = 96 * 1024 * 1024  # a log export's zip travels in one reply
REPLY_S = 60.0
START_WAIT_S = 15.0
EVENT_S = 30.0  # a watch with no event for this long: the server is gone (it sends every phase)


class Connection:
    """One connection to the server."""

    def __init__(self, sock: socket.socket, where: str) -> None:
        self.sock = sock
        self.where = where

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
        """The job's events until its end; ServerGone if the server dies first."""
        self.call("watch", name=name, attach=attach, offset=offset)
        while True:
            try:
                event = wire.recv_obj(self.sock, MAX_REPLY, None)
            except (wire.Closed, wire.FrameError, OSError):
                raise ServerGone(
                    f"the cluster management server stopped while {name} was "
                    "being watched; its jobs were stopped with it. Start it again "
                    "(`cs-cluster-server start`, or just rerun: the client starts "
                    "one) and resubmit."
                ) from None
            yield event
            if event.get("event") == "end":
                return


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

        return Connection(connect_tls(home, mgmt_address, credentials_path), mgmt_address)
    where = str(socket_path(home))
    try:
        return Connection(_unix(home), where)
    except OSError as e:
        if isinstance(e, PermissionError) or (start is not None and not _may_start(home)):
            raise ServerGone(_unreachable(home, e)) from None
        if start is None:
            raise ServerGone(
                f"no cluster server runs for {home} ({e.strerror}); start one "
                "with `cs-cluster-server start`."
            ) from None
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
