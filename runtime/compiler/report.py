"""compile_report.txt: write it in the real layout (Cerebras' Compile Report page, docs/sources.md)
and parse it back.

The overall block follows the real file ALCF shows (title, dashed rule, "Label:" padded to 30
columns); the per-kernel table follows the columns and widths of Cerebras' "Compile Report" page,
with Active PEs per kernel as an absolute count, plus one column of ours: what bounds the kernel
(compute, fabric, io, input). A weight-streaming compile writes the same block and a per-layer
table: forward and backward time of one micro-batch pass, their compute, stream and fixed parts, and
each pass's bound (compute, stream, fabric). Our notes follow the tables: the overall bound, the
input cluster, ports used and replicas (pipelined), what a step runs (Plan.batch_line: micro-
batches, their size, samples on each system, systems), layer passes (weight streaming) and the time
to train for runconfig.max_steps (timetrain.py).
"""

from __future__ import annotations

import re
from typing import Any

from cs2sim.runtime.compiler.plan import Plan

__all__ = ["render_report", "parse_report", "pe_share", "REPORT_FILE"]

REPORT_FILE = "compile_report.txt"
_LABELS = (
    "Samples/s",
    "Compute Samples/s",
    "Transmission Samples/s",
    "Active PEs",
    "Compute Utilization",
)
_KCOLS = (
    ("Kernel Name", 91, "<"),
    ("Samples/s", 16, ">"),
    ("Compute Samples/s", 19, ">"),
    ("Transmission Samples/s", 24, ">"),
    ("Active PEs", 12, ">"),
    ("Compute Utilization", 21, ">"),
    ("Bound", 9, ">"),
)
_LCOLS = (
    ("Layer Name", 40, "<"),
    ("Forward ms", 14, ">"),
    ("Backward ms", 14, ">"),
    ("Fwd Compute ms", 16, ">"),
    ("Fwd Stream ms", 16, ">"),
    ("Bwd Compute ms", 16, ">"),
    ("Bwd Stream ms", 16, ">"),
    ("Fixed ms", 10, ">"),
    ("Fwd Bound", 11, ">"),
    ("Bwd Bound", 11, ">"),
)
_NOTES = {"Bound": "bound", "Ports used": "ports_used", "Micro-batches": "micro_batches"}


def _pct(x: float) -> str:
    return f"{round(100 * x)}%"


def pe_share(active: int, total: int) -> str:
    """The share of the wafer's PEs a compile uses, written the same everywhere: the report's
    Active PEs, the compile's log line, the coordinator's "using P% out of N cores" line and
    the wafer map (3 significant digits: 4,991 of 753,972 PEs is "0.662%"). The real report
    rounds to a whole percent and so shows a small model as "1%" or "0%"; one value in every
    place matters more here than that rounding."""
    return f"{100 * active / total:.3g}%"


def _num(x: float) -> str:
    return f"{x:.1f}"


def _table(cols: tuple[tuple[str, int, str], ...], rows: list[list[str]]) -> list[str]:
    rule = " +" + "+".join("-" * w for _, w, _ in cols) + "+"

    def line(cells: list[str], header: bool = False) -> str:
        out = []
        for (_, w, align), cell in zip(cols, cells, strict=True):
            a = "<" if header else align
            out.append(f" {cell:{a}{w - 2}} ")
        return " |" + "|".join(out) + "|"

    lines = [rule, line([c for c, _, _ in cols], header=True), rule, line([""] * len(cols))]
    lines += [line(r) for r in rows]
    lines.append(rule)
    return lines


def render_report(plan: Plan, notes: list[str]) -> str:
    """The text of compile_report.txt."""
    e = plan.estimate
    values = (
        _num(e["samples_per_sec"]),
        _num(e["compute_samples_per_sec"]),
        _num(e["transmission_samples_per_sec"]),
        pe_share(e["active_pes"], e["total_pes"]),
        _pct(e["compute_utilization"]),
    )
    lines = ["Estimated Overall Performance", "-------------------------------"]
    lines += [f"{label + ':':<30}{v}" for label, v in zip(_LABELS, values, strict=True)]
    if plan.kernels:
        rows = [
            [
                k["name"],
                _num(k["samples_per_sec"]),
                _num(k["compute_samples_per_sec"]),
                _num(k["transmission_samples_per_sec"]),
                str(k["pes"] * k["replicas"]),
                _pct(k["compute_utilization"]),
                k["bound"],
            ]
            for k in plan.kernels
        ]
        lines += _table(_KCOLS, rows)
    if plan.layers:
        rows = [
            [
                ly["name"],
                f"{1e3 * ly['fwd_seconds']:.3f}",
                f"{1e3 * ly['bwd_seconds']:.3f}",
                f"{1e3 * ly['fwd_compute_seconds']:.3f}",
                f"{1e3 * ly['fwd_stream_seconds']:.3f}",
                f"{1e3 * ly['bwd_compute_seconds']:.3f}",
                f"{1e3 * ly['bwd_stream_seconds']:.3f}",
                f"{1e3 * ly['fixed_seconds']:.3f}",
                ly["fwd_bound"],
                ly["bwd_bound"],
            ]
            for ly in plan.layers
        ]
        lines += _table(_LCOLS, rows)
    lines += [""] + notes
    return "\n".join(lines) + "\n"


_ROW = re.compile(r"^ \|(.*)\|$")


def parse_report(text: str) -> dict[str, Any]:
    """{"overall": {label: float}, "kernels": [...], "layers": [...], "notes": {...}}."""
    overall: dict[str, float] = {}
    kernels: list[dict[str, Any]] = []
    layers: list[dict[str, Any]] = []
    notes: dict[str, Any] = {}
    for raw in text.splitlines():
        for label in _LABELS:
            if raw.startswith(label + ":"):
                v = raw[len(label) + 1 :].strip()
                overall[label] = float(v.rstrip("%")) / (100 if v.endswith("%") else 1)
        for label, key in _NOTES.items():
            if raw.startswith(label + ": "):
                notes[key] = raw[len(label) + 2 :].split()[0]
        m = _ROW.match(raw)
        if not m:
            continue
        cells = [c.strip() for c in m.group(1).split("|")]
        if not cells[0] or cells[0] in ("Kernel Name", "Layer Name"):
            continue
        if len(cells) == len(_KCOLS):
            kernels.append(
                {
                    "name": cells[0],
                    "samples_per_sec": float(cells[1]),
                    "compute_samples_per_sec": float(cells[2]),
                    "transmission_samples_per_sec": float(cells[3]),
                    "active_pes": int(cells[4]),
                    "compute_utilization": float(cells[5].rstrip("%")) / 100,
                    "bound": cells[6],
                }
            )
        elif len(cells) == len(_LCOLS):
            layers.append(
                {
                    "name": cells[0],
                    "fwd_ms": float(cells[1]),
                    "bwd_ms": float(cells[2]),
                    "fixed_ms": float(cells[7]),
                    "fwd_bound": cells[8],
                    "bwd_bound": cells[9],
                }
            )
    return {"overall": overall, "kernels": kernels, "layers": layers, "notes": notes}
