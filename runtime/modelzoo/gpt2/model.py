"""GPT-2: pre-LN decoder blocks, learned positions, final layer norm, output tied to the embedding.

Every key of Model Zoo's GPT-2 model sections (TF and PyTorch; Model Zoo's params files,
docs/sources.md) is accepted.
Keys that shape the numpy math: vocab_size, hidden_size, num_hidden_layers, num_heads, filter_size,
nonlinearity, max_position_embeddings, use_position_embedding, position_embedding_type, rotary_dim,
share_embedding_weights, *dropout_rate, layer_norm_epsilon, use_projection_bias_in_attention (q/k/v
bias), use_ffn_bias_in_attention (attention output bias), use_ffn_bias, use_bias_in_output,
use_untied_layer_norm (parallel blocks only), attention_type, the initializers and their seeds,
loss_scaling, loss_weight.
Keys accepted with NO effect here: boundary_casting, tf_summary, use_vsl (TF graph/CS flags),
attention_softmax_fp32 (our softmax is always fp32), use_cache, precision_opt_level, to_float16;
mixed_precision / fp16_type / use_bfloat16 are read by numerics/mixed_precision.py to choose the
Policy.

Loss: "num_tokens" -> sum CE / (B * T); "batch_size" -> sum CE * loss_weight / B. With
loss_weight = 1 / max_sequence_length (as the Model Zoo configs set it) the two coincide. The sum
leaves out padded positions (attention mask 0 in HDF5 / TFRecord data: label -1); the Model Zoo's
"num_tokens" divides by the unpadded tokens instead of B * T (docs/training.md).
Init (Model Zoo's TF GPT-2 `set_defaults`, docs/sources.md): truncated normal std initializer_range
(0.02); the two residual output projections std 0.02 / sqrt(2 * num_hidden_layers).
"""

from __future__ import annotations

import math
from typing import Any

from cs2sim.runtime.modelzoo import fill_defaults
from cs2sim.runtime.nn.activations import ACTIVATIONS
from cs2sim.runtime.nn.decoder import DecoderConfig, DecoderLM
from cs2sim.runtime.nn.init import Init, from_config, truncated_normal
from cs2sim.runtime.nn.model import training_bytes
from cs2sim.runtime.numerics.precision import HALF_FORMATS, Policy
from cs2sim.runtime.schema import Key, Schema, non_negative, positive, unit_interval
from cs2sim.system.errors import ConfigError

__all__ = ["GPT2Model", "MODEL_SCHEMA", "decoder_config"]

_INIT_TYPES = (dict, list)

