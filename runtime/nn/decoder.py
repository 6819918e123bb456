"""`DecoderLM`: a decoder-only language model (GPT-2, GPT-J and LLaMA are settings of it).

blocks = [embed (LMEmbedding), h0 .. h{L-1} (Block), head (LMHead: ln_f, output layer, CE)].
`DecoderConfig` holds the architecture in layer terms; the model files map their YAML keys onto it.
`param_count` and `train_bytes` compute sizes from the config alone (no allocation), so a
6B-parameter config can be sized and refused before anything is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cs2sim.runtime.nn.init import Init
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.nn.transformer import Block, LMEmbedding, LMHead
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.system.errors import ConfigError

__all__ = ["DecoderConfig", "DecoderLM"]


@dataclass(frozen=True)
class DecoderConfig:
    """The architecture of a decoder-only transformer."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    filter_size: int
    nonlinearity: str = "gelu"
    max_positions: int = 1024
    position: str | None = "learned"  # "learned" | "fixed" | "rotary" | None
    rotary_dim: int = 0  # features per head rotated (position == "rotary")
    tied: bool = True  # output layer shares the token embedding
    out_bias: bool = False
    eps: float = 1e-5
    qkv_bias: bool = True
    attn_out_bias: bool = True
    ffn_bias: bool = True
    emb_dropout: float = 0.0
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    parallel: bool = False  # GPT-J: attention and MLP side by side off one layer norm
    untied_ln: bool = False  # parallel block with its own layer norm for the MLP
    scaled: bool = True  # divide scores by sqrt(head size)
    loss_scaling: str = "num_tokens"  # or "batch_size"
    loss_weight: float = 1.0
    norm: str = "layernorm"  # or "rmsnorm" (LLaMA: a gain, no bias)
    kv_heads: int | None = None  # key/value heads of grouped-query attention (None: num_heads)
    rotary_interleaved: bool = True  # GPT-J's pairs; LLaMA rotates halves

    def param_count(self) -> int:
        """Trainable scalars, from the shapes (a tied weight counts once)."""
        V, C, F, L = self.vocab_size, self.hidden_size, self.filter_size, self.num_layers
        embed = V * C + (self.max_positions * C if self.position == "learned" else 0)
        qkv = C + 2 * (self.kv_heads or self.num_heads) * (C // self.num_heads)  # q, k, v width
        attn = C * qkv + (qkv if self.qkv_bias else 0) + C * C + (C if self.attn_out_bias else 0)
        gated = self.nonlinearity == "swiglu"  # gate and up projections, then down
        mlp = (3 if gated else 2) * C * F + (((2 if gated else 1) * F + C) if self.ffn_bias else 0)
        per_norm = C if self.norm == "rmsnorm" else 2 * C
        norms = per_norm * (1 if (self.parallel and not self.untied_ln) else 2)
        head = per_norm + (0 if self.tied else V * C) + (V if self.out_bias else 0)
        return embed + L * (attn + mlp + norms) + head

    def activation_bytes(self, batch_size: int, seq_len: int) -> int:
        """Host bytes of the arrays one training step holds (forward caches, backward buffers).

        Counted from the buffers the layers keep, per token and layer: ~15 C + 3 F + nh T values
        in the forward (layer norms, qkv and heads, MLP, attention rows), ~13 C + F + nh T in the
        backward, plus ~2 F of GELU temporaries; the head holds logits and their gradient (2 V).
        """
        C, F, nh, T = self.hidden_size, self.filter_size, self.num_heads, seq_len
        F = 2 * F if self.nonlinearity == "swiglu" else F  # gate | up and their gradient
        per_token_layer = 28 * C + 6 * F + 2 * nh * T
        per_token = self.num_layers * per_token_layer + 2 * self.vocab_size + 8 * C
        return 4 * batch_size * seq_len * per_token


class DecoderLM(Model):
    """A decoder-only LM over {"input_ids": (B, T) int32, "labels": (B, T) int32}; a label -1
    marks padding (an HDF5 / TFRecord sample's attention mask 0), left out of the loss
    (runtime/nn/loss.py)."""

    family = "lm"
    input_key = "input_ids"
    label_key = "labels"
    embed: LMEmbedding  # the first block (add_block sets it): its table the head may tie to

    def __init__(
        self,
        cfg: DecoderConfig,
        policy: Policy,
        seed: int | None,
        *,
        emb_init: Init,
        init: Init,
        out_init: Init,
        init_seed: int | None = None,
        dropout_seed: int | None = None,
    ) -> None:
        super().__init__(policy, seed, init_seed, dropout_seed)
        self.cfg = cfg
        rng, drop_rng = self.init_rng, self.drop_rng
        self.add_block(
            "embed",
            LMEmbedding(
                cfg.vocab_size,
                cfg.hidden_size,
                rng,
                drop_rng,
                emb_init,
                position=cfg.position,
                max_positions=cfg.max_positions,
                dropout=cfg.emb_dropout,
                policy=policy,
            ),
        )
        for i in range(cfg.num_layers):
            self.add_block(
                f"h{i}",
                Block(
                    cfg.hidden_size,
                    cfg.num_heads,
                    cfg.filter_size,
                    cfg.nonlinearity,
                    rng,
                    drop_rng,
                    parallel=cfg.parallel,
                    untied_ln=cfg.untied_ln,
                    eps=cfg.eps,
                    qkv_bias=cfg.qkv_bias,
                    attn_out_bias=cfg.attn_out_bias,
                    ffn_bias=cfg.ffn_bias,
                    rotary_dim=cfg.rotary_dim if cfg.position == "rotary" else 0,
                    max_positions=cfg.max_positions,
                    attn_dropout=cfg.attn_dropout,
                    resid_dropout=cfg.resid_dropout,
                    scaled=cfg.scaled,
                    init=init,
                    out_init=out_init,
                    policy=policy,
                    norm=cfg.norm,
                    kv_heads=cfg.kv_heads,
                    rotary_interleaved=cfg.rotary_interleaved,
                ),
            )
        self.add_block(
            "head",
            LMHead(
                cfg.hidden_size,
                cfg.vocab_size,
                rng,
                eps=cfg.eps,
                tied_to=self.embed.wte if cfg.tied else None,
                bias=cfg.out_bias,
                init=init,
                loss_scaling=cfg.loss_scaling,
                loss_weight=cfg.loss_weight,
                policy=policy,
                norm=cfg.norm,
            ),
        )

    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, labels); the sequence must fit the position tables."""
        ids, labels = batch[self.input_key], batch[self.label_key]
        T = ids.shape[1]
        if T > self.cfg.max_positions:
            raise ConfigError(
                f"sequences of {T} tokens exceed model.max_position_embeddings "
                f"({self.cfg.max_positions}); "
                "lower max_sequence_length in the input section or raise max_position_embeddings."
            )
        return ids, labels

    @staticmethod
    def summarize_metrics(sums: dict[str, float]) -> dict[str, float]:
        """loss = mean token cross-entropy over the eval set, perplexity = exp(loss)."""
        out = Model.summarize_metrics(sums)
        out["perplexity"] = math.exp(min(out["loss"], 700.0))  # exp overflows a float past ~709
        return out

    def sequence_length(self) -> int:
        """max_position_embeddings: the longest sequence the model takes (the graph's T)."""
        return self.cfg.max_positions
