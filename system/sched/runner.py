"""Run a job step: every task a real process, output merged like `srun --unbuffered`.

Start-up speed is the design constraint (the Weight Streaming Quickstart's 98 tasks in well under 2
s on 2 cores). Tasks of a Python command (pycmd.classify) are forked from the launcher, which has
already imported what the command needs (`preload`), then `gc.freeze()`d so the children's collector
does not copy the shared heap; each child runs the code with runpy. Other commands are fork + exec.
No thread exists while forking (a fork copies only the calling thread; a lock held by another
would stay locked forever in the child): the output pump runs on the main thread afterwards.

Every task: its own Slurm environment (layout.Task.env), stdout/stderr on pipes to the launcher
(which writes each complete line to its own stdout/stderr and to the task's log file), stdin
/dev/null (Slurm's default for all tasks but the first, which we also close: no task reads the
launcher's terminal except in pty mode), PR_SET_PDEATHSIG so a launcher killed with SIGKILL
takes its tasks with it, and a session of its own (so a terminal's Ctrl-C reaches only the
launcher, which then stops the whole job, and everything the task starts can be found by its
session id). Whatever a task started is ended with the job, before its nodes are freed, on
every path, kill -9 of the launcher included: see guard.py.

Kill-on-bad-exit: the first task to fail is reported as srun does
(`srun: error: <node>: task <id>: Exited with exit code <n>`); the others get SIGTERM, then
SIGKILL after `grace` seconds. The step's exit code is the worst code of the tasks that failed
by themselves (128 + signal for a task killed by a signal), 0 if none did.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import os
import selectors
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cs2sim.system.sched.guard import JobGuard, become_subreaper, end_processes
from cs2sim.system.sched.layout import Task
from cs2sim.system.sched.pycmd import FLOW_ENV, SECRET_ENV, PyCommand, classify, exec_argv

__all__ = ["StepResult", "TaskExit", "run_step", "preload"]

PR_SET_PDEATHSIG = 1
GRACE_S = 2.0  # SIGTERM -> SIGKILL, like Slurm's KillWait (default 30 s; ours is shorter)
READ_CHUNK = 65536

Write = Callable[[str], None]


@dataclass
class TaskExit:
    """How one task ended."""

    procid: int
    node: str
    code: int | None  # exit status, or None when killed by a signal
    signal: int | None
    stopped: bool  # we stopped it (kill-on-bad-exit, Ctrl-C, cancel): not its own failure

    @property
    def failed(self) -> bool:
        return not self.stopped and (self.signal is not None or (self.code or 0) != 0)

    @property
    def status(self) -> int:
        return 128 + self.signal if self.signal is not None else self.code or 0


@dataclass
class StepResult:
    """The step's outcome: per-task exits, the launcher's exit code, and why it stopped."""

    exits: list[TaskExit]
    exit_code: int
    interrupted: int | None = None  # the signal that stopped the launcher (SIGINT / SIGTERM)
    log_dir: Path | None = None
    started_s: float = 0.0  # launcher-side seconds from run_step() to the last task forked
    messages: list[str] = field(default_factory=list)


def preload(modules: tuple[str, ...]) -> list[str]:
    """Import `modules` in the launcher so forked tasks share them; returns those that failed."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a preload is an optimisation: the task imports it
            missing.append(name)
    return missing


def _libc_prctl() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl: Callable[[int, int], int] = libc.prctl
        return prctl
    except (OSError, AttributeError):
        return None


def _child_common(
    task: Task, out_w: int, err_w: int, session: bool, prctl: Callable[[int, int], int] | None
) -> None:
    """In the child, before running anything: its session, death signal, fds, signals."""
    if session:
        with contextlib.suppress(OSError):
            os.setsid()  # session id = this task's pid: its descendants carry it
    if prctl is not None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if out_w >= 0:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(devnull)


