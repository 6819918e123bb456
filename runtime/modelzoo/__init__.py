"""runtime/modelzoo: the models (fc_mnist, gpt2, gptj), each in its own directory with its
model.py (the model class, which names itself with NAME, SCHEMA and family), run.py and
configs/. pyproject.toml declares each as a `cs2sim.models` entry point (runtime/registry.py).

This package __init__ imports no model, so `runtime.modelzoo.<name>.model` stays cheap to import.
"""

from __future__ import annotations

from typing import Any

from cs2sim.runtime.schema import REQUIRED, Schema

__all__ = ["fill_defaults"]


def fill_defaults(schema: Schema, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with every schema default filled in (validated params already have them)."""
    out = {k: key.default for k, key in schema.items() if key.default is not REQUIRED}
    out.update(params)
    return out
