"""Build real trainers (validated params of the shipped configs) for the executor tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from cs2sim.runtime.cli.main import model_home
from cs2sim.runtime.numerics.mixed_precision import resolve_precision
from cs2sim.runtime.params import load_params, validate_params
from cs2sim.runtime.training.trainer import Trainer

CONFIGS = {
    "fc_mnist": "params_small.yaml",
    "gpt2": "params_tiny.yaml",
    "gptj": "params_tiny.yaml",
    "bert": "params_tiny.yaml",
    "bert_classifier": "params_tiny.yaml",
    "llama": "params_tiny.yaml",
}


def make_params(model: str = "fc_mnist", **overrides: Any) -> tuple[dict, str]:
    """Validated params of the model's small config; overrides as section.key=value."""
    raw = load_params(model_home(model) / "configs" / CONFIGS[model])
    raw = copy.deepcopy(raw)
    for dotted, value in overrides.items():
        section, key = dotted.split("__", 1)
        raw.setdefault(section, {})[key] = value
    params, _ = validate_params(raw, model, source="test")
    half, _ = resolve_precision(params)
    return params, half


def trainer(model: str, model_dir: Path, executor: Any = None, **overrides: Any) -> Trainer:
    """A Trainer on `executor` (None: the CPU executor)."""
    params, half = make_params(model, **overrides)
    params["runconfig"]["model_dir"] = str(model_dir)
    return Trainer(model, params, model_dir, half=half, executor=executor)