def _run_python(cmd: PyCommand, env: dict[str, str]) -> int:
    """Run the command's code as __main__ in this (forked) interpreter; its exit status."""
    import io
    import runpy

    os.environ.clear()
    os.environ.update(env)
    # A fresh `python` ignores SIGPIPE (a write to a closed socket raises BrokenPipeError); this
    # forked interpreter had it reset to the default for exec'd commands, under which a streamer
    # writing to a chief that just ended would be killed by the signal instead.
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # unbuffered text streams on the new fds (srun --unbuffered; the launcher merges lines)
    sys.stdout = io.TextIOWrapper(
        os.fdopen(1, "wb", buffering=0, closefd=False), write_through=True, line_buffering=True
    )
    sys.stderr = io.TextIOWrapper(
        os.fdopen(2, "wb", buffering=0, closefd=False),
        write_through=True,
        line_buffering=True,
        errors="backslashreplace",
    )
    sys.stdin = open(os.devnull)  # noqa: SIM115 - lives as long as the task
    sys.argv = [cmd.argv0, *cmd.args]
    try:
        if cmd.kind == "script":
            if not os.path.exists(cmd.target):
                path = os.path.abspath(cmd.target)
                # what python itself says (the task's own stderr, not the launcher's)
                sys.stderr.write(
                    f"{sys.executable}: can't open file {path!r}: [Errno 2] No "
                    "such file or directory\n"
                )
                return 2
            sys.path[0] = os.path.dirname(os.path.abspath(cmd.target))
            runpy.run_path(cmd.target, run_name="__main__")
        elif cmd.kind == "module":
            sys.path[0] = os.getcwd()
            runpy.run_module(cmd.target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = ""
            code = compile(cmd.target, "<string>", "exec")
            exec(code, {"__name__": "__main__", "__builtins__": __builtins__})  # noqa: S102
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code & 0xFF
        sys.stderr.write(f"{e.code}\n")  # sys.exit("message"), as python prints it
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
    except BaseException as e:  # noqa: BLE001 - the task's own error: show it as python would
        _print_user_traceback(e)
        return 1
    return 0


def _print_user_traceback(e: BaseException) -> None:
    """The traceback python itself would print: without the launcher's and runpy's frames."""
    import runpy
    import traceback

    skip = {__file__, runpy.__file__, "<frozen runpy>"}
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in skip:
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _child(
    task: Task,
    argv: tuple[str, ...],
    pycmd: PyCommand | None,
    base_env: dict[str, str],
    fds: tuple[int, int],
    session: bool,
    prctl: Callable[[int, int], int] | None,
    keep_fds: set[int],
    go: int,
) -> None:
    """Body of a forked task; never returns."""
    code = 1
    try:
        _child_common(task, fds[0], fds[1], session, prctl)
        for fd in keep_fds:  # the other tasks' pipe ends and the launcher's files
            with contextlib.suppress(OSError):
                os.close(fd)
        # wait until every task is forked: a running task would take the CPU from the fork loop
        # (2 cores, 98 tasks); all start together when the launcher closes the pipe's write end
        os.read(go, 1)
        os.close(go)
        env = {**base_env, **task.env, "SLURM_TASK_PID": str(os.getpid())}
        if pycmd is not None:
            if pycmd.flow:
                env[FLOW_ENV] = pycmd.flow
            env.setdefault("PYTHONUNBUFFERED", "1")
            code = _run_python(pycmd, env)
        else:
            exe, extra = exec_argv(argv)
            env.update(extra)
            env.setdefault("PYTHONUNBUFFERED", "1")
            try:
                os.execvpe(exe[0], exe, env)
            except OSError as e:
                os.write(2, f"slurmstepd: error: execve(): {exe[0]}: {e.strerror}\n".encode())
                code = 2
    except BaseException:  # noqa: BLE001 - nothing may escape a forked child
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _signal_text(sig: int) -> str:
    names: dict[int, str] = {
        signal.SIGTERM: "Terminated",
        signal.SIGKILL: "Killed",
        signal.SIGSEGV: "Segmentation fault",
        signal.SIGINT: "Interrupt",
    }
    return names.get(sig, signal.Signals(sig).name)


def _exit_text(ex: TaskExit) -> str:
    if ex.signal is not None:
        return _signal_text(ex.signal)
    return f"Exited with exit code {ex.code}"


def _id_ranges(ids: list[int]) -> str:
    ids = sorted(ids)
    parts = []
    start = prev = ids[0]
    for i in ids[1:]:
        if i == prev + 1:
            prev = i
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        start = prev = i
    parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


class _Step:
    """The running step: children, pipes, logs."""

    def __init__(
        self,
        tasks: list[Task],
        argv: tuple[str, ...],
        log_dir: Path | None,
        out: Write,
        err: Write,
        pty: bool,
    ) -> None:
        self.tasks = tasks
        self.argv = argv
        self.log_dir = log_dir
        self.out = out
        self.err = err
        self.pty = pty
        self.pids: dict[int, Task] = {}
        self.exits: dict[int, TaskExit] = {}
        self.stopping: set[int] = set()  # procids we signalled
        self.sids: set[int] = set()  # every task's session (its pid), pty mode aside
        self.close_in_child: set[int] = set()  # the guard's pipe: no task may hold it
        self.exclude: set[int] = set()  # the launcher's children that are not the job's
        self.sel = selectors.DefaultSelector()
        self.partial: dict[tuple[int, int], bytes] = {}
        self.logs: dict[int, int] = {}

    def start(self, base_env: dict[str, str]) -> None:
        pycmd = classify(self.argv)
        prctl = _libc_prctl()
        if self.log_dir is not None:  # the job's user's alone: 0700, its logs 0600
            self.log_dir.parent.mkdir(parents=True, exist_ok=True)
            self.log_dir.mkdir(mode=0o700, exist_ok=True)
        pipes: list[tuple[int, int, int, int]] = []
        for task in self.tasks:
            if self.pty:
                pipes.append((-1, -1, -1, -1))
                continue
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            pipes.append((out_r, out_w, err_r, err_w))
            if self.log_dir is not None:
                path = self.log_dir / f"task-{task.procid}.log"
                self.logs[task.procid] = os.open(
                    path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600
                )
        sys.stdout.flush()
        sys.stderr.flush()
        gc.collect()
        gc.freeze()  # the shared heap stays shared: children's collections skip it
        go_r, go_w = os.pipe()
        try:
            for task, (out_r, out_w, err_r, err_w) in zip(self.tasks, pipes, strict=True):
                # the child closes every pipe end but its own two write ends
                others = {fd for p in pipes for fd in p if fd >= 0} - {out_w, err_w}
                others |= set(self.logs.values()) | {go_w}
                pid = os.fork()
                if pid == 0:
                    _child(
                        task,
                        self.argv,
                        pycmd,
                        base_env,
                        (out_w, err_w),
                        not self.pty,
                        prctl,
                        others | self.close_in_child,
                        go_r,
                    )
                self.pids[pid] = task
                if out_w >= 0:
                    os.close(out_w)
                    os.close(err_w)
                    self.sel.register(out_r, selectors.EVENT_READ, (task.procid, 1))
                    self.sel.register(err_r, selectors.EVENT_READ, (task.procid, 2))
            self.sids = set(self.pids) if not self.pty else set()
            self._write_pids()
        finally:
            os.close(go_w)  # go: every task starts now
            os.close(go_r)
            gc.unfreeze()

    def _write_pids(self) -> None:
        """The step's processes, as `scontrol listpids` lists them (plus the node): tools and
        the testing kit find a job's tasks here (a forked task's /proc environ is its parent's)."""
        if self.log_dir is None:
            return
        rows = ["PID JOBID STEPID LOCALID GLOBALID NODE"] + [
            f"{pid} {task.env.get('SLURM_JOB_ID', '-')} 0 {task.localid} {task.procid} {task.node}"
            for pid, task in self.pids.items()
        ]
        tmp = self.log_dir / ".pids.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(rows) + "\n")
        os.replace(tmp, self.log_dir / "pids")

    # -- output -----------------------------------------------------------------------------
    def pump(self, timeout: float) -> None:
        """Move available output to the launcher's streams and the task logs."""
        for key, _ in self.sel.select(timeout):
            procid, stream = key.data
            try:
                data = os.read(key.fd, READ_CHUNK)
            except OSError:
                data = b""
            if not data:
                self.sel.unregister(key.fd)
                os.close(key.fd)
                rest = self.partial.pop((procid, stream), b"")
                if rest:
                    self._emit(procid, stream, rest + b"\n")
                continue
            buf = self.partial.get((procid, stream), b"") + data
            cut = buf.rfind(b"\n") + 1
            self.partial[(procid, stream)] = buf[cut:]
            if cut:
                self._emit(procid, stream, buf[:cut])

    def _emit(self, procid: int, stream: int, data: bytes) -> None:
        fd = self.logs.get(procid)
        if fd is not None:
            os.write(fd, data)
        text = data.decode("utf-8", "backslashreplace")
        (self.out if stream == 1 else self.err)(text)

    # -- exits ------------------------------------------------------------------------------
    def reap(self) -> list[TaskExit]:
        """Collect exited children (non-blocking)."""
        done = []
        while self.pids:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            task = self.pids.pop(pid, None)
            if task is None:
                continue
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            stopped = task.procid in self.stopping
            if stopped and code == 0:
                stopped = False  # it finished cleanly anyway
            ex = TaskExit(task.procid, task.node, code, sig, stopped)
            self.exits[task.procid] = ex
            done.append(ex)
        return done

    def signal_all(self, sig: int) -> None:
        """Signal every running task's whole process group (the task and what it started)."""
        for pid, task in list(self.pids.items()):
            self.stopping.add(task.procid)
            if not self.pty:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)  # its group: the task is its session's leader
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)  # a task that has not reached its setsid yet

    def end_leftovers(self) -> int:
        """SIGKILL what the tasks left behind (their sessions; orphans re-parented to us)."""
        if self.pty:
            return end_processes(set(), parent=os.getpid(), exclude=self.exclude)
        return end_processes(self.sids, parent=os.getpid(), exclude=self.exclude)

    def close(self) -> None:
        for key in list(self.sel.get_map().values()):
            with contextlib.suppress(OSError):
                os.close(key.fd)
        self.sel.close()
        for fd in self.logs.values():
            os.close(fd)


