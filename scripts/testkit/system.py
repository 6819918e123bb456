"""`ThrowawaySystem`: a simulated CS-2 that lives for one test.

Everything cs2sim knows about a system lives under $CS2_HOME (the SQLite store with the state,
modes, audit log, accounts and jobs; the console's history) plus the cluster description. A
throwaway system is a fresh $CS2_HOME in its own temporary directory, handed to every process
it starts through `env`, so two tests (or two pytest-xdist workers) never share anything and
nothing of the user's own ~/.cs2sim is touched. It never changes os.environ. `env` also puts
cs2sim's console scripts and this Python first on PATH, as an activated venv would: a user's
script that calls `cs` or `csrun_wse` finds them even when the tests run from a venv nobody
activated.

Setting up a test's starting point goes through the store directly (`put_in`), one transaction
with an audit row by the user "testkit", so a test does not wait for reboots and the audit log
still explains every state the system was in.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from cs2sim.scripts.testkit.procs import communicate, kill_group
from cs2sim.scripts.testkit.result import CsResult

if TYPE_CHECKING:  # the console module imports pexpect, which a kit user may not need
    from cs2sim.scripts.testkit.console import ConsoleSession
    from cs2sim.scripts.testkit.faults import FaultTimer
    from cs2sim.scripts.testkit.launch import LaunchResult
    from cs2sim.system.jobs import Job
    from cs2sim.system.machine import Machine, SystemStatus
    from cs2sim.system.sched.queue_rows import QueueJob
    from cs2sim.system.store import Store

__all__ = ["ThrowawaySystem", "KIT_USER"]

KIT_USER = "testkit"  # who the audit log names for a state set up by the kit


class ThrowawaySystem:
    """A CS-2 (and its cluster) of its own, in a temporary directory; `close()` removes it.

    cluster: None for cs2sim's built-in cluster (system ``cs2-1`` at 127.0.1.1, 16 CPU nodes),
             a mapping in the cluster.yaml schema, or a path to such a file.
    boot_seconds: how long `system activate` reboots (default 0: instant).
    root: where to make the directory (default: the system's temporary directory).
    """

    def __init__(
        self,
        *,
        cluster: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        boot_seconds: float = 0.0,
        root: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="cs2kit-", dir=root))
        self.home = self.root / "cs2home"
        self.boot_seconds = boot_seconds
        self._processes: list[subprocess.Popen[Any]] = []
        self._consoles: list[Any] = []
        self._held: dict[int, subprocess.Popen[Any]] = {}
        self._closed = False
        base = dict(os.environ if env is None else env)
        for leaked in ("CS2_CLUSTER", "CS2SIM_FLOW"):  # never inherit the caller's setup
            base.pop(leaked, None)
        self.env: dict[str, str] = {
            **base,
            "CS2_HOME": str(self.home),
            "CS2_BOOT_SECONDS": f"{boot_seconds:g}",
            "PATH": _with_scripts(base.get("PATH", os.defpath)),
        }
        self.home.mkdir(mode=0o700)
        if cluster is not None:  # $CS2_HOME/cluster.yaml: found by cs, launchers and runs alike
            self._cluster_file(cluster)
        self._store: Store | None = None

    # -- the system -----------------------------------------------------------------------------
    def _cluster_file(self, cluster: Mapping[str, Any] | str | os.PathLike[str]) -> Path:
        path = self.home / "cluster.yaml"
        if isinstance(cluster, Mapping):
            path.write_text(yaml.safe_dump(dict(cluster), sort_keys=False))
        else:
            shutil.copyfile(cluster, path)
        return path

    @property
    def store(self) -> Store:
        """The system's store (system.store.Store), opened on first use."""
        if self._store is None:
            from cs2sim.system.store import Store

            self._store = Store.open(self.home)
        return self._store

    def machine(self, name: str | None = None) -> Machine:
        """A system.machine.Machine for system `name` (default: the cluster's first)."""
        from cs2sim.system.machine import Machine

        # A $CS2_CLUSTER of the caller's would win over ours (system/cluster.py): hide it.
        old = os.environ.pop("CS2_CLUSTER", None)
        try:
            return Machine(self.store, name)
        finally:
            if old is not None:
                os.environ["CS2_CLUSTER"] = old

    @property
    def name(self) -> str:
        """The (first) system's name, e.g. cs2-1."""
        return str(self.machine().name)

    @property
    def ip(self) -> str:
        """The (first) system's IP, as a user passes it to `--cs_ip`."""
        return str(self.machine().ip)

    def status(self, name: str | None = None) -> SystemStatus:
        """The system's SystemStatus now (state, configured/active mode, running jobs)."""
        return self.machine(name).status()

    @property
    def state(self) -> str:
        """The system's state now: ACTIVE, STANDBY, ACTIVATING or FAULT."""
        return str(self.status().state)

    @property
    def active_mode(self) -> str:
        """The mode the system last booted into: PIPELINED or WEIGHT_STREAMING."""
        return str(self.status().active_mode)

    @property
    def configured_mode(self) -> str:
        """The mode `config execmode setup` chose (active after the next activation)."""
        return str(self.status().configured_mode)

    def put_in(
        self,
        state: str,
        mode: str | None = None,
        *,
        configured: str | None = None,
        reason: str = "injected by the test kit",
        name: str | None = None,
        ready_in: float | None = None,
    ) -> SystemStatus:
        """Put the system straight into `state` (ACTIVE, STANDBY, ACTIVATING or FAULT).

        mode: the active mode (PIPELINED or WEIGHT_STREAMING; default: unchanged).
        configured: the configured mode (default: the same as the active mode).
        ready_in: for ACTIVATING, seconds until the reboot completes (default boot_seconds).
        One transaction, audited as the user "testkit"; returns the new SystemStatus.
        """
        from cs2sim.system import audit, changes
        from cs2sim.system.state import ExecMode, State

        target = State(state.upper())
        machine = self.machine(name)
        now = time.time()
        with self.store.transaction() as db:
            row = changes.read_row(db, machine.name)
            active = ExecMode(_mode(mode)) if mode else row.active_mode
            chosen = ExecMode(_mode(configured)) if configured else active
            updates: dict[str, Any] = {
                "state": target,
                "state_since": now,
                "active_mode": active,
                "configured_mode": chosen,
                "activating_until": None,
                "fault_reason": None,
            }
            if target is State.ACTIVATING:
                updates["activating_until"] = now + (
                    self.boot_seconds if ready_in is None else ready_in
                )
            if target is State.FAULT:
                updates["fault_reason"] = reason
            changes.write_row(db, machine.name, updates)
            audit.record(
                db,
                user=KIT_USER,
                system=machine.name,
                command="testkit put_in",
                from_state=row.state,
                to_state=target,
                detail=f"active {active}, configured {chosen}"
                + (f"; {reason}" if target is State.FAULT else ""),
                at=now,
            )
        return machine.status()

    def hold_job(
        self,
        mode: str | None = None,
        *,
        user: str = "someone",
        command: str = "held by testkit",
        name: str | None = None,
    ) -> Job:
        """A RUNNING job on the system, as if another user's run were going on.

        A real process (a sleeper started by the kit) is registered as the job, so the store's
        liveness rule holds: stop it with `release_job(job)` (the job then reads FAILED, as
        after a kill) or let `close` do it. mode: default the system's active mode. Returns the
        system.jobs.Job. The system must be ACTIVE in that mode, as for any job.
        """
        from cs2sim.system.state import ExecMode
        from cs2sim.system.users import Identity, Role

        machine = self.machine(name)
        run_mode = ExecMode(_mode(mode)) if mode else machine.status().active_mode
        proc = self.start([sys.executable, "-c", "import time; time.sleep(86400)"])
        job = machine.register_job(
            Identity(user, Role.USER, "testkit"), run_mode, command, proc.pid
        )
        self._held[job.id] = proc
        return job

    def release_job(self, job: Job) -> None:
        """End a job from `hold_job`: its process is killed, so the store sees it FAILED."""
        proc = self._held.pop(job.id)
        kill_group(proc)

    def audit(self, last: int | None = None) -> list[Any]:
        """The audit log, oldest first, the newest `last` rows (all for None): frozen
        `AuditEntry` records (cs2sim.system.audit) with the fields `id`, `at` (epoch seconds),
        `user`, `system` ("" when not about one), `command` (e.g. "system standby"),
        `from_state`, `to_state`, `outcome` ("ok", "denied", "refused" or "error") and
        `detail`."""
        return list(self.machine().audit(last))

    # -- processes ------------------------------------------------------------------------------
    def cs(
        self,
        command: str | None = None,
        *args: str,
        input: str | None = None,
        user: str | None = None,
        password: str | None = None,
        timeout: float = 60,
    ) -> CsResult:
        """Run `cs -c COMMAND` (or `cs ARGS...` when command is None) against this system.

        user/password: log in as an account (the password goes through a 0600 file, as a
        script would pass it). input: text on stdin (e.g. commands, one per line, with no -c).
        """
        argv: list[str] = []
        if user is not None:
            argv += ["--user", user]
            if password is not None:
                pw = self.root / f".pw-{user}"
                pw.write_text(password + "\n")
                pw.chmod(0o600)
                argv += ["--password-file", str(pw)]
        if command is not None:
            argv += ["-c", command]
        argv += list(args)
        return self.run(
            [sys.executable, "-m", "cs2sim.csshell", *argv],
            input=input,
            timeout=timeout,
            label=f"cs {' '.join(argv)}",
        )

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 300,
        cwd: str | os.PathLike[str] | None = None,
        label: str | None = None,
    ) -> CsResult:
        """Run any command (a launcher, your own script) with this system's environment."""
        proc = subprocess.Popen(
            list(argv),
            env=self.env,
            cwd=cwd,
            text=True,
            start_new_session=True,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._processes.append(proc)
        out, err, both = communicate(proc, input, timeout, label or " ".join(argv))
        return CsResult(label or " ".join(argv), out, err, proc.returncode, both)

    def start(
        self, argv: Sequence[str], *, cwd: str | os.PathLike[str] | None = None
    ) -> subprocess.Popen[str]:
        """Start a command in the background (stopped, with its children, by `close`)."""
        proc = subprocess.Popen(
            list(argv),
            env=self.env,
            cwd=cwd,
            text=True,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._processes.append(proc)
        return proc

    # -- launchers ------------------------------------------------------------------------------
    def model_copy(self, model: str) -> Path:
        """A working copy of a Model Zoo model (run.py + configs/) in this system's directory."""
        from cs2sim.scripts.testkit.launch import model_copy

        return model_copy(self.root, model)

    def csrun_wse(
        self, *argv: str, cwd: str | os.PathLike[str] | None = None, timeout: float = 600
    ) -> LaunchResult:
        """Run `csrun_wse ARGV...` on this system's cluster; a LaunchResult (output, exit code,
        the job as `jobs show` records it, every task's log, the model_dir the command names)."""
        return self._launch("csrun_wse", argv, cwd, timeout)

    def csrun_cpu(
        self, *argv: str, cwd: str | os.PathLike[str] | None = None, timeout: float = 600
    ) -> LaunchResult:
        """Run `csrun_cpu ARGV...` (one CPU node; never the CS-2); a LaunchResult."""
        return self._launch("csrun_cpu", argv, cwd, timeout)

    @staticmethod
    def tool_path(word: str) -> str:
        """The path of an installed cs2sim console script (csrun_wse, csrun_cpu, cs, ...)."""
        from cs2sim.scripts.testkit.launch import launcher

        return launcher(word)

    def start_launch(
        self, word: str, *argv: str, cwd: str | os.PathLike[str] | None = None
    ) -> subprocess.Popen[str]:
        """Start `csrun_wse`/`csrun_cpu` in the background (for faults and queue views)."""
        from cs2sim.scripts.testkit.launch import launcher

        return self.start([launcher(word), *argv], cwd=cwd)

    def finish_launch(
        self,
        proc: subprocess.Popen[str],
        argv: Sequence[str] = (),
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 600,
    ) -> LaunchResult:
        """Wait for a launcher from `start_launch`; its LaunchResult."""
        from cs2sim.scripts.testkit.launch import LaunchResult, find_job, named_model_dir, task_logs

        args = proc.args  # start() gives a list; Popen also takes one string or path
        command = " ".join(map(str, args)) if isinstance(args, list | tuple) else str(args)
        out, err, both = communicate(proc, None, timeout, command)
        job = find_job(self.store, proc.pid)
        where = Path(cwd) if cwd is not None else Path.cwd()
        return LaunchResult(
            command,
            out,
            err,
            proc.returncode,
            both,
            job=job,
            tasks=task_logs(self.home, job.id) if job is not None else {},
            model_dir=named_model_dir(list(argv), where),
        )

    def _launch(self, word: str, argv: Sequence[str], cwd: Any, timeout: float) -> LaunchResult:
        proc = self.start_launch(word, *argv, cwd=cwd)
        return self.finish_launch(proc, argv, cwd, timeout)

    def jobs(self, all_states: bool = True) -> list[QueueJob]:
        """The scheduler's queue (`jobs show --all`): system.sched.queue.QueueJob rows."""
        from cs2sim.system.sched import queue

        return list(queue.jobs(self.store, all_states=all_states))

    def running_job(self) -> QueueJob | None:
        """The launched job RUNNING on the cluster now (a QueueJob; the newest), or None.
        Answers at once; `wait_for_running_job` waits for one."""
        running = [j for j in self.jobs(all_states=False) if j.state == "RUNNING"]
        return running[-1] if running else None

    def wait_for_running_job(self, timeout: float = 60) -> QueueJob:
        """Wait until a launched job is RUNNING on the cluster; that job (QueueJob).
        AssertionError if none is within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.running_job()
            if job is not None:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"no job was RUNNING within {timeout:g} s")
            time.sleep(0.05)

    # -- faults (scripts/testkit/faults.py says what a real CS-2 shows for each) -----------------
    def fault_when_running(
        self,
        delay: float = 0.5,
        reason: str = "injected fault: fabric link down",
        timeout: float = 120,
        when: Any = None,
    ) -> FaultTimer:
        """Once a job runs on the system (and `when()` is true, if given), after `delay` s put
        the system in FAULT. Returns a FaultTimer. A job "runs" from its registration, before
        its first step: to have checkpoints to keep, use `fault_after_checkpoint` or
        `fault_at_step`."""
        from cs2sim.scripts.testkit.faults import FaultTimer

        def ready() -> bool:
            return bool(self.status().running_jobs) and (when is None or bool(when()))

        return FaultTimer(
            ready, lambda: self.put_in("FAULT", reason=reason), delay, timeout, "a system fault"
        )

    def fault_after_checkpoint(
        self,
        model_dir: str | os.PathLike[str],
        delay: float = 0.0,
        reason: str = "injected fault: fabric link down",
        timeout: float = 300,
    ) -> FaultTimer:
        """Once a job runs and a NEW checkpoint of a trained step (model-ckpt-<N>.npz, N > 0,
        not in `model_dir` when this was called) is there, after `delay` s put the system in
        FAULT: the run stops at its next step with that checkpoint to resume from."""
        from cs2sim.scripts.testkit.faults import FaultTimer, checkpoint_steps

        where = Path(model_dir)
        before = checkpoint_steps(where)

        def ready() -> bool:
            new = checkpoint_steps(where) - before
            return any(step > 0 for step in new) and bool(self.status().running_jobs)

        return FaultTimer(
            ready,
            lambda: self.put_in("FAULT", reason=reason),
            delay,
            timeout,
            "a system fault after a checkpoint",
        )

    def fault_at_step(
        self, step: int, reason: str = "injected fault: fabric link down", timeout: float = 300
    ) -> FaultTimer:
        """For runs started after this, until the fault happens: the system goes to FAULT just
        before global step `step` (the run itself does it, CS2SIM_FAULT_AT_STEP, so it happens
        at exactly that step). Returns a FaultTimer whose `wait()` is True once the system is in
        FAULT; once it is (or the timer is cancelled or times out) the variables leave the
        system's environment, so later runs are not faulted again."""
        from cs2sim.scripts.testkit.faults import FaultTimer

        if step < 1:
            raise ValueError(f"step must be 1 or more (global steps start at 1), not {step}")
        armed = {"CS2SIM_FAULT_AT_STEP": str(int(step)), "CS2SIM_FAULT_REASON": reason}
        self.env.update(armed)

        def disarm() -> None:  # once it fired, timed out or was cancelled: later runs are clean
            if all(self.env.get(k) == v for k, v in armed.items()):  # not re-armed since
                for key in armed:
                    del self.env[key]

        return FaultTimer(
            lambda: self.state == "FAULT",
            lambda: None,
            0.0,
            timeout,
            f"a system fault at step {step}",
            cleanup=disarm,
        )

    def lose_node(self, node: str, delay: float = 0.5, timeout: float = 120) -> FaultTimer:
        """Once a job has tasks on `node`, after `delay` s kill them all (SIGKILL): the node is
        lost. A FaultTimer; the launcher's kill-on-bad-exit then names the node's task."""
        from cs2sim.scripts.testkit.faults import FaultTimer, job_processes, kill_all

        state: dict[str, Any] = {}

        def ready() -> bool:
            running = [j for j in self.jobs(all_states=False) if j.state == "RUNNING"]
            for job in running:
                if job_processes(self.home, job, node=node):
                    state["job"] = job
                    return True
            return False

        def act() -> None:
            if not kill_all(job_processes(self.home, state["job"], node=node)):
                raise RuntimeError(f"no task was left on {node} to kill")

        return FaultTimer(ready, act, delay, timeout, f"the loss of node {node}")

    def stall_streamer(
        self, delay: float = 0.5, timeout_s: float = 5.0, wait: float = 120
    ) -> FaultTimer:
        """Once a job's input streamers run, after `delay` s stop one (SIGSTOP): a hung input
        worker. Sets the chief's streamer timeout to `timeout_s` for runs started after this."""
        from cs2sim.scripts.testkit.faults import FaultTimer, job_processes, kill_all

        self.env["CS2SIM_STREAMER_TIMEOUT"] = f"{timeout_s:g}"
        state: dict[str, Any] = {}

        def ready() -> bool:
            for job in self.jobs(all_states=False):
                running = job.state == "RUNNING"
                found = job_processes(self.home, job, streamers=True) if running else []
                if found:
                    state["pid"] = found[0]
                    return True
            return False

        def act() -> None:
            kill_all([state["pid"]], signal.SIGSTOP)

        return FaultTimer(ready, act, delay, wait, "a hung input streamer")

    def slow_input(self, rounds: int = 2000) -> None:
        """Make every input sample cost real CPU work (`rounds` of SHA-256) for runs started
        after this: an input pipeline slower than the wafer (suspected_input_bottleneck)."""
        self.env["CS2SIM_INPUT_EXTRA_WORK"] = str(int(rounds))

    def console(
        self,
        *args: str,
        user: str | None = None,
        password: str | None = None,
        width: int = 160,
        timeout: float = 15,
    ) -> ConsoleSession:
        """The interactive `cs>` (a ConsoleSession) at its first prompt.

        user: log in as that account (`cs --user NAME`); with `password` the session answers
        the password prompt itself, else it stops at that question (`session.question`) for
        the test to `answer()`. A refused login raises ConsoleError with cs's message."""
        from cs2sim.scripts.testkit.console import ConsoleSession

        login = ("--user", user) if user is not None else ()
        session = ConsoleSession(
            self.env, *login, *args, width=width, timeout=timeout, password=password
        )
        self._consoles.append(session)
        return session

    # -- cleanup --------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every process this system started (and their children), remove its files."""
        if self._closed:
            return
        self._closed = True
        for session in self._consoles:
            session.close()
        for proc in self._processes:
            if proc.poll() is None:
                kill_group(proc)
            for stream in (proc.stdout, proc.stderr, proc.stdin):
                if stream is not None:
                    stream.close()
        if self._store is not None:
            self._store.close()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> ThrowawaySystem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ThrowawaySystem(home={str(self.home)!r})"


def _with_scripts(path: str) -> str:
    """PATH with cs2sim's console scripts (and this Python) first, as an activated venv has it:
    a user's script that calls `cs`, `csrun_wse` or `python` finds this installation's, even
    when the tests run from a venv nobody activated."""
    from cs2sim.scripts.testkit.launch import scripts_dir

    first = [str(scripts_dir()), str(Path(sys.executable).parent)]
    rest = [p for p in path.split(os.pathsep) if p and p not in first]
    return os.pathsep.join(dict.fromkeys(first + rest))


def _mode(text: str) -> str:
    """PIPELINED / WEIGHT_STREAMING from the spellings people use (weight-streaming, ws, ...)."""
    key = text.strip().upper().replace("-", "_").replace(" ", "_")
    return {"WS": "WEIGHT_STREAMING", "PIPELINE": "PIPELINED"}.get(key, key)
