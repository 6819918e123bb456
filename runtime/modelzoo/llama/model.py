"""LLaMA (Touvron et al. 2023): GPT-2's sequential pre-norm decoder with four changes.

1) RMSNorm instead of layer norm (`use_rms_norm: True`, Release 1.9; `norm_type: "rmsnorm"`,
   Release 2.0), before attention, before the feed-forward and before the output layer;
2) the SwiGLU feed-forward (`nonlinearity: "swiglu"`): down(silu(x W_gate) * (x W_up)), three
   matrices of C x filter_size (runtime/nn/glu.py);
3) rotary positions on the whole head (`rotary_dim` = head size by default), pairs taken as the
   two halves of the head (LLaMA's `rotate_half`), no position table;
4) no biases anywhere, an untied output layer.
LLaMA-2 70B adds grouped-query attention: `attention_module: "multiquery_attention"` with
`extra_attention_params: {num_kv_groups: g}` gives g key/value heads shared by num_heads / g
query heads each (runtime/nn/attention.py).
The keys are those of Model Zoo's LLaMA params (params_llama_7b.yaml, Release 1.9.1;
params_llama2_*.yaml, Release 2.0); the defaults are LLaMA 7B's. Initialization as gpt2's
(truncated normal initializer_range, residual outputs / sqrt(2 L)). Keys with no effect here are
those listed in gpt2/model.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from cs2sim.runtime.modelzoo.gpt2.model import MODEL_SCHEMA as GPT2_SCHEMA
from cs2sim.runtime.modelzoo.gpt2.model import GPT2Model, decoder_config
from cs2sim.runtime.nn.activations import ACTIVATIONS
from cs2sim.runtime.nn.decoder import DecoderConfig
from cs2sim.runtime.schema import Key, Schema
from cs2sim.system.errors import ConfigError

__all__ = ["LlamaModel", "MODEL_SCHEMA", "llama_config"]

# LLaMA 7B's values where they differ from GPT-2 small's
_LLAMA_DEFAULTS: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_heads": 32,
    "filter_size": 11008,
    "max_position_embeddings": 2048,
    "position_embedding_type": "rotary",
    "share_embedding_weights": False,
    "use_bias_in_output": False,
    "use_projection_bias_in_attention": False,
    "use_ffn_bias_in_attention": False,
    "use_ffn_bias": False,
    "layer_norm_epsilon": 1.0e-6,
}
ATTENTION_MODULES = ("aiayn_attention", "multiquery_attention")

MODEL_SCHEMA: Schema = {
    **{
        k: (replace(key, default=_LLAMA_DEFAULTS[k]) if k in _LLAMA_DEFAULTS else key)
        for k, key in GPT2_SCHEMA.items()
    },
    "nonlinearity": Key(
        str,
        "swiglu",
        "Feed-forward: swiglu (gated, three matrices) or an elementwise activation between two.",
        choices=("swiglu", *ACTIVATIONS),
    ),
    "rotary_dim": Key(
        int,
        None,
        "Features per head rotated (default: the whole head).",
        check=GPT2_SCHEMA["rotary_dim"].check,
    ),
    "use_rms_norm": Key(bool, True, "RMSNorm instead of layer norm (Release 1.9 spelling)."),
    "norm_type": Key(
        str,
        None,
        "rmsnorm or layernorm (Release 2.0 spelling; wins over use_rms_norm).",
        choices=("rmsnorm", "layernorm"),
    ),
    "attention_module": Key(
        str,
        "aiayn_attention",
        "multiquery_attention: grouped-query attention with extra_attention_params.num_kv_groups.",
        choices=ATTENTION_MODULES,
    ),
    "extra_attention_params": Key(
        dict, None, "{num_kv_groups: g}: g key/value heads (multiquery_attention)."
    ),
}


def _kv_groups(mp: dict[str, Any]) -> int | None:
    """Key/value heads of grouped-query attention, or None (one per query head)."""
    extra = mp.get("extra_attention_params") or {}
    unknown = sorted(set(extra) - {"num_kv_groups"})
    if unknown:
        raise ConfigError(
            f"model.extra_attention_params.{unknown[0]} is not supported; the "
            "only key is num_kv_groups."
        )
    groups = extra.get("num_kv_groups")
    if mp.get("attention_module") != "multiquery_attention":
        if groups is not None:
            raise ConfigError(
                "model.extra_attention_params.num_kv_groups needs "
                "model.attention_module: multiquery_attention; set it or drop "
                "num_kv_groups."
            )
        return None
    nh = int(mp["num_heads"])
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or nh % groups:
        raise ConfigError(
            f"model.extra_attention_params.num_kv_groups must be a positive "
            f"integer dividing num_heads ({nh}), not {groups!r}."
        )
    return groups


def llama_config(mp: dict[str, Any]) -> DecoderConfig:
    """The architecture a (defaults-filled) LLaMA model section describes."""
    mp = dict(mp)
    if mp.get("rotary_dim") is None:
        mp["rotary_dim"] = int(mp["hidden_size"]) // max(1, int(mp["num_heads"]))
    norm_type = mp.get("norm_type") or ("rmsnorm" if mp.get("use_rms_norm") else "layernorm")
    return replace(
        decoder_config(mp, parallel=False),
        norm=norm_type,
        kv_heads=_kv_groups(mp),
        rotary_interleaved=False,
    )


class LlamaModel(GPT2Model):
    """LLaMA over {"input_ids": (B, T) int32, "labels": (B, T) int32}."""

    NAME = "llama"
    SCHEMA: Schema = MODEL_SCHEMA
    PARALLEL = False

    @classmethod
    def config(cls, mp: dict[str, Any]) -> DecoderConfig:
        """The DecoderConfig of a defaults-filled model section."""
        return llama_config(mp)
