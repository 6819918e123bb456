"""Make a process id come back: run as `python pid_reuse.py TARGET MODE`, this cycles the
kernel's ids (creating short-lived threads, or processes) until one of its own is TARGET, then
prints `got` and keeps it alive until its stdin closes. Modes:

- `thread`: a thread of this process gets TARGET as its id (what an attacker waits for: the
  kernel hands pids and thread ids out of one counter);
- `process`: a child process gets TARGET as its pid (thread ids are cycled up to TARGET - 1,
  then a child forked, which is much faster than forking every id);
- `before`: the ids are cycled up to TARGET - 1 and `ready` printed, so the NEXT id the kernel
  hands out (to whatever asks first: the test then makes another process start a thread) is
  TARGET; each line read on stdin cycles round again.

Where this process may (CAP_SYS_ADMIN: root, as the tests run in CI), the counter is set
instead of cycled: writing N to /proc/sys/kernel/ns_last_pid makes N + 1 the next id handed out
(how CRIU restores a process's pid; "ns_last_pid" in proc(5)), which takes a millisecond where
cycling 32,768 ids takes seconds, and minutes on a loaded machine. Cycling remains the way in
when the write is refused.

Bounded: if the counter passes TARGET twice without handing it to us (another process holds it,
or took it first), it prints `missed` and exits 1; the test then skips with that reason. Ids
are allocated in increasing order, wrapping at /proc/sys/kernel/pid_max (see "pid_max" in
proc(5): https://man7.org/linux/man-pages/man5/proc.5.html).
"""

from __future__ import annotations

import os
import sys
import threading


def _next_thread_id(keep_if: int | None) -> tuple[int, threading.Event | None]:
    """Start a thread, learn its id; keep it running (blocked) if its id is `keep_if`."""
    got: list[int] = []
    seen = threading.Event()
    hold = threading.Event()

    def body() -> None:
        got.append(threading.get_native_id())
        seen.set()
        if got[0] == keep_if:
            hold.wait()

    t = threading.Thread(target=body, daemon=True)
    t.start()
    seen.wait()
    if got[0] != keep_if:
        t.join()
        return got[0], None
    return got[0], hold


def _next_process_id(keep_if: int) -> int:
    """Fork a child, learn its pid; the child stays (until stdin closes) if its pid is
    `keep_if`, else exits at once."""
    pid = os.fork()
    if pid == 0:
        if os.getpid() == keep_if:
            sys.stdout.write("got\n")
            sys.stdout.flush()
            sys.stdin.read()
        os._exit(0)
    if pid != keep_if:
        os.waitpid(pid, 0)
    return pid


def _set_last(pid: int) -> bool:
    """Make pid + 1 the next id the kernel hands out; False where this process may not."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid))
        return True
    except OSError:
        return False


def _hold(hold: threading.Event) -> None:
    sys.stdout.write("got\n")
    sys.stdout.flush()
    sys.stdin.read()  # the thread lives until the test is done
    hold.set()


def set_counter(target: int, mode: str) -> bool:
    """`cycle`'s result by setting the counter (a few tries: another process may take the id
    between the write and our thread or fork); False where the write is refused."""
    for _ in range(20):
        if not _set_last(target - 1):
            return False
        if mode == "before":
            return True
        if mode == "thread":
            _, hold = _next_thread_id(target)
            if hold is not None:
                _hold(hold)
                return True
        elif _next_process_id(target) == target:
            os.waitpid(target, 0)  # the child printed `got` and lived until stdin closed
            return True
    return False


def cycle(target: int, mode: str) -> bool:
    """Cycle ids until ours is `target` (`thread`, `process`) or `target - 1` (`before`);
    False if the counter went past it twice."""
    if set_counter(target, mode):
        return True
    stop = target if mode == "thread" else target - 1
    passes = 0
    last = os.getpid()
    while True:
        now, hold = _next_thread_id(target if mode == "thread" else None)
        if hold is not None:  # a thread of ours has the target id
            _hold(hold)
            return True
        if now == stop and mode == "before":
            return True
        if now == stop and mode == "process":
            now = _next_process_id(target)  # the next id: the target, unless taken first
            if now == target:
                os.waitpid(now, 0)  # the child printed `got` and lived until stdin closed
                return True
        if last < target <= now or (now < last and (target > last or target <= now)):
            passes += 1  # went past it (someone else holds it, or took it first)
            if passes >= 2:
                return False
        last = now


def main() -> int:
    target, mode = int(sys.argv[1]), sys.argv[2]
    while True:
        if not cycle(target, mode):
            sys.stdout.write("missed\n")
            sys.stdout.flush()
            return 1
        if mode != "before":
            return 0
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        if not sys.stdin.readline():
            return 0


if __name__ == "__main__":
    sys.exit(main())
