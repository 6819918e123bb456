"""GPT-J (Wang & Komatsuzaki 2021): GPT-2's decoder with three changes.

1) rotary position embeddings on the first rotary_dim features of each head (no position table);
2) attention and feed-forward in PARALLEL off ONE layer norm: x + attn(ln(x)) + mlp(ln(x))
   (use_untied_layer_norm: True gives the MLP its own layer norm, as GPT-NeoX);
3) an untied output layer with a bias (share_embedding_weights: False, use_bias_in_output: True).
The keys are those of Model Zoo's GPT-J params (params_gptj_6B.yaml, TF and PyTorch); the
defaults are GPT-J 6B's. Initializers default to Model Zoo's GPT-J defaults
(`transformers/tf/gptj/utils.py`): embeddings truncated normal 1/sqrt(vocab_size); weights
variance scaling 1.0 (fan_in, truncated normal); residual outputs variance scaling
4 / num_hidden_layers^2 ("wang_init"). rotary_dim defaults to a quarter of the head size
(GPT-J 6B: 64 of 256). Keys with no effect here are those listed in gpt2/model.py.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from cs2sim.runtime.modelzoo.gpt2.model import MODEL_SCHEMA as GPT2_SCHEMA
from cs2sim.runtime.modelzoo.gpt2.model import GPT2Model
from cs2sim.runtime.nn.decoder import DecoderConfig
from cs2sim.runtime.nn.init import Init, truncated_normal, variance_scaling
from cs2sim.runtime.schema import Schema

__all__ = ["GPTJModel", "MODEL_SCHEMA"]

# GPT-J 6B's values where they differ from GPT-2 small's
_GPTJ_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096,
    "num_hidden_layers": 28,
    "num_heads": 16,
    "filter_size": 16384,
    "max_position_embeddings": 2048,
    "position_embedding_type": "rotary",
    "share_embedding_weights": False,
    "use_bias_in_output": True,
    "use_projection_bias_in_attention": False,
    "use_ffn_bias_in_attention": False,
}

MODEL_SCHEMA: Schema = {
    k: (replace(key, default=_GPTJ_DEFAULTS[k]) if k in _GPTJ_DEFAULTS else key)
    for k, key in GPT2_SCHEMA.items()
}


class GPTJModel(GPT2Model):
    """GPT-J over {"input_ids": (B, T) int32, "labels": (B, T) int32}."""

    NAME = "gptj"
    SCHEMA: Schema = MODEL_SCHEMA
    PARALLEL = True

    @staticmethod
    def default_initializers(mp: dict[str, Any], cfg: DecoderConfig) -> tuple[Init, Init, Init]:
        """Model Zoo GPT-J defaults (see the module docstring)."""
        return (
            truncated_normal(1.0 / math.sqrt(cfg.vocab_size)),
            variance_scaling(1.0, "fan_in", "truncated_normal"),
            variance_scaling(4.0 / cfg.num_layers**2, "fan_in", "truncated_normal"),
        )
