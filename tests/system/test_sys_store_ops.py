"""The store's operations table, its typed values, and the request server's limits (in-process:
the same uid on both ends; the OS-user attacks are in tests/reliability/)."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cs2sim.system import request_server
from cs2sim.system.jobs import Job
from cs2sim.system.request_server import Limits, RequestServer
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.state import ExecMode
from cs2sim.system.store_ops import conforms, decode, encode, table_markdown
from cs2sim.system.store_service import load_operations
from cs2sim.system.wire import Closed, PeerCred, recv_obj, send_obj

PRETEND: dict[str, int] = {}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def test_the_docs_print_the_operations_table_as_it_is():
    ops = load_operations()
    text = DOCS.read_text()
    block = re.search(
        r"<!-- operations table: begin -->\n(.*?)\n<!-- operations table: end -->", text, re.S
    )
    assert block is not None and block.group(1) == table_markdown(ops)
    assert {"system.standby", "job.register", "queue.submit", "audit.read", "account.login"} <= set(
        ops
    )
    assert not any("sql" in name or name in ("begin", "exec") for name in ops)


def test_values_keep_their_types_across_the_socket():
    job = Job(
        3,
        "cs2-1",
        "ann",
        ExecMode.PIPELINED,
        "run.py",
        "RUNNING",
        12,
        "h",
        1.5,
        None,
        ("n1",),
        ("cs2-1",),
    )
    request = JobRequest((Component(2, 1, None, True),), ("python", "run.py"), env={"A": "1"})
    for value in (job, request, [("a", 1.0)], {"k": b"\x00\xff"}, None, (1, (2, 3))):
        assert decode(encode(value)) == value


@pytest.mark.parametrize(
    "data, why",
    [
        ({"$d": "Popen", "v": {}}, "unknown type"),
        ({"$d": "Component", "v": {"nodes": "2", "tasks_per_node": 1}}, "Component.nodes is not"),
        ({"$d": "JobRequest", "v": {"components": 5, "command": {"$t": []}}}, "components"),
        ({"$d": "Component", "v": {"nodes": 1, "tasks_per_node": 1, "evil": 1}}, "no field"),
        ({"$e": "ExecMode", "v": "TURBO"}, "is not a ExecMode"),
        ({"x": 1}, "unknown shape"),
    ],
)
def test_a_value_of_the_wrong_shape_is_refused(data, why):
    with pytest.raises(ValueError, match=why):
        decode(data)


def test_conforms_checks_the_table_types():
    assert conforms(None, int | None) and conforms(3, int | None) and not conforms(True, int)
    assert conforms(("a", "b"), tuple[str, ...]) and not conforms(["a"], tuple[str, ...])
    assert conforms([["n1"]], list[list[str]]) and not conforms([[1]], list[list[str]])


# -- the request server --------------------------------------------------------------------
HANG_S = 300.0  # a hang guard for the waits below, generous for a loaded host
RELEASE = threading.Event()  # {"hold": true} requests are answered once this is set


class _Echo:
    """A session answering {"size": n} with n bytes, {"hold": true} once RELEASE is set."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.busy = threading.Event()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        self.busy.set()
        if request.get("hold"):
            RELEASE.wait(HANG_S)
        return {"ok": True, "data": "x" * int(request.get("size", 1))}

    def refusal(self, text: str) -> dict[str, Any]:
        return {"ok": False, "error": text}

    def close(self) -> None:
        self.closed.set()


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, list[_Echo]]]:
    path = tmp_path / "s.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)
    sessions: list[_Echo] = []
    stop = threading.Event()

    def make(_sock: socket.socket, _peer: PeerCred) -> _Echo:
        sessions.append(_Echo())
        return sessions[-1]

    real = request_server.peer_cred
    monkeypatch.setattr(
        request_server,
        "peer_cred",  # a test may pretend to be another uid
        lambda sock: real(sock)._replace(uid=PRETEND.get("uid", 0)),
    )
    PRETEND.clear()
    limits = Limits(
        per_uid=4, total=8, request_bytes=1024, result_bytes=2048, receive_s=1.0, idle_s=1.5
    )
    srv = RequestServer(
        listener, make, lambda why: {"ok": False, "error": why}, limits, lambda: not stop.is_set()
    )
    thread = threading.Thread(target=srv.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    yield path, sessions
    RELEASE.set()  # no held request outlives its test
    stop.set()
    thread.join(5)
    listener.close()


def _conn(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(HANG_S)
    s.connect(str(path))
    return s


def _ask(s: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
    send_obj(s, request)
    return recv_obj(s, 1 << 20)


def test_an_answer_over_the_limit_is_refused_in_one_sentence(server):
    path, _ = server
    with _conn(path) as s:
        assert _ask(s, {"size": 100})["ok"] is True
        big = _ask(s, {"size": 5000})
        assert big["ok"] is False and "more than the 2,048 the service sends" in big["error"]
        assert _ask(s, {"size": 1})["ok"] is True  # the connection goes on


def test_a_request_over_the_limit_closes_the_connection(server):
    path, _ = server
    with _conn(path) as s:
        reply = _ask(s, {"size": 1, "pad": "y" * 5000})
        assert reply["ok"] is False and "a malformed request" in reply["error"]
        with pytest.raises((Closed, OSError)):
            _ask(s, {"size": 1})


def test_a_user_at_the_limit_displaces_their_own_idle_connection(server):
    path, sessions = server
    idle = [_conn(path) for _ in range(4)]
    for s in idle:
        _ask(s, {"size": 1})
    fresh = _conn(path)  # a fifth: the longest-idle one is closed to make room
    assert _ask(fresh, {"size": 1})["ok"] is True
    assert sessions[0].closed.wait(HANG_S)
    with pytest.raises((Closed, OSError)):
        _ask(idle[0], {"size": 1})
    for s in (*idle, fresh):
        s.close()


def test_a_user_whose_connections_are_all_busy_is_refused(server):
    path, sessions = server
    RELEASE.clear()  # the four requests are answered only after the fifth connection's turn
    busy = [_conn(path) for _ in range(4)]
    for s in busy:
        send_obj(s, {"hold": True})
    deadline = time.monotonic() + HANG_S
    while not (len(sessions) == 4 and all(x.busy.wait(0.05) for x in sessions)):
        assert time.monotonic() < deadline, "the four requests were never being answered"
    with _conn(path) as extra:
        refused = recv_obj(extra, 1 << 20)
    assert refused["ok"] is False and "already answering 4 connections of yours" in refused["error"]
    RELEASE.set()
    for s in busy:
        assert recv_obj(s, 1 << 20)["ok"] is True
        s.close()


def test_idle_and_dribbling_connections_are_closed(server):
    path, sessions = server
    with _conn(path) as idle:
        _ask(idle, {"size": 1})
        assert sessions[-1].closed.wait(HANG_S)  # idle_s passed
    with _conn(path) as slow:
        slow.sendall((100).to_bytes(4, "big") + b"{")
        assert sessions[-1].closed.wait(HANG_S)  # receive_s passed mid-request


def test_a_full_server_makes_room_from_the_user_holding_the_most(server):
    path, sessions = server
    hog = []
    for uid in (1001, 1002):  # two users fill the server (8) with idle connections
        PRETEND["uid"] = uid
        for _ in range(4):
            hog.append(_conn(path))
            _ask(hog[-1], {"size": 1})
    PRETEND["uid"] = 1003  # a third user still gets in: an idle one of theirs makes room
    with _conn(path) as third:
        assert _ask(third, {"size": 1})["ok"] is True
    assert sessions[0].closed.wait(HANG_S)  # the longest-idle connection of user 1001
    for s in hog:
        s.close()
