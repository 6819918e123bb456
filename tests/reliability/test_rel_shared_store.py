"""A store shared by several OS users serves operations, not SQL: each attack a member of the
sharing group could make is run as a REAL OS user (created here with useradd, removed
afterwards) against the owner's store service, and changes nothing it should not. Needs root;
skipped otherwise."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rel_helpers import preload, run_as

from cs2sim.system import store_service, users
from cs2sim.system.audit import entries
from cs2sim.system.errors import CsError, StoreError
from cs2sim.system.machine import Machine
from cs2sim.system.sched import queue
from cs2sim.system.state import ExecMode, State
from cs2sim.system.store import DB_NAME, Store
from cs2sim.system.store_remote import SOCKET_NAME, running, service_pid
from cs2sim.system.wire import recv_obj, send_obj

CAN = os.geteuid() == 0 and shutil.which("useradd") and shutil.which("groupadd")
pytestmark = pytest.mark.skipif(
    not CAN, reason="needs root and useradd/groupadd to create OS users who share the store"
)


@pytest.fixture
def members() -> Iterator[list[pwd.struct_passwd]]:
    """Two fresh OS users whose primary group is one fresh group (the store is shared with it)."""
    tag = uuid.uuid4().hex[:6]
    group = f"cs2t{tag}"
    names = [f"cs2m{tag}a", f"cs2m{tag}b"]
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        for name in names:
            subprocess.run(
                ["useradd", "-M", "-N", "-g", group, "-s", "/usr/sbin/nologin", name],
                check=True,
                capture_output=True,
            )
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)


@pytest.fixture
def member(members: list[pwd.struct_passwd]) -> pwd.struct_passwd:
    return members[0]


@pytest.fixture
def shared(members: list[pwd.struct_passwd]) -> Iterator[Path]:
    """root's store, shared with the members' group through the store service."""
    top = Path(tempfile.mkdtemp(prefix="cs2sim-share-"))
    top.chmod(0o755)
    home = top / "store"
    with Store.open(home) as store:
        Machine(store).status()
        users.add_user(store, users.local_identity(store), "alice", users.Role.ADMIN, "s3cret")
    store_service.share(home, members[0].pw_gid)
    try:
        yield home
    finally:
        pid = service_pid(home)  # the service now answering (a test may have restarted it)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(top, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    return {
        "CS2_HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "CS2_BOOT_SECONDS": "0",
    }


def _raw(home: Path, request: dict[str, Any]) -> dict[str, Any]:
    """One raw request on a fresh connection (after its hello), as any client could send."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(20)
        s.connect(str(home / SOCKET_NAME))
        send_obj(s, {"op": "hello"})
        recv_obj(s, 1 << 23)
        send_obj(s, request)
        return recv_obj(s, 1 << 23)


def _log(home: Path) -> list[tuple[int, str, str, str]]:
    with Store.open(home) as store:
        return [(e.id, e.user, e.command, e.detail) for e in entries(store)]


def _start_as(user: pwd.struct_passwd, fn: Callable[[], Any], env: dict[str, str]) -> int:
    """Fork a child running `fn()` as `user` in the background; its pid."""
    preload()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.environ.clear()
            os.environ.update(env)
            fn()
        finally:
            os._exit(0)
    return pid


# -- no SQL, no claims --------------------------------------------------------------------------
SQL_ATTACKS = {
    "rewrite an audit row": "INSERT OR REPLACE INTO audit (id, at, user, system, command,"
    " from_state, to_state, outcome) VALUES (1, 0, 'x', '', 'x', '', '',"
    " 'ok')",
    "replace a job": "INSERT OR REPLACE INTO jobs (id, system, user, mode, command, state, host,"
    " started_at) VALUES (1, 'cs2-1', 'root', 'PIPELINED', 'x', 'RUNNING',"
    " 'h', 0)",
    "take a node": "INSERT OR REPLACE INTO allocations (node, job_id) VALUES ('n1', 1)",
    "re-attribute a job": "UPDATE jobs SET user = 'root'",
    "make me admin": "UPDATE users SET role = 'admin'",
    "zeroblob amplification": "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r"
    " WHERE i < 100000) SELECT zeroblob(100000) FROM r",
}