MODEL_SCHEMA: Schema = {
    # Embedding
    "vocab_size": Key(
        int,
        None,
        "Vocabulary size (taken from train_input.vocab_size when absent).",
        check=positive,
    ),
    "hidden_size": Key(int, 768, "Width of the residual stream (d_model).", check=positive),
    "use_position_embedding": Key(
        bool, True, "Add a position embedding table (not needed with rotary)."
    ),
    "position_embedding_type": Key(
        str,
        "learned",
        "Positions: learned table, fixed sinusoids, or rotary.",
        choices=("learned", "fixed", "rotary"),
    ),
    "rotary_dim": Key(
        int,
        None,
        "Features per head rotated by rotary embeddings (default: head size / 4).",
        check=positive,
    ),
    "share_embedding_weights": Key(
        bool, True, "Output layer reuses the token embedding (one array)."
    ),
    "max_position_embeddings": Key(int, 1024, "Longest sequence the model takes.", check=positive),
    "embedding_dropout_rate": Key(
        (int, float),
        None,
        "Dropout after the embeddings (default dropout_rate).",
        check=unit_interval,
    ),
    # Decoder
    "num_hidden_layers": Key(int, 12, "Number of transformer blocks.", check=positive),
    "dropout_rate": Key(
        (int, float),
        0.0,
        "Residual (and default embedding/attention) dropout.",
        check=unit_interval,
    ),
    "residual_dropout_rate": Key(
        (int, float),
        None,
        "Dropout on each residual branch (default dropout_rate).",
        check=unit_interval,
    ),
    "layer_norm_epsilon": Key((int, float), 1.0e-5, "Layer norm epsilon.", check=positive),
    "use_untied_layer_norm": Key(
        bool, False, "Parallel blocks: a second layer norm for the MLP (GPT-NeoX)."
    ),
    # Attention
    "num_heads": Key(int, 12, "Attention heads (hidden_size must divide evenly).", check=positive),
    "attention_type": Key(
        str,
        "scaled_dot_product",
        "dot_product skips the 1/sqrt(head size) scale.",
        choices=("scaled_dot_product", "dot_product"),
    ),
    "attention_dropout_rate": Key(
        (int, float),
        None,
        "Dropout on attention probabilities (default dropout_rate).",
        check=unit_interval,
    ),
    "use_projection_bias_in_attention": Key(bool, True, "Bias on the q, k, v projections."),
    "use_ffn_bias_in_attention": Key(bool, True, "Bias on the attention output projection."),
    "attention_softmax_fp32": Key(bool, True, "No effect here: the softmax is always fp32."),
    # Feed-forward
    "filter_size": Key(int, 3072, "Width of the MLP's hidden layer.", check=positive),
    "nonlinearity": Key(
        str,
        "gelu",
        "MLP activation (gelu is GPT-2's tanh approximation).",
        choices=tuple(ACTIVATIONS),
    ),
    "use_ffn_bias": Key(bool, True, "Biases in the MLP."),
    # Output and loss
    "use_bias_in_output": Key(bool, False, "Bias on the output (logits) layer."),
    "loss_scaling": Key(
        str,
        "num_tokens",
        "Loss normaliser: tokens, or batch size times loss_weight.",
        choices=("num_tokens", "batch_size"),
    ),
    "loss_weight": Key(
        (int, float), 1.0, "Per-token weight with loss_scaling batch_size (1/msl).", check=positive
    ),
    # Initialization
    "initializer_range": Key(
        (int, float), 0.02, "Std of the default truncated-normal initializer.", check=non_negative
    ),
    "embedding_initializer": Key(
        _INIT_TYPES, None, "Model Zoo initializer dict for the embeddings."
    ),
    "initializer": Key(_INIT_TYPES, None, "Model Zoo initializer dict for the other weights."),
    "output_layer_initializer": Key(
        _INIT_TYPES, None, "Initializer for the residual output projections."
    ),
    "weight_initialization_seed": Key(
        int, None, "Seed of the initial weights (default: the run's seed)."
    ),
    "dropout_seed": Key(int, None, "Seed of the dropout masks (default: the run's seed)."),
    # Cerebras / precision flags
    "mixed_precision": Key(
        bool, False, "16-bit activations/weights/gradients (read by numerics.mixed_precision)."
    ),
    "fp16_type": Key(str, None, "16-bit format when mixed_precision is on.", choices=HALF_FORMATS),
    "use_bfloat16": Key(
        bool, False, "Older form of fp16_type: bfloat16 (read by numerics.mixed_precision)."
    ),
    "precision_opt_level": Key(int, None, "Deprecated in model (runconfig key); no effect here."),
    "boundary_casting": Key(bool, False, "TF Cerebras flag; no effect here."),
    "tf_summary": Key(bool, False, "TF Cerebras flag; no effect here."),
    "use_vsl": Key(bool, False, "Variable sequence length (CS kernels); no effect here."),
    "use_cache": Key(bool, False, "Inference kv-cache flag; no effect here."),
    "to_float16": Key(bool, False, "PyTorch R1.x flag; no effect here."),
    "name": Key(str, None, "Model name (informational)."),
}


def _rate(mp: dict[str, Any], key: str) -> float:
    """A dropout rate that defaults to dropout_rate."""
    v = mp.get(key)
    return float(mp.get("dropout_rate") or 0.0) if v is None else float(v)


