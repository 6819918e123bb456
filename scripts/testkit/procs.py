"""The kit's child processes: waiting for one with a deadline while reading its output, and
ending its whole process group.

The kit starts its processes (`cs -c`, a user's script) in a session of their own, so one
signal to the group reaches whatever they started too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from typing import Any

__all__ = ["communicate", "kill_group"]


def communicate(
    proc: subprocess.Popen[str], input: str | None, timeout: float, label: str
) -> tuple[str, str, str]:
    """(stdout, stderr, both interleaved by line as they came) of a process, waited for; a
    process still running after `timeout` s is killed with its children (AssertionError)."""
    lock = threading.Lock()
    out: list[str] = []
    err: list[str] = []
    both: list[str] = []

    def pump(stream: Any, mine: list[str]) -> None:
        for line in iter(stream.readline, ""):
            with lock:
                mine.append(line)
                both.append(line)

    readers = [
        threading.Thread(target=pump, args=(stream, mine), daemon=True)
        for stream, mine in ((proc.stdout, out), (proc.stderr, err))
        if stream is not None
    ]
    for reader in readers:
        reader.start()
    if proc.stdin is not None:
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(input or "")
            proc.stdin.close()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        for reader in readers:
            reader.join(5)
        raise AssertionError(
            f"`{label}` did not finish in {timeout:g} s; it was killed.\n"
            f"--- output and errors ---\n{''.join(both)[-6000:]}"
        ) from None
    for reader in readers:  # the pipes end when the last process holding them does
        reader.join(timeout)
    return "".join(out), "".join(err), "".join(both)


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after 3 s."""
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
