"""`Plan`: the executable plan a compile writes to plan.json and the executors read.

PIPELINED: `kernels` in execution order, each {name, block, kernel, pes, rect [x, y, w, h],
rects (one per replica), replicas, samples_per_sec, compute_samples_per_sec,
transmission_samples_per_sec, compute_utilization, bound, ports}; `replicas` copies of the
model each take batch_per_system = ceil(batch / replicas) samples of a step.
WEIGHT_STREAMING: `layers` in forward order, each {name, block, fwd_seconds, bwd_seconds,
bound, fwd_bound, bwd_bound ("compute" | "stream" | "fabric"), fwd/bwd_compute_seconds,
fwd/bwd_stream_seconds, fixed_seconds, overlap, weight_bytes, grad_bytes, kept_bytes,
offloaded_bytes, retained} (times per micro-batch pass), and the batch: `num_csx` systems
each take batch_per_system samples as `micro_batches` micro-batches of `micro_batch_size`
(the last may be smaller); every micro-batch runs the forward over `layers` in order and the
backward in reverse, its gradients summed over micro-batches and systems before the update.
Both: `estimate` (the overall block of compile_report.txt, with its bound), `input` (the
input cluster the estimate assumed, or null) and what was compiled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts import safejson

__all__ = ["Plan", "PLAN_FILE"]

PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class Plan:
    """What the executors run; JSON-able (to_json / from_json)."""

    mode: str  # ExecMode value: "PIPELINED" | "WEIGHT_STREAMING"
    model: str
    checksum: str
    target: str | None
    batch_size: int
    dtype: str
    estimate: dict[str, Any]
    kernels: list[dict[str, Any]] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    replicas: int = 1
    num_csx: int = 1
    blocks: list[str] = field(default_factory=list)  # model.block_names
    batch_per_system: int = 0  # samples one system (pipelined: one replica) takes per step
    micro_batch_size: int = 0  # samples a micro-batch pass carries (weight streaming)
    micro_batches: int = 1  # micro-batch passes per step and system
    input: dict[str, Any] | None = None  # InputCluster the estimate assumed (io.py)

    def batch_line(self, target: str | None = None) -> str:
        """What one step runs, in the same words in compile_report.txt, the compile's and the
        run's logs and the wafer map: micro-batches and their size, the samples on each system
        (each replica when the model is copied on the wafer) and how many systems."""
        unit = "replica" if self.mode == "PIPELINED" and self.replicas > 1 else "CS-X"
        count = self.replicas if unit == "replica" else self.num_csx
        named = f" ({target})" if target and self.num_csx == 1 else ""
        return (
            f"Micro-batches: {self.micro_batches} of {self.micro_batch_size} samples per "
            f"{unit} a step ({self.batch_per_system} samples on each of {count} "
            f"{unit}{'s' if count != 1 and unit == 'replica' else ''}{named})"
        )

    def blocks_in_order(self) -> list[str]:
        """Model block names in execution order (pipeline stages / streamed layers)."""
        seq = self.kernels if self.kernels else self.layers
        out: list[str] = []
        for item in seq:
            if not out or out[-1] != item["block"]:
                out.append(item["block"])
        return out

    def to_json(self) -> dict[str, Any]:
        """The plan.json document."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # values are plain already

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Plan:
        """Inverse of to_json (keys a newer compiler added are ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in known})

    @classmethod
    def load(cls, directory: Path) -> Plan:
        """Read directory/plan.json (bounded JSON); ValueError/OSError if it is not a plan."""
        doc = safejson.read(Path(directory) / PLAN_FILE)
        if not isinstance(doc, dict) or set(doc) != {f.name for f in fields(cls)}:
            raise ValueError("it does not have a plan's fields")
        return cls.from_json(doc)

    def problem(
        self,
        *,
        mode: str,
        model: str,
        checksum: str,
        batch_size: int,
        dtype: str,
        num_csx: int,
        blocks: list[str],
        pes: int,
    ) -> str | None:
        """Why this plan (read back from plan.json) does not fit the graph it is reused for,
        or None. A COMPLETE compile directory can still hold a damaged or edited plan.json."""
        want = {
            "mode": mode,
            "model": model,
            "checksum": checksum,
            "batch_size": batch_size,
            "dtype": dtype,
            "num_csx": num_csx,
            "blocks": blocks,
        }
        for key, value in want.items():
            if getattr(self, key) != value:
                return f"its {key} is {str(getattr(self, key))[:60]}, not {str(value)[:60]}"
        est = self.estimate
        if (
            not isinstance(est, dict)
            or not _number(est.get("samples_per_sec"), positive=True)
            or type(est.get("active_pes")) is not int
            or not 0 < est["active_pes"] <= pes
        ):
            return "its estimate is not a valid estimate"
        seq, need = (
            (self.kernels, _KERNEL_KEYS) if mode == "PIPELINED" else (self.layers, _LAYER_KEYS)
        )
        if not isinstance(seq, list) or not seq:
            return f"it has no {'kernels' if mode == 'PIPELINED' else 'layers'}"
        for i, item in enumerate(seq):
            if not isinstance(item, dict) or any(
                not isinstance(item.get(k), t) for k, t in need.items()
            ):
                return (
                    f"entry {i} of its {'kernels' if mode == 'PIPELINED' else 'layers'} "
                    "is malformed"
                )
            if not all(
                _number(v)
                for k, v in item.items()
                if k.endswith("seconds") or k.endswith("samples_per_sec")
            ):
                return f"entry {i} has a number that is not finite and >= 0"
        order = self.blocks_in_order()
        if not order or [b for b in blocks if b in set(order)] != order:
            return "its blocks are not the model's, in the model's order"
        return None


_KERNEL_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "block": str,
    "pes": int,
    "rect": list,
    "samples_per_sec": (int, float),
}
_LAYER_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "block": str,
    "fwd_seconds": (int, float),
    "bwd_seconds": (int, float),
    "weight_bytes": int,
}


def _number(v: Any, positive: bool = False) -> bool:
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and (v > 0 if positive else v >= 0)
    )
