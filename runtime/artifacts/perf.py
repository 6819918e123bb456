"""`<model_dir>/performance/performance.json`: the run's throughput, as Model Zoo writes it.

Keys of Model Zoo's perf_utils.save_perf (docs/sources.md) (`json.dump(..., sort_keys=True,
indent=4)`):

    compile_time, programming_time, est_samples_per_sec   CS-2 figures (compiler, fabric
        programming, the compiler's estimate); null on the host, where nothing is compiled
    samples_per_sec      GlobalRate at the last step: total_samples / total_time
    total_samples        samples this run trained on (a resumed run counts only its own)
    total_time           seconds from the executable being loaded to the last step's output
    suspected_input_bottleneck   True when the executor waited on the input stream for more than
        INPUT_BOTTLENECK_THRESHOLD (10%) of its step time (input_wait_fraction)

and, ours: device, checkpoint_time (seconds the user node spent writing checkpoints; the final
checkpoint comes after the last output and is outside total_time, intermediate ones overlap the
executor, which keeps computing into its bounded queue, as on a CS-2), eval_time (evaluation in
train_and_eval, never in the rate), input_wait_fraction, start_step, end_step and `measurement`,
a note saying these are host measurements; on a CS-2 run (runtime/job/cs_run.py) also `system`,
`systems` (every system the job used), `execution_mode`, `num_csx`, `job_id`, what a step ran
(`micro_batch_size`, `micro_batches`, `batch_per_system`, `replicas`) and `time_to_train`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.atomic import atomic_write, open_regular

__all__ = [
    "INPUT_BOTTLENECK_THRESHOLD",
    "RunPerf",
    "write_performance",
    "PERF_PATH",
    "write_compile_perf",
    "plan_batches",
]

INPUT_BOTTLENECK_THRESHOLD = 0.10
PERF_PATH = Path("performance") / "performance.json"


@dataclass
class RunPerf:
    """Measured figures of one training run."""

    device: str
    total_samples: int
    total_time: float
    start_step: int
    end_step: int
    input_wait_time: float = 0.0  # executor time blocked on the input stream
    step_time: float = 0.0  # executor time per step, input wait included
    checkpoint_time: float = 0.0
    eval_time: float = 0.0
    compile_time: float | None = None
    programming_time: float | None = None
    est_samples_per_sec: float | None = None
    # CS-2 runs (runtime/job/cs_run.py): system, execution_mode, num_csx, job_id
    run_info: dict[str, Any] | None = None
    # what the run trained on (the input stream's description; "STAND-IN data, ..." when the
    # built-in stand-in replaced a data set: runtime/data/processors.py)
    data_source: str | None = None

    @property
    def samples_per_sec(self) -> float:
        """GlobalRate over the whole run."""
        return self.total_samples / self.total_time if self.total_time > 0 else 0.0

    @property
    def input_wait_fraction(self) -> float:
        """Share of the executor's step time spent waiting for input."""
        return self.input_wait_time / self.step_time if self.step_time > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The performance.json document."""
        host = self.device == "cpu"
        doc = {
            "compile_time": self.compile_time,
            "device": self.device,
            "est_samples_per_sec": self.est_samples_per_sec,
            "programming_time": self.programming_time,
            "samples_per_sec": self.samples_per_sec,
            "suspected_input_bottleneck": self.input_wait_fraction > INPUT_BOTTLENECK_THRESHOLD,
            "total_samples": int(self.total_samples),
            "total_time": self.total_time,
            "checkpoint_time": round(self.checkpoint_time, 6),
            "eval_time": round(self.eval_time, 6),
            "input_wait_fraction": round(self.input_wait_fraction, 4),
            "start_step": self.start_step,
            "end_step": self.end_step,
            "data_source": self.data_source,
            "data_stand_in": bool(self.data_source and self.data_source.startswith("STAND-IN")),
            "measurement": (
                "host measurements: samples_per_sec and total_time measured on this machine's "
                "CPU by the user-node loop; compile_time, programming_time and "
                "est_samples_per_sec exist only for CS-2 runs and are null here"
                if host
                else "host measurements: samples_per_sec and total_time measured on this "
                "machine's CPU, which runs the simulated CS-2 (Rate/GlobalRate are these "
                "figures, not paced); compile_time and programming_time measured here too; "
                "est_samples_per_sec is the compiler's estimate for a real CS-2"
            ),
        }
        doc.update(self.run_info or {})
        return doc


def write_performance(model_dir: Path, perf: RunPerf) -> Path:
    """Write performance.json atomically; returns its path."""
    path = Path(model_dir) / PERF_PATH
    atomic_write(
        path, json.dumps(perf.to_json(), sort_keys=True, indent=4) + "\n", within=model_dir
    )
    return path


def plan_batches(plan: Any) -> dict[str, Any]:
    """What a step of the compiled plan runs: micro-batches, their size, samples on each system
    and the systems (pipelined replicas when the model is copied on the wafer)."""
    if plan is None:
        return {}
    return {
        "micro_batch_size": plan.micro_batch_size,
        "micro_batches": plan.micro_batches,
        "batch_per_system": plan.batch_per_system,
        "num_csx": plan.num_csx,
        "replicas": plan.replicas,
    }


def write_compile_perf(
    model_dir: Path, result: Any, time_to_train: dict[str, Any] | None = None
) -> Path:
    """Record a compile's compile_time (host measurement) and est_samples_per_sec (CS-2
    estimate) in performance.json, with what a step runs (plan_batches) and the time to train
    (a CS-2 estimate, runtime/compiler/timetrain.py): merged into the run's figures when the
    file exists, else a document whose run figures are null until a run fills them."""
    path = Path(model_dir) / PERF_PATH
    try:
        with open_regular(path) as f:
            doc = json.loads(f.read(1 << 20))
        if not isinstance(doc, dict):
            doc = {}
    except (OSError, ValueError):
        doc = {}
    if not doc:
        doc = {
            "device": None,
            "programming_time": None,
            "samples_per_sec": None,
            "suspected_input_bottleneck": None,
            "total_samples": None,
            "total_time": None,
        }
    doc["compile_time"] = round(float(result.compile_time), 6)
    doc["est_samples_per_sec"] = result.est_samples_per_sec
    est = getattr(getattr(result, "plan", None), "estimate", None) or {}
    if est.get("input_samples_per_sec") is not None:
        # predicted before the run: the input workers deliver less than the wafer takes
        doc["predicted_input_bottleneck"] = est.get("bound") == "input"
    else:
        doc["predicted_input_bottleneck"] = None  # no input measurement to predict from
    doc["compile_dir"] = str(result.directory)
    doc.update(plan_batches(getattr(result, "plan", None)))
    if time_to_train is not None:
        doc["time_to_train"] = time_to_train
    doc["compile_measurement"] = (
        "compile_time: host measurement of this machine's compile (small when a compile was "
        "reused); est_samples_per_sec: the compiler's CS-2 estimate from its cost model, "
        "not a measurement; predicted_input_bottleneck: the estimate is bound by the input "
        "workers cs_input_analyzer measured (null when none were measured)"
    )
    atomic_write(path, json.dumps(doc, sort_keys=True, indent=4) + "\n", within=model_dir)
    return path
