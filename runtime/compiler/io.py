"""What feeds the wafer: the ports a kernel is routed to, and the input cluster behind them.

Ports. A CS-2 has 12 x 100 GbE (system/hardware.py). Where a port's traffic enters the wafer is
not published; ours: the SDK puts host I/O at the fabric's edges, so we lay the 12 ports along
the west edge, each over an equal segment of rows (996 / 12 = 83 on the WSE-2). A kernel that
takes input from outside is fed only by the ports whose segment its west edge touches (it must
sit at x = 0), each at line rate less framing; data from other ports would have to cross other
kernels' links. So a small input kernel gets one port (12.2 GB/s), not the whole 150 GB/s.

Input cluster. The input workers deliver `workers x per-worker rate` samples/s. On this
simulator the per-worker rate is what cs_input_analyzer measured on this host (saved in
model_dir/performance/input_measurement.json) and the workers are the job's streamer tasks; in
bench/fidelity.py it is the reference cluster's rate (calibration.py). Unknown -> no bound.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cs2sim.system.hardware import WaferSpec

__all__ = [
    "InputCluster",
    "port_rows",
    "ports_touched",
    "MEASUREMENT_PATH",
    "load_measurement",
    "save_measurement",
    "recommended_streamers",
    "as_dict",
]

MEASUREMENT_PATH = Path("performance") / "input_measurement.json"


@dataclass(frozen=True)
class InputCluster:
    """The input workers of a job and what one of them delivers (samples/s)."""

    workers: int
    per_worker_samples_per_sec: float
    source: str = "cs_input_analyzer (host measurement)"

    @property
    def samples_per_sec(self) -> float:
        """What all the workers deliver together."""
        return self.workers * self.per_worker_samples_per_sec

    def fingerprint(self) -> list[Any]:
        """What the compile checksum covers (the rate to 3 significant digits)."""
        return [self.workers, float(f"{self.per_worker_samples_per_sec:.3g}")]


def port_rows(wafer: WaferSpec) -> float:
    """Rows of the west edge each port's segment covers."""
    return wafer.height / wafer.ports


def ports_touched(y: int, h: int, wafer: WaferSpec, replicas: int = 1) -> float:
    """Ports feeding a kernel at the west edge over rows [y, y + h) (shared when replicas > 12)."""
    if replicas > wafer.ports:
        return wafer.ports / replicas  # several replicas' input kernels share one port
    seg = port_rows(wafer)
    first, last = int(y // seg), int(math.ceil((y + max(h, 1)) / seg)) - 1
    return float(max(1, min(wafer.ports - 1, last) - first + 1))


def save_measurement(
    model_dir: Path,
    model: str,
    per_worker: float,
    threads: int,
    workers_measured: int,
    streamers: int | None = None,
) -> Path:
    """Record cs_input_analyzer's per-worker rate (and the streamer tasks it recommends) where a
    later compile finds it (atomic)."""
    from cs2sim.runtime.artifacts.atomic import atomic_write

    path = Path(model_dir) / MEASUREMENT_PATH
    doc = {
        "model": model,
        "per_worker_samples_per_sec": per_worker,
        "threads": threads,
        "workers_measured": workers_measured,
        "recommended_streamers": streamers,
        "measurement": "host measurement by cs_input_analyzer (samples/s one input worker "
        "delivered on this machine)",
    }
    atomic_write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n", within=model_dir)
    return path


def load_measurement(model_dir: Path, model: str) -> float | None:
    """The saved per-worker rate of `model`, or None."""
    try:
        from cs2sim.runtime.artifacts import safejson  # bounded, and a FIFO is not waited on

        doc = safejson.read(Path(model_dir) / MEASUREMENT_PATH)
        if doc.get("model") != model:
            return None
        rate = float(doc["per_worker_samples_per_sec"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return rate if rate > 0 and math.isfinite(rate) else None


def recommended_streamers(model_dir: Path, model: str) -> int | None:
    """The streamer tasks cs_input_analyzer recommended for `model` in model_dir, or None."""
    try:
        doc = json.loads((Path(model_dir) / MEASUREMENT_PATH).read_text())
        n = doc.get("recommended_streamers") if doc.get("model") == model else None
    except (OSError, ValueError, AttributeError):
        return None
    return n if type(n) is int and 0 < n <= 1_000_000 else None


def as_dict(ic: InputCluster | None) -> dict[str, Any] | None:
    """JSON form for plan.json."""
    return None if ic is None else {**asdict(ic), "samples_per_sec": ic.samples_per_sec}