def run_step(
    tasks: list[Task],
    argv: tuple[str, ...],
    *,
    job_id: int,
    out: Write,
    err: Write,
    log_dir: Path | None = None,
    base_env: dict[str, str] | None = None,
    kill_on_bad_exit: bool = True,
    pty: bool = False,
    stop_requested: Callable[[], int | None] = lambda: None,
    grace: float = GRACE_S,
    on_started: Callable[[float], None] | None = None,
    guard: JobGuard | None = None,
) -> StepResult:
    """Start every task, merge their output, enforce kill-on-bad-exit, wait for all; then end
    whatever the tasks left running (guard.py), so the caller may free the nodes.

    `stop_requested()` is polled: a signal number (SIGINT on Ctrl-C, SIGTERM on cancel) stops
    the step. Messages go to `err` exactly as srun words them. `guard` (the job's guard.py
    process) learns the tasks' sessions, to end them if this launcher is killed.
    """
    t0 = time.perf_counter()
    step = _Step(tasks, argv, log_dir, out, err, pty)
    env = dict(os.environ if base_env is None else base_env)
    result = StepResult([], 0, log_dir=log_dir)
    first_bad: TaskExit | None = None
    if guard is not None:
        step.close_in_child.add(guard.fd)
        step.exclude.add(guard.pid)
    become_subreaper()  # orphans of the tasks' processes come to us, not to init
    cleaned = False
    try:
        step.start(env)
        if guard is not None:
            marker = f"{SECRET_ENV}={env[SECRET_ENV]}" if env.get(SECRET_ENV) else None
            guard.watch(sorted(step.sids), marker)
        result.started_s = time.perf_counter() - t0
        if on_started is not None:
            on_started(result.started_s)
        kill_at: float | None = None
        while step.pids or step.sel.get_map():
            step.pump(0.02 if step.pids else 0.2)
            for ex in step.reap():
                if ex.failed and first_bad is None:
                    first_bad = ex
                    err(f"srun: error: {ex.node}: task {ex.procid}: {_exit_text(ex)}\n")
                    if kill_on_bad_exit and step.pids:
                        err(f"srun: Terminating StepId={job_id}.0\n")
                        step.signal_all(signal.SIGTERM)
                        kill_at = time.monotonic() + grace
            sig = stop_requested() if result.interrupted is None else None
            if sig is not None and step.pids:
                result.interrupted = sig
                err(
                    f"srun: Job step aborted: Waiting up to {grace:g} seconds for job step "
                    "to finish.\n"
                )
                step.signal_all(signal.SIGINT if sig == signal.SIGINT else signal.SIGTERM)
                kill_at = time.monotonic() + grace
            if kill_at is not None and time.monotonic() > kill_at and step.pids:
                step.signal_all(signal.SIGKILL)
                kill_at = None
            if not step.pids and not cleaned:
                step.end_leftovers()  # what the tasks started ends with them
                cleaned = True
            _drain(step)
    finally:
        _kill_remaining(step)
        step.end_leftovers()  # on every path: no process of the job outlives the step
        step.close()
    result.exits = [step.exits[t.procid] for t in tasks if t.procid in step.exits]
    _report_later_exits(result.exits, first_bad, err)
    _settle_exit_code(result)
    return result


