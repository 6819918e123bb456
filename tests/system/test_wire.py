"""system/wire.py: the one framing (bounded, one deadline for a whole receive) and Unix
addresses deeper than sun_path allows."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from cs2sim.system import wire


def test_a_frame_round_trips_and_names_its_peer() -> None:
    a, b = socket.socketpair()
    with a, b:
        wire.send_obj(a, {"op": "show", "n": [1, 2]})
        assert wire.recv_obj(b, 1024, time.monotonic() + 5) == {"op": "show", "n": [1, 2]}
        assert wire.peer_cred(b).pid > 0


def test_a_length_past_the_limit_is_refused_before_reading() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(wire.LEN.pack(1 << 30))
        with pytest.raises(wire.FrameError, match="at most 1,024"):
            wire.recv_obj(b, 1024, time.monotonic() + 5)


def test_a_dribbling_peer_runs_out_of_one_deadline() -> None:
    """One byte at a time, each in time for a per-recv timeout, never for the whole frame."""
    a, b = socket.socketpair()
    stop = threading.Event()
    sent = [0]  # bytes of the body dribbled so far

    def dribble() -> None:
        a.sendall(wire.LEN.pack(1000))  # at this pace the body needs 50 s or more
        while not stop.wait(0.05):
            try:
                a.sendall(b" ")
            except OSError:
                return
            sent[0] += 1

    t = threading.Thread(target=dribble)
    t.start()
    try:
        with pytest.raises(wire.Closed):
            wire.recv_obj(b, 2048, time.monotonic() + 0.5)
        # given up before the body was whole (a per-recv timeout would have read all of it),
        # counted in bytes, not seconds: a slow host can delay the dribble, never hurry it
        assert sent[0] < 1000
    finally:
        stop.set()
        t.join()
        a.close()
        b.close()


def test_a_unix_socket_deeper_than_sun_path_binds_and_connects(tmp_path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "server.sock"
    assert len(str(path)) > 108  # past unix(7)'s sun_path
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with srv:
        with wire.unix_address(path) as address:
            srv.bind(address)
        srv.listen(1)
        assert path.exists()
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with cli:
            with wire.unix_address(path) as address:
                cli.connect(address)
            conn, _ = srv.accept()
            with conn:
                wire.send_obj(cli, {"hello": 1})
                assert wire.recv_obj(conn, 64, time.monotonic() + 5) == {"hello": 1}
