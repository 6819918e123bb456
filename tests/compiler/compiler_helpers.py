"""Shared helpers of the compiler tests: configs, params, a tiny wafer."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from cs2sim.runtime.modelzoo import WEIGHT_STREAMING_CONFIGS
from cs2sim.runtime.params import load_params, validate_params
from cs2sim.system.hardware import WSE2, WaferSpec

ZOO = Path(__file__).resolve().parents[2] / "runtime" / "modelzoo"
WS_CONFIGS = WEIGHT_STREAMING_CONFIGS


def configs() -> list[tuple[str, Path]]:
    """(model name, config path) of every shipped config."""
    return [
        (d.name, p)
        for d in sorted(ZOO.iterdir())
        if (d / "configs").is_dir()
        for p in sorted((d / "configs").glob("*.yaml"))
    ]


def params(model: str, path: Path | str, **changes: Any) -> dict[str, Any]:
    """Validated params of a config, with section.key=value changes applied to the raw YAML."""
    raw = copy.deepcopy(load_params(str(path)))
    for dotted, v in changes.items():
        sec, key = dotted.split("__")
        raw.setdefault(sec, {})[key] = v
    p, _ = validate_params(raw, model, source=str(path))
    return p


def fc_params(**changes: Any) -> dict[str, Any]:
    """fc_mnist's params.yaml, changed."""
    return params("fc_mnist", ZOO / "fc_mnist" / "configs" / "params.yaml", **changes)


def tiny_wafer(width: int = 40, height: int = 30, sram: int = 48 * 1024) -> WaferSpec:
    """A small wafer with the WSE-2's per-PE figures (tests of fit limits and geometry)."""
    scale = (width * height) / WSE2.pes
    return WaferSpec(
        name="tiny",
        width=width,
        height=height,
        sram_per_pe_bytes=sram,
        clock_hz=WSE2.clock_hz,
        cores=max(1, round(WSE2.cores * scale)),
        peak_fp16_flops=WSE2.peak_fp16_flops * scale,
        memory_bandwidth_bytes_s=WSE2.memory_bandwidth_bytes_s * scale,
        fabric_bandwidth_bits_s=WSE2.fabric_bandwidth_bits_s * scale,
        io_bits_s=WSE2.io_bits_s,
        # the program's reserve, in the WSE-2's proportion (8 of 48 KiB)
        reserved_per_pe_bytes=(sram * WSE2.reserved_per_pe_bytes // WSE2.sram_per_pe_bytes),
    )