def _member_attacks(home: Path) -> dict[str, Any]:
    """Everything a member can try without the service's help, and through it; runs as one."""
    out: dict[str, Any] = {}
    try:
        sqlite3.connect(f"file:{home / DB_NAME}?mode=rw", uri=True).execute("SELECT 1")
        out["open the file"] = "opened"
    except sqlite3.Error as e:
        out["open the file"] = f"refused: {e}"
    for what, sql in SQL_ATTACKS.items():
        out[what] = _raw(home, {"op": "exec", "sql": sql, "params": []})
    out["begin"] = _raw(home, {"op": "begin", "immediate": True})
    out["fts3 pointer"] = _raw(home, {"op": "exec", "sql": "SELECT fts3_tokenizer('simple')"})
    store = Store.open(home)
    try:
        with store.transaction() as db:
            db.execute("DELETE FROM audit")
        out["sql through Store"] = "done"
    except CsError as e:
        out["sql through Store"] = f"refused: {e}"
    # the typed requests with what the service fills itself: refused, not believed
    out["claim a pid"] = _raw(
        home,
        {
            "op": "job.register",
            "args": {
                "system": "cs2-1",
                "mode": {"$e": "ExecMode", "v": "PIPELINED"},
                "command": "x",
                "pid": 1,
            },
        },
    )
    out["claim a user"] = _raw(home, {"op": "queue.cancel", "args": {"job_id": 1, "user": "root"}})
    out["claim admin"] = _raw(home, {"op": "queue.cancel", "args": {"job_id": 1, "admin": True}})
    me = users.local_identity(store)
    try:
        Machine(store).standby(me)
        out["standby"] = "done"
    except CsError as e:
        out["standby"] = f"refused: {e}"
    out["me"] = (me.name, str(me.role))
    return out


def test_a_member_can_send_no_sql_and_claim_nothing(shared, member):
    before = _log(shared)
    with Store.open(shared) as store:
        accounts = users.list_users(store)
    res = run_as(member, lambda: _member_attacks(shared), _env(shared))
    assert res["me"] == (member.pw_name, "user")
    assert res["open the file"].startswith("refused")
    for what in (*SQL_ATTACKS, "begin", "fts3 pointer"):
        reply = res[what]
        assert reply["ok"] is False and "no request named" in reply["error"]["message"], what
    assert "runs the store's operations, not SQL" in res["sql through Store"]
    assert "takes no argument 'pid'" in res["claim a pid"]["error"]["message"]
    assert "takes no argument 'user'" in res["claim a user"]["error"]["message"]
    assert "takes no argument 'admin'" in res["claim admin"]["error"]["message"]
    assert "needs the admin role" in res["standby"]
    after = _log(shared)
    assert after[: len(before)] == before  # only appended to
    assert [(u, c) for _, u, c, _ in after[len(before) :]] == [(member.pw_name, "system standby")]
    with Store.open(shared) as store:
        assert users.list_users(store) == accounts
        assert Machine(store).status().state is State.ACTIVE
        with store.read() as db:
            assert db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
            assert db.execute("SELECT count(*) FROM allocations").fetchone()[0] == 0


def test_a_member_uses_the_shared_store_through_operations(shared, member):
    def work() -> tuple[str, str, list[str], str]:
        store = Store.open(shared)
        who = users.authenticate(store, "alice", "s3cret")  # checked by the service
        Machine(store).standby(who)  # alice is an admin: allowed, audited as alice
        try:
            users.authenticate(store, "alice", "guess")
            failed = "in"
        except CsError as e:
            failed = str(e)
        return (
            who.name,
            str(Machine(store).status().state),
            [e.user for e in entries(store)],
            failed,
        )

    name, state, log_users, failed = run_as(member, work, _env(shared))
    assert (name, state) == ("alice", "STANDBY") and "Login failed" in failed
    assert log_users[-2:] == ["alice", "alice"]  # the standby, then the failed login
    log = _log(shared)
    assert f"by OS user {member.pw_name}" in log[-1][3]  # the kernel's user, not the account


