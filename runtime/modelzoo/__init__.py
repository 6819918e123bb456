"""runtime/modelzoo: the models (fc_mnist, gpt2, gptj, bert, bert_classifier, llama), each in its
own directory with its model.py (the model class, which names itself with NAME, SCHEMA and
family), run.py and configs/. pyproject.toml declares each as a `cs2sim.models` entry point
(runtime/registry.py). WEIGHT_STREAMING_CONFIGS says which shipped configs are meant for
`python-ws` (the rest are pipelined); the tests and benches that compile every config read it.

This package __init__ imports no model, so `runtime.modelzoo.<name>.model` stays cheap to import.
"""

from __future__ import annotations

from typing import Any

from cs2sim.runtime.schema import REQUIRED, Schema

__all__ = ["fill_defaults", "WEIGHT_STREAMING_CONFIGS"]

# The shipped configs (configs/<name> of any model) meant for weight streaming; as in Model Zoo,
# nothing in a params file says which mode it is for.
WEIGHT_STREAMING_CONFIGS = frozenset(
    {
        "params_gpt2_small_ws.yaml",
        "params_gpt3_xl.yaml",
        "params_gptj_6b.yaml",
        "params_continuous_pretraining.yaml",
        "params_llama_7b.yaml",
        "params_bert_large_msl128_ws.yaml",
    }
)


def fill_defaults(schema: Schema, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with every schema default filled in (validated params already have them)."""
    out = {k: key.default for k, key in schema.items() if key.default is not REQUIRED}
    out.update(params)
    return out