def _drain(step: _Step) -> None:
    """Read what the tasks wrote last; once all ended, close pipes only grandchildren hold."""
    if not step.pids and step.sel.get_map():
        step.pump(0.05)  # drain what the last tasks wrote
        if not step.pids:
            for key in list(step.sel.get_map().values()):  # grandchildren hold pipes
                step.sel.unregister(key.fd)
                os.close(key.fd)


def _kill_remaining(step: _Step) -> None:
    """An exception in the launcher: no task outlives it (killed and reaped)."""
    if step.pids:
        step.signal_all(signal.SIGKILL)
        while step.pids:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            step.pids.pop(pid, None)


def _report_later_exits(exits: list[TaskExit], first_bad: TaskExit | None, err: Write) -> None:
    """The exits after the first failure, grouped per node as srun does:
    "srun: error: n1: tasks 2-4: Terminated"."""
    later = [e for e in exits if (e.stopped or e.failed) and e is not first_bad]
    by_node: dict[tuple[str, str], list[int]] = {}
    for e in later:
        by_node.setdefault((e.node, _exit_text(e)), []).append(e.procid)
    for (node, text), ids in by_node.items():
        word = "task" if len(ids) == 1 else "tasks"
        err(f"srun: error: {node}: {word} {_id_ranges(ids)}: {text}\n")


def _settle_exit_code(result: StepResult) -> None:
    """The step's exit code: the worst failed task's, else 128 + the stopping signal."""
    failed = [e.status for e in result.exits if e.failed]
    if failed:
        result.exit_code = max(failed)
    elif result.interrupted is not None:
        result.exit_code = 128 + result.interrupted
