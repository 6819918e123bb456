"""`procfs.signal_recorded`: a recorded process is signalled only while it is that process (start
tick), runs as the uid recorded, and leads its process; never a thread's id, never this process;
through a pidfd where the kernel has one, and by the documented weaker fallback elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest

from cs2sim.system import procfs

pytestmark = pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")


@pytest.fixture(params=["pidfd", "fallback"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "pidfd" and not procfs.pidfd_supported():
        pytest.skip("this kernel or Python has no pidfd_open / pidfd_send_signal")
    if request.param == "fallback":
        monkeypatch.setattr(procfs, "pidfd_supported", lambda: False)
    return str(request.param)


def test_only_the_recorded_process_with_its_uid_is_signalled(path: str) -> None:
    live = subprocess.Popen(["sleep", "600"])
    try:
        me = procfs.identify(live.pid)
        assert me is not None and me.pid == live.pid and me.uid == os.getuid()
        assert not procfs.signal_recorded(live.pid, me.start, me.uid + 1, signal.SIGTERM)
        assert not procfs.signal_recorded(live.pid, str(int(me.start) + 1), me.uid, 15)
        assert not procfs.signal_recorded(live.pid, None, me.uid, signal.SIGTERM)
        assert not procfs.signal_recorded(live.pid, me.start, None, signal.SIGTERM)
        assert live.poll() is None
        assert procfs.signal_recorded(live.pid, me.start, me.uid, signal.SIGTERM)
        assert live.wait(timeout=60) == -signal.SIGTERM
        assert not procfs.signal_recorded(live.pid, me.start, me.uid, signal.SIGTERM)  # gone
    finally:
        live.kill()
        live.wait()


def test_a_thread_id_and_this_process_are_never_signalled(path: str) -> None:
    tid: list[int] = []
    started, stop = threading.Event(), threading.Event()

    def body() -> None:
        tid.append(threading.get_native_id())
        started.set()
        stop.wait()

    t = threading.Thread(target=body)
    t.start()
    try:
        started.wait()
        ids = procfs.ids(tid[0])
        assert ids is not None and ids[0] == os.getpid() != tid[0]  # a thread of this process
        assert procfs.identify(tid[0]) is None
        st = procfs.read_stat(tid[0])
        assert st is not None
        assert not procfs.signal_recorded(tid[0], st.starttime, os.getuid(), signal.SIGTERM)
        me = procfs.identify(os.getpid())
        assert me is not None
        assert not procfs.signal_recorded(me.pid, me.start, me.uid, signal.SIGTERM)
    finally:
        stop.set()
        t.join()