def test_the_audit_log_is_append_only_for_its_owner_too(home):
    with Store.open(home) as store:
        Machine(store).standby(users.local_identity(store))  # one row to attack
    db = sqlite3.connect(home / DB_NAME, isolation_level=None)
    row = db.execute("SELECT id FROM audit").fetchone()
    for sql in (
        "UPDATE audit SET detail = 'nothing'",
        "DELETE FROM audit",
        f"INSERT OR REPLACE INTO audit (id, at, user, system, command, from_state,"
        f" to_state, outcome) VALUES ({row[0]}, 0, 'x', '', 'x', '', '', 'ok')",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(sql)
    db.close()


# -- the confused deputy ------------------------------------------------------------------------
def test_the_owners_cancel_never_signals_a_process_the_member_named(shared, member):
    victim = subprocess.Popen(["sleep", "60"])  # one of the owner's processes
    try:

        def register() -> tuple[int, int | None, str, int]:
            store = Store.open(shared)
            machine = Machine(store)
            job = machine.register_job(
                users.local_identity(store), ExecMode.PIPELINED, "run.py", victim.pid
            )  # the pid it claims is ignored
            return job.id, job.pid, job.user, os.getpid()

        job_id, pid, user, member_pid = run_as(member, register, _env(shared))
        assert (pid, user) == (member_pid, member.pw_name)  # what the service saw, not the claim
        with Store.open(shared) as store:  # the owner cancels it: the member's process is gone
            Machine(store).cancel_job(users.local_identity(store), job_id)
        assert victim.poll() is None  # never signalled
    finally:
        victim.kill()
        victim.wait()
    assert running(shared)  # the service did not signal itself either


def test_a_member_cannot_end_or_cancel_anothers_job(shared, member):
    with Store.open(shared) as store:
        owner_job = Machine(store).register_job(
            users.local_identity(store), ExecMode.PIPELINED, "run.py", os.getpid()
        )

    def attack() -> list[str]:
        store = Store.open(shared)
        out = []
        for attempt in (
            lambda: Machine(store).finish_job(owner_job.id, "FAILED"),
            lambda: Machine(store).cancel_job(users.local_identity(store), owner_job.id),
        ):
            try:
                attempt()
                out.append("done")
            except CsError as e:
                out.append(str(e))
        return out

    finish, cancel = run_as(member, attack, _env(shared))
    assert finish == (f"Job {owner_job.id} belongs to root; only its owner or an admin may end it.")
    assert cancel.startswith(f"Job {owner_job.id} belongs to root; only its owner or an admin")
    with Store.open(shared) as store:
        assert [j.id for j in Machine(store).running_jobs()] == [owner_job.id]


def test_a_members_launch_goes_through_the_queue_operations(shared, member):
    from cs2sim.system.sched.request import Component, JobRequest

    def launch() -> tuple[int, str, str, int, int, str]:
        store = Store.open(shared)
        request = JobRequest((Component(1, 1),), ("python", "run.py"))
        job_id = queue.submit(store, request, user="root", pid=1)  # both claims ignored
        job = queue.poll(store, job_id, [])
        queue.finish(store, job_id, "COMPLETED", 0)
        return (job_id, job.state, job.user, job.pid, os.getpid(), queue.state(store, job_id).state)

    job_id, state, user, pid, member_pid, end = run_as(member, launch, _env(shared))
    assert (state, user, pid, end) == ("RUNNING", member.pw_name, member_pid, "COMPLETED")
    with Store.open(shared) as store:
        assert queue.state(store, job_id).user == member.pw_name


# -- the poisoned row -----------------------------------------------------------------------------
def test_a_poisoned_queue_row_is_skipped_and_never_runs(home):
    with Store.open(home) as store:
        Machine(store).status()
        queue.jobs(store)  # the queue's tables
        with store.transaction() as db:
            db.execute(
                "INSERT INTO sched_jobs (id, het_size, name, user, state, reason, request,"
                " command, pid, pid_start, host, submitted_at) VALUES (900, 1, 'x', 'mallory',"
                " 'PENDING', 'None', '{\"components\": 5}', 'x', ?, NULL, ?, 0)",
                (os.getpid(), socket.gethostname()),
            )
            db.execute(
                "INSERT INTO sched_jobs (id, het_size, name, user, state, reason, request,"
                " command, pid, pid_start, host, submitted_at) VALUES (901, 1, 'y', 'mallory',"
                " 'RUNNING', 'None', '{\"components\": 5}', 'x', ?, NULL, ?, 0)",
                (os.getpid(), socket.gethostname()),
            )
        with pytest.warns(queue.MalformedRow, match="skipped queue job 90"):
            listed = queue.listing(store, all_states=True)
        assert 901 not in [j.id for j in listed.jobs]
        with store.read() as db:  # the pass dropped the pending one: it can never run
            assert db.execute("SELECT state FROM sched_jobs WHERE id = 900").fetchone()[0] == (
                "CANCELLED"
            )
    shown = subprocess.run(
        [sys.executable, "-m", "cs2sim.csshell", "-c", "jobs show"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stderr == (
        "warning: skipped queue job 901 of the system store: its row is "
        "malformed (TypeError), so it is not listed; the other jobs are not "
        "affected\n"
    )


def test_a_malformed_launch_request_is_refused_by_the_service(shared, member):
    bad = {
        "op": "queue.submit",
        "args": {
            "request": {
                "$d": "JobRequest",
                "v": {"components": {"$t": []}, "command": {"$t": ["x"]}},
            }
        },
    }
    worse = {
        "op": "queue.submit",
        "args": {"request": {"$d": "JobRequest", "v": {"components": 5, "command": {"$t": ["x"]}}}},
    }
    replies = run_as(member, lambda: (_raw(shared, bad), _raw(shared, worse)), _env(shared))
    assert "launch request is malformed" in replies[0]["error"]["message"]
    assert "is malformed: JobRequest.components" in replies[1]["error"]["message"]


# -- exhaustion ------------------------------------------------------------------------------------
def test_a_members_idle_connections_do_not_lock_anyone_out(shared, members):
    hog, other = members
    ready_r, ready_w = os.pipe()

    def hold() -> None:
        store = Store.open(shared)
        users.authenticate(store, "alice", "s3cret")  # a password login on its connection
        assert store.remote is not None
        first = store.remote._sock
        socks = []
        for _ in range(80):  # served one by one: the first ones push the store's own out
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(shared / SOCKET_NAME))
            send_obj(s, {"op": "hello"})
            recv_obj(s, 1 << 20)
            socks.append(s)
        state = str(Machine(store).status().state)  # reconnects, resuming the login
        again = "reconnected" if store.remote._sock is not first else "same connection"
        os.write(ready_w, f"{state} {store.remote.identity[0]} {again}\n".encode())
        time.sleep(60)

    pid = _start_as(hog, hold, _env(shared))
    try:
        said = os.read(ready_r, 200).decode()  # the 80 connections are open
        assert said == "ACTIVE alice reconnected\n"  # pushed out, back in as alice

        def use() -> str:
            store = Store.open(shared)
            return str(Machine(store).status().state)

        assert run_as(other, use, _env(shared)) == "ACTIVE"
        assert run_as(hog, use, _env(shared)) == "ACTIVE"  # the hog's own idle ones made room
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_member_dribbling_a_request_blocks_no_one(shared, member):
    ready_r, ready_w = os.pipe()

    def dribble() -> None:
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(shared / SOCKET_NAME))
        s.sendall((1000).to_bytes(4, "big") + b"{")
        os.write(ready_w, b"!")
        for _ in range(60):
            time.sleep(1)
            s.sendall(b" ")

    pid = _start_as(member, dribble, _env(shared))
    try:
        os.read(ready_r, 1)
        with Store.open(shared) as store:  # the owner's standby, while the member dribbles
            status = Machine(store).standby(users.local_identity(store))
        assert status.state is State.STANDBY
        got = run_as(member, lambda: str(Machine(Store.open(shared)).status().state), _env(shared))
        assert got == "STANDBY"
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_an_answer_larger_than_the_limit_is_refused_in_one_sentence(shared, member):
    with Store.open(shared) as store, store.transaction() as db:  # ~8 MiB of audit log
        db.executemany(
            "INSERT INTO audit (at, user, system, command, from_state, to_state, outcome,"
            " detail) VALUES (0, 'root', '', 'x', '', '', 'ok', ?)",
            [("y" * 256,) for _ in range(30_000)],
        )

    def read() -> tuple[str, int]:
        store = Store.open(shared)
        try:
            entries(store)
            whole = "read"
        except CsError as e:
            whole = str(e)
        return whole, len(entries(store, 100))  # asking for less works

    whole, some = run_as(member, read, _env(shared))
    assert whole.startswith("the store service refused the request: its answer is ")
    assert whole.endswith("more than the 4,194,304 the service sends; ask for less.")
    assert some == 100


# -- cs-store --------------------------------------------------------------------------------------
def _cs_store(*words: str) -> list[str]:
    return [sys.executable, "-m", "cs2sim.scripts.store_service", *words]


def test_cs_store_stop_by_a_member_is_refused(shared, member):
    def stop() -> tuple[int, str, str]:  # cs-store's main, in the member's own process
        import contextlib
        import io

        from cs2sim.scripts.store_service import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["stop"])
        return code, out.getvalue(), err.getvalue()

    code, out, err = run_as(member, stop, _env(shared))
    assert code == 77 and out == ""
    assert err.startswith("error: Permission denied: only the store's owner root may stop")
    assert err.count("\n") == 1 and running(shared)


