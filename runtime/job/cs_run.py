"""The `--cs_ip` path of run.py: a run on the simulated CS-2 system the flag names.

    gate      the system must exist (IP with or without :9000, or its name), be ACTIVE and be in
              the job's execution mode (`python` / `python-pt` = pipelined, `python-ws` = weight
              streaming: runtime/job/flow.py); otherwise JobRefused (exit 69) before any work,
              naming
              the system, its state and mode and the admin commands that fix it. num_csx must fit.
    register  the job is recorded RUNNING in the store (`system show` in cs> lists it, the toolbar
              counts it); a kill -9 leaves a dead pid that the next reader marks FAILED. Under a
              launcher that registered the job itself ($CS2SIM_JOB_ID), that job is used and the
              launcher records its end.
    compile   runtime/compiler (reused when nothing changed), with the lines of the PSC Neocortex
    run transcript (docs/sources.md).
    train     on PipelinedExecutor or WeightStreamingExecutor; before every step the executor
              asks `watch` whether the system is still ACTIVE in this mode (a store read at most
              every WATCH_S seconds); after a forced `system standby` the run stops before its next
              step with SystemStopped, whose message says what the same command will do once the
              system is active again, from the checkpoints that exist (Trainer.resume_text).
    finish    COMPLETED, CANCELLED (standby, Ctrl-C, SIGTERM) or FAILED, with the outcome in the
              audit log. SIGTERM (`jobs cancel` or scancel of the launched job: srun stops its
              tasks with it) stops the run as Ctrl-C does (`Terminated`); the caller then lets
              the process die of the signal, so srun reports the chief as it does the others.

Test knob (the testing kit's `fault_at_step`, scripts/testkit/faults.py): with
CS2SIM_FAULT_AT_STEP=N in its environment the run puts its system in FAULT just before global
step N (reason from CS2SIM_FAULT_REASON; audited as the user "testkit"), exactly as if the
hardware had failed there, so a test knows which checkpoints exist when the run stops.

Rate and GlobalRate on the console are host measurements (the simulated systems run on this
host's CPU); they are not paced to the compiler's estimate, which is printed once and written to
performance.json as est_samples_per_sec next to the measured samples_per_sec.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cs2sim.runtime.executors.base import QueuedExecutor
from cs2sim.runtime.job.flow import execution_mode, launcher_word
from cs2sim.system import knobs
from cs2sim.system.errors import ConfigError, RuntimeFailure
from cs2sim.system.state import ExecMode, State

if TYPE_CHECKING:  # the compiler is imported when a job compiles
    from cs2sim.runtime.compiler.driver import CompileResult
    from cs2sim.runtime.compiler.io import InputCluster

__all__ = ["CsRun", "SystemStopped", "Terminated", "WATCH_S"]

log = logging.getLogger("cs2sim.run")

WATCH_S = 0.05  # at most this often a step boundary re-reads the system's state
JOB_ENV = "CS2SIM_JOB_ID"  # set by a launcher that registered the job itself (it finishes it)
FAULT_AT_STEP_ENV = "CS2SIM_FAULT_AT_STEP"  # the testing kit's fault (module docstring)
FAULT_REASON_ENV = "CS2SIM_FAULT_REASON"


class Terminated(KeyboardInterrupt):
    """SIGTERM reached a run that holds its CS-2 job: it stops as after Ctrl-C (the checkpoints
    on disk kept) and records the job CANCELLED instead of dying with the job still RUNNING (the
    next reader would find the process gone and record FAILED)."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


class SystemStopped(RuntimeFailure):
    """The system left ACTIVE (a forced standby, a fault) while the job ran: exit 75 (EX_TEMPFAIL,
    "try again later": the message says where the same command starts again).

    The middle of the message (`resume`, what the checkpoints on disk allow) is computed when the
    message is shown, not when the watch stops the run: the user node still writes the
    checkpoints of the steps already in the output queue, after the executor raised."""

    exit_code = 75

    def __init__(self, head: str, resume: Callable[[], str], tail: str) -> None:
        super().__init__(head)
        self._head, self._resume, self._tail = head, resume, tail

    def __str__(self) -> str:
        return f"{self._head}; {self._resume()}, {self._tail}"


