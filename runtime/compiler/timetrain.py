"""Time to train: how long a run of N steps will take on the CS-2 system(s), from a compile.

The point of compiling first (Cerebras' "Performance Optimization Practices": compile on CPU,
then run) is to learn this before using the machine. The total is three parts, each a CS-2
estimate:

  programming  loading the compiled program onto the fabric, once per run (the systems of a
               multi-system run are programmed in parallel): PROGRAMMING_SECONDS, from the
               runtime's own words, "Programming CS-2 fabric. This may take couple of minutes"
               (PSC Neocortex getting-started transcript), and an ALCF Wafer-Scale Cluster log
               of one BERT run (R2.x), "Waiting for device programming to complete" 13:00:14.8
               -> "Device programming is complete" 13:02:17.6: 123 s
  training     steps x samples a step / the compile's estimate (samples/s of all systems)
  checkpoints  one save at every multiple of checkpoint_steps and one at the last step (the
               trainer saves there whatever checkpoint_steps is), each CHECKPOINT_SECONDS_PER_
               BILLION x parameters / 1e9: ALCF's user guide, "roughly 60 seconds per billion
               model parameters" per checkpoint on the cluster

Compile time is not in it (a compile runs on a CPU node before the machine is used, and is
reused). `for_plan` reads the figures from a Plan and the run's params; `time_to_train` is the
arithmetic, and both are what the compile report, the compile's log line, performance.json and
cs_input_analyzer's report print.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "TimeToTrain",
    "time_to_train",
    "for_plan",
    "report_doc",
    "PROGRAMMING_SECONDS",
    "CHECKPOINT_SECONDS_PER_BILLION",
    "checkpoint_saves",
    "fmt_duration",
]

PROGRAMMING_SECONDS = 123.0
CHECKPOINT_SECONDS_PER_BILLION = 60.0


@dataclass(frozen=True)
class TimeToTrain:
    """The estimated wall time of a run (CS-2 estimate), in parts."""

    steps: int
    samples: int  # steps x samples a step
    num_csx: int
    samples_per_sec: float  # the compile's estimate, all systems
    programming_seconds: float
    training_seconds: float
    checkpoints: int  # saves in the run
    checkpoint_seconds: float  # all of them
    num_params: int

    @property
    def total_seconds(self) -> float:
        """Programming + training + checkpoint saves."""
        return self.programming_seconds + self.training_seconds + self.checkpoint_seconds

    def line(self) -> str:
        """One sentence: the total and its parts."""
        systems = f"{self.num_csx} CS-2 systems" if self.num_csx > 1 else "1 CS-2"
        return (
            f"{fmt_duration(self.total_seconds)} on {systems} for {self.steps:,} steps "
            f"({self.samples:,} samples): programming {fmt_duration(self.programming_seconds)}"
            f", training {fmt_duration(self.training_seconds)} at "
            f"{self.samples_per_sec:,.1f} samples/s, {self.checkpoints} checkpoint save(s) "
            f"{fmt_duration(self.checkpoint_seconds)}"
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON form (performance.json, the analyzer's report)."""
        return {
            **asdict(self),
            "total_seconds": self.total_seconds,
            "measurement": "CS-2 estimate (compile estimate, programming and checkpoint "
            "figures published for CS-2 systems), not a measurement",
        }


def fmt_duration(seconds: float) -> str:
    """2 h 05 min / 3 min 20 s / 12.5 s."""
    if not math.isfinite(seconds):
        return "unbounded"
    s = int(round(seconds))
    if seconds < 60:
        return f"{seconds:.1f} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400 * 2:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s / 86400:.1f} days"


def checkpoint_saves(steps: int, checkpoint_steps: int) -> int:
    """Saves in a run of `steps` steps from step 0: every multiple of checkpoint_steps, and the
    last step (saved whether or not it is a multiple)."""
    if steps <= 0:
        return 0
    every = max(0, int(checkpoint_steps))
    multiples = steps // every if every else 0
    return multiples + (0 if every and steps % every == 0 else 1)


def time_to_train(
    samples_per_sec: float,
    step_samples: int,
    num_params: int,
    steps: int,
    checkpoint_steps: int = 0,
    num_csx: int = 1,
) -> TimeToTrain:
    """The estimate for `steps` steps of `step_samples` samples at `samples_per_sec`."""
    steps = max(0, int(steps))
    samples = steps * int(step_samples)
    training = samples / samples_per_sec if samples_per_sec > 0 else math.inf
    saves = checkpoint_saves(steps, checkpoint_steps)
    per_save = CHECKPOINT_SECONDS_PER_BILLION * num_params / 1e9
    return TimeToTrain(
        steps=steps,
        samples=samples,
        num_csx=max(1, int(num_csx)),
        samples_per_sec=samples_per_sec,
        programming_seconds=PROGRAMMING_SECONDS if steps else 0.0,
        training_seconds=training,
        checkpoints=saves,
        checkpoint_seconds=saves * per_save,
        num_params=int(num_params),
    )


def step_samples(params: dict[str, Any]) -> int:
    """Samples one optimizer step takes: batch_size x optimizer.grad_accum_steps."""
    ti = params.get("train_input") or {}
    k = int((params.get("optimizer") or {}).get("grad_accum_steps") or 1)
    return int(ti.get("batch_size") or 1) * k


def for_plan(
    plan: Any, params: dict[str, Any], *, steps: int | None = None, samples: int | None = None
) -> TimeToTrain | None:
    """Time to train the plan's model for `steps` (or `samples`, rounded up to whole steps;
    else runconfig.max_steps); None when the run has no step count or the plan no estimate."""
    est = getattr(plan, "estimate", None) or {}
    rate = est.get("samples_per_sec")
    if not rate:
        return None
    per_step = step_samples(params)
    rc = params.get("runconfig") or {}
    if samples is not None:
        steps = math.ceil(samples / per_step)
    if steps is None:
        steps = rc.get("max_steps")
    if steps is None:
        return None
    every = int(rc.get("checkpoint_steps") or rc.get("save_checkpoints_steps") or 0)
    return time_to_train(
        float(rate),
        per_step,
        int(est.get("num_params") or 0),
        int(steps),
        every,
        int(getattr(plan, "num_csx", 1) or 1),
    )


def report_doc(plan: Any, params: dict[str, Any]) -> dict[str, Any] | None:
    """for_plan's figures and its sentence ("line"), as reports store them; None when unknown."""
    ttt = for_plan(plan, params) if plan is not None else None
    return {**ttt.as_dict(), "line": ttt.line()} if ttt else None