def test_cs_store_status_never_starts_the_service_and_unshare_ends_sharing(shared, member):
    env = {**os.environ, "CS2_HOME": str(shared)}
    stopped = subprocess.run(_cs_store("stop"), capture_output=True, text=True, env=env, timeout=60)
    assert stopped.returncode == 0 and "is stopped" in stopped.stdout and not running(shared)
    status = subprocess.run(
        _cs_store("status"), capture_output=True, text=True, env=env, timeout=60
    )
    assert status.returncode == 0 and "its service is not running" in status.stdout
    assert not running(shared)
    with Store.open(shared):  # the owner's next open restarts it while shared
        assert running(shared)
    gone = subprocess.run(_cs_store("unshare"), capture_output=True, text=True, env=env, timeout=60)
    assert gone.returncode == 0 and "private again" in gone.stdout
    assert not running(shared) and (shared.stat().st_mode & 0o777) == 0o700

    def use() -> str:
        try:
            Store.open(shared)
            return "opened"
        except CsError as e:
            return str(e)

    assert "permission denied" in run_as(member, use, _env(shared))


def test_an_empty_store_is_refused_not_recreated(tmp_path):
    home = tmp_path / "home"
    with Store.open(home) as store:
        Machine(store).status()
    os.truncate(home / DB_NAME, 0)  # an accident, or someone with write access
    for extra in ("-wal", "-shm"):
        (home / f"{DB_NAME}{extra}").unlink(missing_ok=True)
    with pytest.raises(
        StoreError,
        match=r"exists but holds no store \(0 bytes\), so it was "
        r"not recreated.*move it aside",
    ):
        Store.open(home)
    assert (home / DB_NAME).stat().st_size == 0  # left as it was, for the owner to look at
