"""`Plan`: the executable plan a compile writes to plan.json and the executors read.

PIPELINED: `kernels` in execution order, each {name, block, kernel, pes, rect [x, y, w, h],
rects (one per replica), replicas, samples_per_sec, compute_samples_per_sec,
transmission_samples_per_sec, compute_utilization}.
WEIGHT_STREAMING: `layers` in order, each {name, block, fwd_seconds, bwd_seconds, bound
("compute" | "stream"), fwd_compute_seconds, fwd_stream_seconds, bwd_compute_seconds,
bwd_stream_seconds, weight_bytes, retained}, and `num_csx`.
Both: `estimate` (the overall block of compile_report.txt) and what was compiled;
`micro_batch_size` when the compile runs the batch as micro-batches (gradient accumulation,
runtime/executors/accumulate.py), else null.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

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
    micro_batch_size: int | None = None  # samples per micro-batch per CS-X (accumulation)

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
        """Inverse of to_json."""
        return cls(**doc)

    @classmethod
    def load(cls, directory: Path) -> Plan:
        """Read directory/plan.json."""
        return cls.from_json(json.loads((Path(directory) / PLAN_FILE).read_text()))
