"""The cluster server over TCP: TLS for privacy and the server's identity, a token for the
caller's.

A TCP peer cannot be asked who it is (SO_PEERCRED is for Unix sockets), so a user proves it with
a token the server issued to them on the Unix socket, where the kernel vouched for their uid:

    cs-cluster-server token   asks the local server (SO_PEERCRED: your uid) for a new random
                              token and writes it to ~/.cs/token (0600, yours alone)

The server keeps only each token's SHA-256 and its uid, in `<home>/wsjob/tokens.json` (0600).
A TCP client (`--mgmt_address HOST:PORT`, `--credentials_path` the server's certificate, which
it verifies, host name included) sends its token as the first frame after the TLS handshake;
a peer that fails the handshake, sends no frame in time, or a token the server does not know
is refused with one line in the server's log and the connection closed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from cs2sim.system import knobs, wire
from cs2sim.system.appliance import ops
from cs2sim.system.appliance.errors import ServerGone
from cs2sim.system.errors import CsError

__all__ = ["TokenBook", "listen_tls", "connect_tls", "token_path", "HANDSHAKE_S"]

HANDSHAKE_S = 10.0  # TLS handshake and the token frame, together
MAX_TOKEN_FRAME = 1024
log = logging.getLogger("cs2sim.appliance")


def token_path() -> Path:
    """The user's token file (CS2SIM_TOKEN_FILE, else ~/.cs/token)."""
    env = knobs.raw("CS2SIM_TOKEN_FILE")
    return Path(env) if env else Path.home() / ".cs" / "token"


class TokenBook:
    """Issued tokens: sha256 -> uid, in a 0600 file rewritten atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.lock = threading.Lock()
        try:
            self.hashes: dict[str, int] = {
                k: int(v) for k, v in json.loads(self.path.read_text()).items()
            }
        except (OSError, ValueError, AttributeError):
            self.hashes = {}

    def issue(self, uid: int) -> str:
        token = secrets.token_hex(32)
        with self.lock:
            self.hashes[hashlib.sha256(token.encode()).hexdigest()] = uid
            tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(self.hashes, f)
            os.replace(tmp, self.path)
        return token

    def uid_of(self, token: str) -> int | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        with self.lock:
            for known, uid in self.hashes.items():
                if secrets.compare_digest(known, digest):
                    return uid
        return None


def listen_tls(server: Any, address: str, cert: str | None, key: str | None) -> None:
    """Make `server` (server.Server) also listen on TCP `host:port` with TLS; the port it got
    is written to `<home>/wsjob/server.tcp` (port 0 picks a free one)."""
    if not cert or not key:
        raise CsError("--tcp needs --cert and --key (the server's TLS certificate and key).")
    host, _, port = address.rpartition(":")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    sock = socket.create_server((host or "127.0.0.1", int(port)))
    book = TokenBook(server.dir / "tokens.json")
    (server.dir / "server.tcp").write_text(f"{host or '127.0.0.1'}:{sock.getsockname()[1]}\n")

    def identify(conn: socket.socket) -> tuple[ops.Caller, socket.socket] | None:
        host, port = conn.getpeername()[:2]
        peer = f"{host}:{port}"
        try:
            conn.settimeout(HANDSHAKE_S)
            deadline = time.monotonic() + HANDSHAKE_S
            tls = ctx.wrap_socket(conn, server_side=True)
            hello = wire.recv_obj(tls, MAX_TOKEN_FRAME, deadline)
        except (ssl.SSLError, OSError, wire.Closed, wire.FrameError) as e:
            log.info("refused a TCP peer %s: no TLS session (%s)", peer, type(e).__name__)
            return None
        uid = book.uid_of(str(hello.get("token", "")))
        if uid is None:
            log.info("refused a TCP peer %s: no valid token", peer)
            try:
                wire.send_obj(
                    tls,
                    {
                        "ok": False,
                        "code": 77,
                        "error": "the cluster server "
                        "does not know this token; get one with `cs-cluster-server "
                        "token` on the server's host.",
                    },
                )
            except OSError:
                pass
            return None
        return server.caller_for(uid, "tls"), tls

    server.add_tcp(sock, identify, book)


def connect_tls(home: Path, address: str, credentials_path: str | None) -> socket.socket:
    """A TLS connection to `address` that has presented the user's token."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise CsError(f"--mgmt_address {address!r} is not HOST:PORT; give e.g. cluster-server:443.")
    # reachable first: a wrong host is "unreachable", whether or not a token is at hand
    try:
        raw = socket.create_connection((host, int(port)), timeout=HANDSHAKE_S)
    except OSError as e:
        raise ServerGone(
            f"cannot reach the cluster server at {address} "
            f"({e.strerror or e}); check --mgmt_address."
        ) from None
    try:
        token = token_path().read_text().strip()
    except OSError:
        raw.close()
        raise CsError(
            f"no token in {token_path()}; run `cs-cluster-server token` on the server's host first."
        ) from None
    ctx = (
        ssl.create_default_context(cafile=credentials_path)
        if credentials_path
        else ssl.create_default_context()
    )
    try:
        sock = ctx.wrap_socket(raw, server_hostname=host)
        sock.settimeout(None)
        wire.send_obj(sock, {"token": token})
    except ssl.SSLCertVerificationError as e:
        raw.close()
        raise ServerGone(
            f"the cluster server at {address} did not prove its identity "
            f"({e.verify_message}); pass its certificate with "
            "--credentials_path."
        ) from None
    except OSError as e:
        raw.close()
        raise ServerGone(
            f"cannot reach the cluster server at {address} "
            f"({e.strerror or e}); check --mgmt_address."
        ) from None
    return sock