class CsRun:
    """One run.py invocation with --cs_ip, from the gate to the job's outcome."""

    def __init__(
        self,
        model_name: str,
        params: dict[str, Any],
        model_dir: Path,
        cs_ip: str,
        *,
        command: str | None = None,
    ) -> None:
        self.model_name, self.params, self.model_dir = model_name, params, Path(model_dir)
        self.cs_ip = cs_ip
        self.mode = execution_mode()
        self.num_csx = int(params["runconfig"].get("num_csx") or 1)
        self.command = command or " ".join([launcher_word(), *(shlex.quote(a) for a in sys.argv)])
        wsjob = knobs.raw("CS2SIM_WSJOB")  # the cluster server's execute job runs this
        if wsjob and not command:
            self.command = f"{wsjob}: {self.command}"
        self.machine: Any = None
        self.job: Any = None
        self.executor: QueuedExecutor | None = None
        self.trainer: Any = None
        self._next_watch = 0.0
        self._machines: list[Any] | None = None
        raw = knobs.text(FAULT_AT_STEP_ENV)
        self._fault_at: int | None = int(raw) if raw.isdigit() else None

    # 1. the gate -------------------------------------------------------------------------------
    def gate(self) -> None:
        """Refuse now (JobRefused, ConfigError) if the job cannot run on the named system."""
        from cs2sim.system.machine import Machine
        from cs2sim.system.store import Store

        self.store = Store.open()
        self.machine = Machine.for_target(self.store, self.cs_ip)
        self._check_num_csx()
        # a weight-streaming job holds num_csx systems: the named one and the next ones
        self.machine.check_job(self.mode, self.systems_wanted)

    @property
    def systems_wanted(self) -> int:
        """How many CS-2 systems the job holds (num_csx in weight streaming, else one)."""
        return self.num_csx if self.mode is ExecMode.WEIGHT_STREAMING else 1

    def _check_num_csx(self) -> None:
        n = self.num_csx
        if self.mode is ExecMode.PIPELINED:
            if n != 1:
                raise ConfigError(
                    f"runconfig.num_csx is {n}, but a pipelined run uses one CS-2 (pipelined "
                    "execution does not train across several systems); set num_csx to 1, or "
                    "start the run with python-ws for weight streaming."
                )
            return
        limit = self.machine.cluster.swarmx.max_systems
        if n > limit:
            raise ConfigError(
                f"runconfig.num_csx is {n}, but this cluster's SwarmX serves at most {limit} "
                f"CS-X systems; set runconfig.num_csx (--num_csx) to {limit} or fewer."
            )
        # the sections the mode reads: an eval job streams eval_input only
        mode = str(self.params["runconfig"].get("mode") or "train")
        used = {"train_input": mode != "eval", "eval_input": mode != "train"}
        for section in (s for s, reads in used.items() if reads and self.params.get(s)):
            batch = int(self.params[section].get("batch_size") or 0)
            if batch < n:
                raise ConfigError(
                    f"{section}.batch_size {batch} is smaller than num_csx {n}: every CS-X "
                    "needs at least one sample of the global batch; raise the batch size or "
                    "lower num_csx."
                )

    # 2. the job --------------------------------------------------------------------------------
    def run(self, trainer: Any, mode_name: str) -> int:
        """Register the job, compile, run `trainer.<mode_name>()` on the CS-2, record the end."""
        from cs2sim.system.users import local_identity

        self.trainer = trainer
        owned = True
        launcher_job = knobs.text(JOB_ENV)
        if launcher_job.isdigit():  # a launcher (csrun_wse) registered the job and finishes it
            self.job = self.machine.job(int(launcher_job))
            owned = self.job is None
        # One id everywhere: under a launcher the job is registered under its scheduler id (the
        # one `jobs show` lists and `jobs cancel` takes); without one it gets the next id.
        slurm = os.environ.get("SLURM_JOB_ID", "").strip()
        if self.job is None:
            who = local_identity(self.store)
            self.job = self.machine.register_job(
                who,
                self.mode,
                self.command,
                os.getpid(),
                job_id=int(slurm) if slurm.isascii() and slurm.isdigit() else None,
                num_csx=self.systems_wanted,
            )
        # the two differ only when a Slurm id met an older job's id in the store: name both
        under = f" (Slurm job {slurm})" if slurm and slurm != str(self.job.id) else ""
        held = tuple(self.job.systems) or (self.machine.name,)
        on = (
            f"{self.machine.name} ({self.machine.ip})"
            if len(held) == 1
            else f"{len(held)} CS-2 systems ({', '.join(held)})"
        )
        log.info(f"Job {self.job.id}{under} is running on {on} in {self.mode} mode.")
        if not owned:
            trainer.executor = self.prepare()
            getattr(trainer, mode_name)()
            return 0
        outcome = "FAILED"
        # signal handlers can only be set from the main thread (a test may call from another)
        on_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _raise_terminated) if on_main else None
        try:
            trainer.executor = self.prepare()
            getattr(trainer, mode_name)()
            outcome = "COMPLETED"
            return 0
        except (SystemStopped, KeyboardInterrupt):  # Terminated included
            outcome = "CANCELLED"
            raise
        finally:
            if on_main:  # None: the previous handler was not Python's; the default then
                signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            try:
                self.machine.finish_job(self.job.id, outcome)
            except Exception as e:  # noqa: BLE001 - the run's own error matters more
                log.warning(f"Could not record job {self.job.id} as {outcome}: {e}")

    def prepare(self) -> QueuedExecutor:
        """Compile for the system and build the executor of its mode."""
        from cs2sim.runtime.compiler import compile_run

        log.info("Compiling the model and programming onto fabric. This may take a few minutes.")
        log.info("=============== Starting Cerebras Compilation ===============")
        t0 = time.perf_counter()
        seen: list[int] = [0]

        def on_stage(name: str, i: int, n: int) -> None:
            seen[0] = n
            log.debug(f"compile stage {i}/{n}: {name}")

        # a cluster server's execute job loads the compile its client found or made
        cached = knobs.raw("CS2SIM_COMPILE_FROM")
        res = compile_run(
            self.model_name,
            self.params,
            self.model_dir,
            mode=self.mode,
            target=self.machine.name,
            on_stage=on_stage,
            input_cluster=self.input_cluster(),
            cached=Path(cached) if cached else None,
        )
        if res.reused and cached and res.directory == Path(cached):
            log.info(
                f'Loading the cached compile with hash "{res.directory.name}" from '
                f"{res.directory.parent} (not compiling again)"
            )
        elif res.reused:
            log.info(f"Reusing existing compilation in {res.directory}")
        n, took = seen[0], time.perf_counter() - t0
        # the PSC Neocortex run transcript (docs/sources.md): "Cerebras compilation completed: ...
        # 19/? [00:25s,  1.35s/stages]"
        log.info(
            f"Cerebras compilation completed: {n}/{n} [{int(took) // 60:02d}:"
            f"{int(took) % 60:02d}s, {took / max(n, 1):5.2f}s/stages]"
        )
        log.info("=============== Cerebras Compilation Completed ===============")
        if res.est_samples_per_sec:
            log.info(
                f"Compiler estimate for {self.machine.name}: {res.est_samples_per_sec:.1f} "
                "samples/sec on a CS-2 (est_samples_per_sec in performance.json); Rate and "
                "GlobalRate below are measured on this host."
            )
        ex = self._executor_of(res)
        self._describe_run(res, ex)
        ex.before_step = self.watch
        self.executor = ex
        return ex

    def _executor_of(self, res: CompileResult) -> QueuedExecutor:
        """The executor of this run's mode, built from the compile's plan and estimates."""
        if self.mode is ExecMode.PIPELINED:
            from cs2sim.runtime.compiler.report import pe_share
            from cs2sim.runtime.executors.pipelined import PipelinedExecutor

            share = pe_share(res.active_pes, res.total_pes) if res.active_pes else None
            ex: QueuedExecutor = PipelinedExecutor(
                res.plan,
                compile_time=res.compile_time,
                est_samples_per_sec=res.est_samples_per_sec,
                active_pes=res.active_pes,
                total_pes=res.total_pes,
                pe_share=share,
            )
        else:
            from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

            ex = WeightStreamingExecutor(
                self.num_csx,
                res.plan,
                compile_time=res.compile_time,
                est_samples_per_sec=res.est_samples_per_sec,
            )
        return ex

    def _describe_run(self, res: CompileResult, ex: QueuedExecutor) -> None:
        """Log what the compile chose for a step and its time to train; give `ex` the run's
        facts (system, mode, batches) for its report."""
        from cs2sim.runtime.artifacts.perf import plan_batches
        from cs2sim.runtime.compiler.timetrain import for_plan

        systems = list(getattr(self.job, "systems", ()) or (self.machine.name,))
        ttt = for_plan(res.plan, self.params) if res.plan is not None else None
        if res.plan is not None:  # what the compile chose for a step, as its report says
            log.info(f"{res.plan.batch_line()} on {', '.join(systems)}.")
        if ttt is not None:
            log.info(f"Time to train (CS-2 estimate): {ttt.line()}.")
        ex.run_info = {
            "system": self.machine.name,
            "systems": systems,
            "execution_mode": str(self.mode),
            "num_csx": self.num_csx,
            "job_id": self.job.id if self.job else None,
            **plan_batches(res.plan),
            "time_to_train": ttt.as_dict() if ttt else None,
        }

    def input_cluster(self) -> InputCluster | None:
        """The job's input workers at the rate cs_input_analyzer measured, when both are known."""
        return known_input_cluster(self.model_dir, self.model_name)

    # 3. the watch ------------------------------------------------------------------------------
    def watch(self, step: int) -> None:
        """Before global step `step`: stop if the system is no longer ACTIVE in this mode."""
        if self._fault_at is not None and step >= self._fault_at:
            self._inject_fault(step)
        now = time.monotonic()
        if now < self._next_watch:
            return
        self._next_watch = now + WATCH_S
        for machine in self._watched():
            status = machine.status()
            if status.state is not State.ACTIVE or status.active_mode is not self.mode:
                break
        else:
            return
        # what brings the system back: from FAULT a standby comes first (system/state.py)
        fix = (
            "`system standby` and `system activate`"
            if status.state is State.FAULT
            else "`system activate`"
        )
        held = tuple(getattr(self.job, "systems", ())) or (status.name,)
        others = [n for n in held if n != status.name]
        freed = f" (its {len(held)} systems, {', '.join(held)}, are released)" if others else ""
        trainer = self.trainer
        raise SystemStopped(
            f"System {status.name} went to {status.state} while job {self.job.id} ran, so "
            f"training stopped before global step {step}{freed}",
            trainer.resume_text
            if trainer is not None
            else lambda: "running the same command again resumes from its last checkpoint, if any",
            f"once an admin has run {fix}" + (f" on {status.name}." if others else "."),
        )

    def _watched(self) -> list[Any]:
        """The machines of every system the job holds (the named one first)."""
        if self._machines is None:
            from cs2sim.system.machine import Machine

            held = tuple(getattr(self.job, "systems", ())) or (self.machine.name,)
            self._machines = [
                self.machine if n == self.machine.name else Machine(self.store, n) for n in held
            ]
        return self._machines

    def _inject_fault(self, step: int) -> None:
        """The test knob: the system goes to FAULT now, before `step` (then the watch sees it)."""
        from cs2sim.system.users import Identity, Role

        self._fault_at = None  # once
        self._next_watch = 0.0  # the watch below reads the state at once
        reason = knobs.text(FAULT_REASON_ENV) or (f"injected fault before global step {step}")
        self.machine.inject_fault(Identity("testkit", Role.ADMIN, "internal"), reason)


def known_input_cluster(model_dir: Path, model_name: str) -> InputCluster | None:
    """The input workers of this task's job (its streamer tasks; outside a CS-2 job, the ones
    cs_input_analyzer recommended) at the per-worker rate it saved in model_dir, or None when
    either is unknown (a compile then says it assumed the workers keep up)."""
    from cs2sim.runtime.compiler.io import (
        InputCluster,
        load_measurement,
        recommended_streamers,
    )
    from cs2sim.runtime.job.roles import task_info

    rate = load_measurement(model_dir, model_name)
    if rate is None:
        return None
    workers = task_info().num_streamers
    if workers >= 1:
        return InputCluster(workers, rate)
    advised = recommended_streamers(model_dir, model_name)  # a compile outside a CS-2 job
    if advised is None:
        return None
    return InputCluster(
        advised,
        rate,
        f"cs_input_analyzer (host measurement), the {advised} streamer task(s) it recommended",
    )
