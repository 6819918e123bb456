"""system/procfs.py: the one reader of /proc, against real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cs2sim.system import jobs, procfs

pytestmark = pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")

# a command name with the characters that break a naive split of /proc/<pid>/stat
ODD_COMM = "a) b (c"
CHILD = (
    "import sys, time\n"
    f"open('/proc/self/comm', 'w').write({ODD_COMM!r})\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_own_stat_matches_what_the_kernel_says_through_os() -> None:
    st = procfs.read_stat()
    assert st is not None
    assert (st.ppid, st.session) == (os.getppid(), os.getsid(0))
    assert st.state == "R" and not st.ended
    assert st.starttime == jobs.process_start(os.getpid())


def test_a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert procfs.comm(child.pid) == ODD_COMM.encode()
        st = procfs.read_stat(child.pid)
        assert st is not None and st.ppid == os.getpid() and st.state in ("S", "R")
        assert child.pid in procfs.pids() and procfs.owner(child.pid) == os.getuid()
        started = procfs.started_at(child.pid)
        assert started is not None and abs(started - time.time()) < 60
    finally:
        child.communicate("")
    assert procfs.read_stat(child.pid) is None  # reaped: gone


def test_an_unreaped_child_is_ended_and_not_alive() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while (st := procfs.read_stat(pid)) is not None and not st.ended:
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.005)
        assert st is not None and st.state == "Z"
        assert not jobs.process_alive(pid)
    finally:
        os.waitpid(pid, 0)


def test_a_start_time_that_does_not_match_means_another_process() -> None:
    me = os.getpid()
    start = jobs.process_start(me)
    assert start is not None
    assert jobs.process_alive(me, start)
    assert not jobs.process_alive(me, str(int(start) + 1))  # the pid was reused


def test_environ_is_matched_by_whole_entries() -> None:
    env = {**os.environ, "CS2SIM_PROCFS_PROBE": "yes"}
    child = subprocess.Popen(
        [sys.executable, "-c", "print('ready', flush=True); input()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        assert procfs.environ_has(child.pid, b"CS2SIM_PROCFS_PROBE=yes")
        assert not procfs.environ_has(child.pid, b"CS2SIM_PROCFS_PROBE=y")
    finally:
        child.communicate("\n")