def decoder_config(mp: dict[str, Any], parallel: bool) -> DecoderConfig:
    """The architecture a (defaults-filled) model section describes; ConfigError if inconsistent."""
    if mp.get("vocab_size") is None:
        raise ConfigError(
            "model.vocab_size is not set; set it in the model section or in train_input."
        )
    C, nh = int(mp["hidden_size"]), int(mp["num_heads"])
    if C % nh:
        raise ConfigError(f"model.hidden_size ({C}) must be divisible by model.num_heads ({nh}).")
    position = mp["position_embedding_type"]
    if position != "rotary" and not mp["use_position_embedding"]:
        position = None
    hs = C // nh
    rotary_dim = mp.get("rotary_dim")
    if rotary_dim is None:
        rotary_dim = max(2, hs // 8 * 2)  # GPT-J's proportion: 64 of a 256-wide head
    if position == "rotary" and (rotary_dim > hs or rotary_dim % 2):
        raise ConfigError(
            f"model.rotary_dim ({rotary_dim}) must be even and at most the head size ({hs})."
        )
    return DecoderConfig(
        vocab_size=int(mp["vocab_size"]),
        hidden_size=C,
        num_layers=int(mp["num_hidden_layers"]),
        num_heads=nh,
        filter_size=int(mp["filter_size"]),
        nonlinearity=mp["nonlinearity"],
        max_positions=int(mp["max_position_embeddings"]),
        position=position,
        rotary_dim=int(rotary_dim) if position == "rotary" else 0,
        tied=bool(mp["share_embedding_weights"]),
        out_bias=bool(mp["use_bias_in_output"]),
        eps=float(mp["layer_norm_epsilon"]),
        qkv_bias=bool(mp["use_projection_bias_in_attention"]),
        attn_out_bias=bool(mp["use_ffn_bias_in_attention"]),
        ffn_bias=bool(mp["use_ffn_bias"]),
        emb_dropout=_rate(mp, "embedding_dropout_rate"),
        attn_dropout=_rate(mp, "attention_dropout_rate"),
        resid_dropout=_rate(mp, "residual_dropout_rate"),
        parallel=parallel,
        untied_ln=bool(mp.get("use_untied_layer_norm")) and parallel,
        scaled=mp["attention_type"] == "scaled_dot_product",
        loss_scaling=mp["loss_scaling"],
        loss_weight=float(mp["loss_weight"]),
    )


class GPT2Model(DecoderLM):
    """GPT-2 over {"input_ids": (B, T) int32, "labels": (B, T) int32}."""

    NAME = "gpt2"
    SCHEMA: Schema = MODEL_SCHEMA
    PARALLEL = False  # sequential pre-LN blocks

    def __init__(self, model_params: dict[str, Any], policy: Policy, seed: int) -> None:
        mp = fill_defaults(self.SCHEMA, model_params)
        cfg = self.config(mp)
        emb, init, out = self.initializers(mp, cfg)
        super().__init__(
            cfg,
            policy,
            seed,
            emb_init=emb,
            init=init,
            out_init=out,
            init_seed=mp.get("weight_initialization_seed"),
            dropout_seed=mp.get("dropout_seed"),
        )

    @classmethod
    def config(cls, mp: dict[str, Any]) -> DecoderConfig:
        """The DecoderConfig of a defaults-filled model section."""
        return decoder_config(mp, cls.PARALLEL)

    @staticmethod
    def default_initializers(mp: dict[str, Any], cfg: DecoderConfig) -> tuple[Init, Init, Init]:
        """GPT-2's: truncated normal(range) everywhere, range / sqrt(2 L) on residual outputs."""
        std = float(mp["initializer_range"])
        return (
            truncated_normal(std),
            truncated_normal(std),
            truncated_normal(std / math.sqrt(2 * cfg.num_layers)),
        )

    @classmethod
    def initializers(cls, mp: dict[str, Any], cfg: DecoderConfig) -> tuple[Init, Init, Init]:
        """(embedding, other weights, residual output projections) from the YAML or defaults."""
        ctx = {"vocab_size": cfg.vocab_size, "num_hidden_layers": cfg.num_layers}
        emb, init, out = cls.default_initializers(mp, cfg)
        return (
            from_config(mp.get("embedding_initializer"), emb, ctx, "embedding_initializer"),
            from_config(mp.get("initializer"), init, ctx, "initializer"),
            from_config(mp.get("output_layer_initializer"), out, ctx, "output_layer_initializer"),
        )

    @classmethod
    def param_count(cls, model_params: dict[str, Any]) -> int:
        """Trainable scalars, from the shapes (no allocation)."""
        return cls.config(fill_defaults(cls.SCHEMA, model_params)).param_count()

    @classmethod
    def param_bytes_estimate(
        cls, model_params: dict[str, Any], batch_size: int = 1, seq_len: int | None = None
    ) -> int:
        """Host bytes to train at batch_size x seq_len (default max_positions); no allocation."""
        mp = fill_defaults(cls.SCHEMA, model_params)
        cfg = cls.config(mp)
        acts = cfg.activation_bytes(batch_size, seq_len or cfg.max_positions)
        return training_bytes(cfg.param_count(), acts, bool(mp.get("mixed_precision")))
