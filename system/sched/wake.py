"""Wake-ups for waiting launchers: one FIFO per pending job, so waiting costs nothing.

A launcher whose job is PENDING sleeps in select() on its job's FIFO,
`$CS2_HOME/sched-wake/<job id>` (and on its signal pipe, so Ctrl-C is seen at once). Whoever
commits a change that decides a pending job (a scheduling pass started it, `jobs cancel`
cancelled it) writes one byte into that job's FIFO AFTER the commit; the launcher wakes, reads
its row and goes on. Only the launchers whose job changed are woken: a job ending with 1,000 jobs
queued wakes the one it lets start, not the 1,000.

Why FIFOs: they need no daemon and no polling, work between processes of different users (the
FIFO's mode is the store directory's), and a FIFO whose reader died is detected by the writer
(ENXIO) and removed. The reader opens its own FIFO read-write, so it never sees end-of-file
between writers (select on a read-only FIFO would spin once a writer closed it).

A wake-up is a hint, never the truth: the row in the store is. A peer that crashes between its
commit and its write loses the wake-up; the waiter's slow safety re-check (backend.py) finds the
change anyway.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import stat
from collections.abc import Iterable
from pathlib import Path

from cs2sim.system.paths import shared_dir

__all__ = ["WAKE_DIR", "Waiter", "wake", "wake_path"]

WAKE_DIR = "sched-wake"


def wake_path(home: Path, job_id: int) -> Path:
    """The FIFO a launcher waiting for `job_id` sleeps on."""
    return Path(home) / WAKE_DIR / str(int(job_id))


class Waiter:
    """The FIFO of one pending job, open for select(); `close()` removes it."""

    def __init__(self, home: Path, job_id: int) -> None:
        directory = shared_dir(home, WAKE_DIR)
        self.path = directory / str(int(job_id))
        shared = stat.S_IMODE(directory.stat().st_mode) & 0o022  # who may wake us
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale FIFO of an earlier store with the same job id
        os.mkfifo(self.path, 0o600)
        os.chmod(self.path, 0o600 | shared)
        # O_RDWR: we are a writer ourselves, so the FIFO never reports end-of-file
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)

    def wait(self, timeout: float | None, also: Iterable[int] = ()) -> bool:
        """Sleep until woken, a fd of `also` is readable, or `timeout` s; True if woken."""
        fds = [self.fd, *also]
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            return False
        if self.fd not in ready:
            return False
        with contextlib.suppress(BlockingIOError):
            while os.read(self.fd, 4096):
                pass
        return True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            self.path.unlink()

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wake(home: Path, job_ids: Iterable[int]) -> int:
    """Wake the launchers waiting for `job_ids` (after the commit that decided them); how many
    were woken. Missing FIFOs are fine (no one waits); a FIFO whose reader died is removed."""
    woken = 0
    for job_id in job_ids:
        path = wake_path(home, job_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no reader: its launcher is gone
                with contextlib.suppress(OSError):
                    path.unlink()
            continue  # ENOENT: not waiting; EACCES: another user's, its re-check will see it
        try:
            os.write(fd, b"!")
            woken += 1
        except BlockingIOError:
            woken += 1  # the pipe is full of earlier wake-ups: it is awake already
        except OSError:
            pass
        finally:
            os.close(fd)
    return woken
