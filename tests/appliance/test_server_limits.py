"""The cluster server bounds what a caller can make it do: request size, argument types and
sizes, connections per caller; each violation is one answer or one log line, never a
traceback."""

from __future__ import annotations

import os
import socket

import pytest

from cs2sim.system import wire
from cs2sim.system.appliance.address import MAX_REQUEST, socket_path
from cs2sim.system.appliance.server import MAX_CONNS_PER_UID


def _sock(home) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(socket_path(home)))
    s.settimeout(30)
    return s


def _ask(s: socket.socket, obj: dict) -> dict:
    wire.send_obj(s, obj)
    return wire.recv_obj(s, 1 << 20, None)


def test_bad_requests_are_answered_or_closed_in_one_line(cs2_appliance):
    cs2_appliance.start()
    home = cs2_appliance.home
    with _sock(home) as s:
        reply = _ask(s, {"op": "drop_tables"})
        assert reply["ok"] is False and reply["error"].startswith("unknown operation")
        reply = _ask(s, {"op": "get_jobs", "args": {"all": "yes"}})
        assert reply == {
            "ok": False,
            "error": "bad request: get_jobs's argument 'all' has the wrong type.",
        }
        reply = _ask(s, {"op": "label", "args": {"name": "x", "sudo": True}})
        assert reply["error"] == "bad request: label takes no argument 'sudo'."
        reply = _ask(s, {"op": "submit", "args": {"spec": {"cwd": "x" * 5000}}})
        assert "longer than 4096 characters" in reply["error"]
        reply = _ask(
            s,
            {
                "op": "submit",
                "args": {
                    "kind": "execute",
                    "num_csx": 1,
                    "spec": {"cwd": "/", "run_py": "/bin/sh", "wrapper": "sh"},
                },
            },
        )
        assert reply["error"] == (
            "bad request: a wsjob runs a Model Zoo run.py under python or python-ws."
        )
        assert _ask(s, {"op": "ping"})["ok"] is True  # the connection is still good
    with _sock(home) as s:  # a frame larger than the limit: closed before it is read
        s.sendall(wire.LEN.pack(MAX_REQUEST + 1))
        with pytest.raises((wire.Closed, OSError)):
            wire.recv_obj(s, 1024, None)
    with _sock(home) as s:  # not JSON
        s.sendall(wire.LEN.pack(3) + b"{{{")
        with pytest.raises((wire.Closed, OSError)):
            wire.recv_obj(s, 1024, None)
    held = [_sock(home) for _ in range(MAX_CONNS_PER_UID - 1)]
    try:
        for s in held:
            assert _ask(s, {"op": "ping"})["ok"] is True
        with _sock(home) as extra:  # one more than the caller may hold
            _ask(extra, {"op": "ping"})  # admitted: MAX_CONNS_PER_UID in all
            with _sock(home) as refused:
                try:  # the server answers and closes at once: it may be gone before we send
                    wire.send_obj(refused, {"op": "ping"})
                except BrokenPipeError:
                    pass
                reply = wire.recv_obj(refused, 1024, None)  # its answer is still there
                assert reply["ok"] is False and "too many connections" in reply["error"]
    finally:
        for s in held:
            s.close()
    log = (home / "wsjob" / "server.log").read_text()
    assert "Traceback" not in log
    assert "a message of 262,145 bytes" in log and "not JSON" in log


def test_the_shutdown_reply_is_sent_before_the_server_ends(tmp_path, monkeypatch):
    """`cs-cluster-server stop` reads "is stopping" even when the reply is slow to go out: the
    server ends after the reply is sent (a process ends with its threads, so a reply still in
    flight when serve_forever returns is lost and the admin reads "no cluster server runs")."""
    import threading
    import time

    from cs2sim.scripts.cluster_server import launchers
    from cs2sim.system.appliance import server as server_mod

    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    sent = wire.send_obj
    order: list[str] = []  # "replied" and "ended", in the order they happened

    def slow_send(sock, obj, max_bytes=None):  # the reply thread loses the CPU for a while
        time.sleep(0.5)
        sent(sock, obj, max_bytes)
        order.append("replied")

    monkeypatch.setattr(server_mod.wire, "send_obj", slow_send)
    server = server_mod.Server(tmp_path / "home", launchers())
    ended = threading.Event()

    def serve() -> None:
        server.serve_forever()
        order.append("ended")
        ended.set()

    loop = threading.Thread(target=serve, daemon=True)
    loop.start()
    try:
        with _sock(tmp_path / "home") as s:
            wire.send_obj(s, {"op": "shutdown", "args": {}})
            assert wire.recv_obj(s, 1 << 20, None)["ok"] is True
        assert ended.wait(60), "the server did not stop after its shutdown reply"
        # every reply went out before the server ended (the old order: ended, then replied)
        assert order[-1] == "ended" and "replied" in order, order
    finally:
        server.stop()
        loop.join(60)
        server._lock.close()  # the process's lock, held for its life: closed as its exit would
        os.close(server._wake_r)
        os.close(server._wake_w)
