"""No signal on a reused pid: a recorded process is signalled only through a pidfd, only while it
is the process recorded (start tick, uid), and never by the store service on a caller's behalf.

The attack, with real OS users: a member connects to the owner's store service, forks, lets the
connecting process exit (SO_PEERCRED keeps its pid), and waits until that pid comes back as a
thread of one of the owner's processes (the owner's chief) or of the store service itself; then
submits and cancels a job on the old socket, and the owner cancels the member's job. The pid is
made to come back by `pid_reuse.py`, which cycles the kernel's ids until one of its own threads
(or a child) holds the number, or until the next id handed out is the number; bounded: if the
id was taken by someone else twice over, the test skips with that reason. Needs root."""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rel_helpers import preload
from test_rel_shared_store import CAN, _env, member, members, shared  # noqa: F401 - fixtures

from cs2sim.system import procfs, users
from cs2sim.system.audit import entries
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.store import Store
from cs2sim.system.store_remote import SOCKET_NAME, service_pid
from cs2sim.system.wire import recv_obj, send_obj

HELPER = Path(__file__).with_name("pid_reuse.py")
ONE_NODE = JobRequest((Component(1, 1),), ("python", "run.py"), name="probe")

pytestmark = pytest.mark.slow


class Reuse:
    """`pid_reuse.py TARGET MODE` as the owner (this root process's child)."""

    def __init__(self, target: int, mode: str) -> None:
        self.target = target
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), str(target), mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def said(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line in ("missed", ""):
            self.close()
            pytest.skip(
                f"pid {self.target} did not come back: another process took it twice over "
                "while it was cycled (a busy machine); nothing was tested"
            )
        return line

    def again(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write("again\n")
        self.proc.stdin.flush()
        return self.said()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()  # the helper lets go of the id and exits
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


# -- the mechanism, as root (no other user needed) -----------------------------------------------
@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
@pytest.mark.parametrize("mode", ["thread", "process"])
def test_a_recorded_process_is_never_signalled_once_its_pid_is_reused(mode: str) -> None:
    gone = subprocess.Popen(["sleep", "600"])
    recorded = procfs.identify(gone.pid)
    assert recorded is not None and recorded.uid == os.getuid()
    gone.kill()
    gone.wait()
    reuse = Reuse(recorded.pid, mode)
    try:
        assert reuse.said() == "got"  # the number is back, held by another of root's processes
        now = procfs.ids(recorded.pid)
        assert now is not None and (now[0] != recorded.pid) == (mode == "thread")
        # root could signal it: only the record's check and the pidfd stop it
        assert not procfs.signal_recorded(
            recorded.pid, recorded.start, recorded.uid, signal.SIGTERM
        )
        assert reuse.alive() and os.path.exists(f"/proc/{recorded.pid}")
    finally:
        reuse.close()


def test_a_live_recorded_process_is_signalled_and_only_with_its_uid() -> None:
    live = subprocess.Popen(["sleep", "600"])
    try:
        me = procfs.identify(live.pid)
        assert me is not None
        assert not procfs.signal_recorded(live.pid, me.start, me.uid + 1, signal.SIGTERM)
        assert not procfs.signal_recorded(live.pid, str(int(me.start) + 1), me.uid, 15)
        assert not procfs.signal_recorded(live.pid, None, me.uid, signal.SIGTERM)
        assert live.poll() is None  # none of those reached it
        assert procfs.signal_recorded(live.pid, me.start, me.uid, signal.SIGTERM)
        assert live.wait(timeout=60) == -signal.SIGTERM
    finally:
        live.kill()
        live.wait()
    me = procfs.identify(os.getpid())
    assert me is not None and not procfs.signal_recorded(me.pid, me.start, me.uid, 0)


# -- the attack, as real OS users ---------------------------------------------------------------
def _old_socket_request(store: Any, request: dict[str, Any]) -> dict[str, Any]:
    """A request sent on the connection the (now gone) parent opened, as an attacker would."""
    sock = store.remote._sock
    send_obj(sock, request)
    return recv_obj(sock, 1 << 23, time.monotonic() + 30)


def _member_attack(user: pwd.struct_passwd, home: Path) -> Iterator[Any]:
    """Fork a member process A that opens the store and submits two one-node jobs, then forks B
    (which keeps A's connection) and exits. Yields (A's pid, the job ids), then (after the test
    made A's pid come back) B's replies to a submit and a cancel on A's old socket."""
    preload()
    report_r, report_w = os.pipe()
    go_r, go_w = os.pipe()
    a = os.fork()
    if a == 0:
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.environ.clear()
            os.environ.update(_env(home))
            store = Store.open(home)
            jobs = [queue.submit(store, ONE_NODE, user="ignored") for _ in range(2)]
            if os.fork() == 0:  # B: waits until the pid of A is someone else's
                os.close(go_w)  # so that a test that ends early (a skip) lets B go: EOF
                if os.read(go_r, 1) != b"!":
                    os._exit(0)
                replies = [
                    _old_socket_request(
                        store,
                        {"op": "queue.submit", "args": {"request": queue_request()}},
                    ),
                    _old_socket_request(store, {"op": "queue.cancel", "args": {"job_id": jobs[0]}}),
                ]
                os.write(report_w, (json.dumps(replies) + "\n").encode())
                os._exit(0)
            os.write(report_w, f"{os.getpid()} {jobs[0]} {jobs[1]}\n".encode())
        finally:
            os._exit(0)
    os.waitpid(a, 0)  # A is gone; B holds its connection
    os.close(report_w)
    try:
        with os.fdopen(report_r, "r") as report:
            pid, job0, job1 = (int(w) for w in report.readline().split())
            yield pid, (job0, job1)
            os.write(go_w, b"!")
            yield json.loads(report.readline())
    finally:  # also when the test stops before the attack (the generator is closed)
        os.close(go_w)


def queue_request() -> dict[str, Any]:
    from cs2sim.system.store_ops import encode

    return encode(ONE_NODE)


def _check_attack_failed(home: Path, member_name: str, replies: list[dict[str, Any]]) -> None:
    submit, cancel = replies
    assert submit["ok"] is False
    assert "the process that opened this connection" in submit["error"]["message"]
    assert "has ended" in submit["error"]["message"]
    assert cancel["ok"] is True  # recorded as cancelled; the service signalled nothing
    log = entries(Store.open(home))
    mine = [e for e in log if e.user == member_name]
    assert [e.command for e in mine].count("launch submit") == 2  # each submit audited


@pytest.mark.skipif(not CAN, reason="needs root and useradd/groupadd")
def test_a_reused_pid_of_the_owners_chief_is_never_signalled(shared, member):  # noqa: F811
    service = service_pid(shared)
    attack = _member_attack(member, shared)
    pid, (job0, job1) = next(attack)
    chief = Reuse(pid, "thread")  # the owner's chief: one of its threads now has A's pid
    try:
        assert chief.said() == "got"
        replies = next(attack)
        _check_attack_failed(shared, member.pw_name, replies)
        with Store.open(shared) as store:  # the owner (root, who may signal anything) cancels
            me = users.local_identity(store)
            queue.cancel(store, job1, user=me.name, admin=True)
            assert queue.state(store, job1).state == "CANCELLED"
        assert chief.alive() and os.path.exists(f"/proc/{pid}")  # never signalled
        assert service_pid(shared) == service
    finally:
        chief.close()


@pytest.mark.skipif(not CAN, reason="needs root and useradd/groupadd")
def test_a_reused_pid_of_a_store_service_thread_is_never_signalled(shared, member):  # noqa: F811
    service = service_pid(shared)
    assert service is not None
    attack = _member_attack(member, shared)
    pid, (job0, job1) = next(attack)
    burner = Reuse(pid, "before")  # the next id handed out is A's pid
    held: list[socket.socket] = []
    try:
        assert burner.said() == "ready"
        for _ in range(10):
            s = socket.socket(socket.AF_UNIX)  # the service starts a thread for it
            s.connect(str(shared / SOCKET_NAME))
            send_obj(s, {"op": "hello"})
            recv_obj(s, 1 << 20, time.monotonic() + 30)
            held.append(s)
            if os.path.exists(f"/proc/{service}/task/{pid}"):
                break
            burner.again()
        else:
            pytest.skip(f"pid {pid} went to other processes ten times; nothing was tested")
        replies = next(attack)
        _check_attack_failed(shared, member.pw_name, replies)
        with Store.open(shared) as store:
            me = users.local_identity(store)
            queue.cancel(store, job1, user=me.name, admin=True)
        assert os.path.exists(f"/proc/{service}/task/{pid}")  # the thread lives on
        assert service_pid(shared) == service  # the service was never signalled
        with Store.open(shared) as store:
            assert queue.state(store, job1).state == "CANCELLED"
    finally:
        for s in held:
            s.close()
        burner.close()
