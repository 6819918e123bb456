"""BERT pretraining (Devlin et al. 2019) as Model Zoo's BERT: masked LM + next sentence.

blocks = [embed (token + position + segment, LN, dropout), enc0 .. enc{L-1} (post-LN encoder
blocks, bidirectional attention), head (masked-LM head tied to the token embedding unless
share_embedding_weights is false, next-sentence head unless disable_nsp; runtime/nn/encoder.py)].

Every key of Model Zoo's BERT model sections is accepted: the TF ones (params_bert_*_msl*.yaml,
utils.py set_defaults) and the PyTorch ones (bert_*_MSL*.yaml, roberta_*.yaml, the weight-
streaming variants). Keys that shape the numpy math: vocab_size (else the input's vocab_file,
else the fallback vocabulary, runtime/data/vocab.py), hidden_size, num_hidden_layers, num_heads,
filter_size, encoder_nonlinearity, max_position_embeddings, position_embedding_type,
use_position_embedding, use_segment_embedding, share_embedding_weights, dropout_rate,
attention_dropout_rate, layer_norm_epsilon, attention_type, the bias switches, mlm_nonlinearity,
disable_nsp, num_cls_classes, use_nsp_bias, initializer_range / initializer /
embedding_initializer, weight_initialization_seed, dropout_seed. mlm_loss_weight and
mlm_loss_scaling are read by the input pipeline, which folds every MLM loss scaling into the
masked_lm_weights of a batch (runtime/data/mlm.py): the loss is then a plain sum over rows / B.
Padding: a batch's attention_mask (PyTorch processors) or input_mask (TF records), 1 at real
tokens and 0 at padding, goes to the encoder's attention, which hides the padded keys from every
query as the Model Zoo's BERT does (runtime/nn/attention.py KeyPadding): what a padded position
holds changes nothing at a real one, forward or backward. A batch without a mask (the stand-in
windows, token files: never padded) attends to every position.
Keys accepted with NO effect here (CS kernels, TF graph and GPU flags): use_vsl, enable_vts,
boundary_casting, tf_summary, attention_kernel, enable_gpu_optimizations, pad_token_id (the mask,
not the id, marks padding), compute_eval_metrics (always computed), embedding_size (must equal
hidden_size), precision_opt_level, to_float16; mixed_precision / fp16_type / use_bfloat16 are
read by numerics/mixed_precision.py. Refused with one sentence: use_pre_normalization true and
label_smoothing > 0 (not implemented).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.modelzoo import fill_defaults
from cs2sim.runtime.nn.activations import ACTIVATIONS
from cs2sim.runtime.nn.attention import KeyPadding
from cs2sim.runtime.nn.encoder import (
    BertEmbedding,
    BertHead,
    ClassifierHead,
    EncoderBlock,
    MLMHead,
    NSPHead,
)
from cs2sim.runtime.nn.init import Init, from_config, truncated_normal
from cs2sim.runtime.nn.model import Arrays, Model, training_bytes
from cs2sim.runtime.numerics.precision import HALF_FORMATS, Policy
from cs2sim.runtime.schema import Key, Schema, non_negative, positive, unit_interval
from cs2sim.system.errors import ConfigError

__all__ = ["BertModel", "BertConfig", "MODEL_SCHEMA", "bert_config"]

_INIT_TYPES = (dict, list)
_ACTS = tuple(ACTIVATIONS)

MODEL_SCHEMA: Schema = {
    # Embedding
    "vocab_size": Key(
        int,
        None,
        "Vocabulary size (else the input's vocab_file, else the fallback vocabulary).",
        check=positive,
    ),
    "hidden_size": Key(int, 768, "Width of the encoder (d_model).", check=positive),
    "use_position_embedding": Key(bool, True, "Add a position embedding table."),
    "position_embedding_type": Key(
        str, "learned", "Positions: learned table or fixed sinusoids.", choices=("learned", "fixed")
    ),
    "use_segment_embedding": Key(
        bool, True, "Add a segment (token type) embedding (TF key; PyTorch: on unless disable_nsp)."
    ),
    "max_position_embeddings": Key(int, 512, "Longest sequence the model takes.", check=positive),
    "share_embedding_weights": Key(
        bool, True, "The MLM output layer reuses the token embedding (one array)."
    ),
    "embedding_dropout_rate": Key(
        (int, float),
        None,
        "Dropout after the embeddings (default dropout_rate).",
        check=unit_interval,
    ),
    # Encoder
    "num_hidden_layers": Key(int, 12, "Number of encoder blocks.", check=positive),
    "dropout_rate": Key((int, float), 0.1, "Residual and embedding dropout.", check=unit_interval),
    "layer_norm_epsilon": Key((int, float), 1.0e-8, "Layer norm epsilon.", check=positive),
    "use_pre_normalization": Key(bool, False, "Pre-LN blocks (not implemented: BERT is post-LN)."),
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
    "filter_size": Key(int, 3072, "Width of the MLP's hidden layer.", check=positive),
    "encoder_nonlinearity": Key(str, "gelu", "MLP activation.", choices=_ACTS),
    "use_ffn_bias": Key(bool, True, "Biases in the MLP."),
    # Heads and loss
    "mlm_nonlinearity": Key(str, "gelu", "Activation of the MLM head's transform.", choices=_ACTS),
    "use_ffn_bias_in_mlm": Key(bool, True, "Bias on the MLM head's transform."),
    "use_output_bias_in_mlm": Key(bool, True, "Bias on the MLM output layer."),
    "mlm_loss_weight": Key(
        (int, float),
        1.0,
        "Weight of the MLM loss (folded into the masked_lm_weights by the input pipeline).",
        check=positive,
    ),
    "mlm_loss_scaling": Key(
        str,
        None,
        "TF: divide the MLM loss by the masked tokens of the "
        "batch (precomputed_num_masked, num_masked) or by the batch size; "
        "unset: as the input's scale_mlm_weights / dynamic_mlm_scale say.",
        choices=("precomputed_num_masked", "num_masked", "batch_size"),
    ),
    "label_smoothing": Key(
        (int, float), 0.0, "MLM label smoothing (only 0 is implemented).", check=non_negative
    ),
    "disable_nsp": Key(bool, False, "No next-sentence head (RoBERTa)."),
    "num_cls_classes": Key(int, 2, "Classes of the next-sentence head.", check=positive),
    "use_nsp_bias": Key(bool, True, "Bias on the next-sentence classifier."),
    "nsp_nonlinearity": Key(str, "tanh", "Activation of the pooler.", choices=("tanh",)),
    "pooler_nonlinearity": Key(
        str, "tanh", "PyTorch 2.0 spelling of nsp_nonlinearity.", choices=("tanh",)
    ),
    # Initialization
    "initializer_range": Key(
        (int, float), 0.02, "Std of the truncated-normal initializer.", check=non_negative
    ),
    "initializer": Key(_INIT_TYPES, None, "Model Zoo initializer dict for the weights."),
    "embedding_initializer": Key(
        _INIT_TYPES, None, "Model Zoo initializer dict for the embeddings."
    ),
    "weight_initialization_seed": Key(
        int, None, "Seed of the initial weights (default: the run's seed)."
    ),
    "dropout_seed": Key(int, None, "Seed of the dropout masks (default: the run's seed)."),
    # Cerebras / precision flags
    "mixed_precision": Key(bool, False, "16-bit activations/weights/gradients."),
    "fp16_type": Key(str, None, "16-bit format when mixed_precision is on.", choices=HALF_FORMATS),
    "use_bfloat16": Key(bool, False, "Older form of fp16_type: bfloat16."),
    "precision_opt_level": Key(int, None, "Deprecated in model (runconfig key); no effect here."),
    "to_float16": Key(bool, False, "PyTorch R1.x flag; no effect here."),
    "use_vsl": Key(bool, False, "Variable sequence length (CS kernels); no effect here."),
    "enable_vts": Key(bool, False, "Variable tensor shape (CS kernels); no effect here."),
    "boundary_casting": Key(bool, False, "TF Cerebras flag; no effect here."),
    "tf_summary": Key(bool, False, "TF Cerebras flag; no effect here."),
    "attention_kernel": Key(str, None, "CS attention kernel choice; no effect here."),
    "enable_gpu_optimizations": Key(bool, False, "TF GPU flag; no effect here."),
    "pad_token_id": Key(
        int, 0, "Padding id; no effect (the batch's attention_mask marks padding)."
    ),
    "compute_eval_metrics": Key(bool, True, "Eval metrics are always computed here."),
    "name": Key(str, None, "Model name (informational)."),
}

DEFAULT_PREDICTIONS = 20  # masked positions per sequence when the input section does not say


@dataclass(frozen=True)
class BertConfig:
    """BERT's architecture in layer terms."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    filter_size: int
    max_positions: int = 512
    position: str | None = "learned"
    num_segments: int = 2
    tied: bool = True
    eps: float = 1e-8
    act: str = "gelu"
    mlm_act: str = "gelu"
    qkv_bias: bool = True
    attn_out_bias: bool = True
    ffn_bias: bool = True
    mlm_ffn_bias: bool = True
    mlm_out_bias: bool = True
    nsp: bool = True
    nsp_classes: int = 2
    nsp_bias: bool = True
    emb_dropout: float = 0.1
    attn_dropout: float = 0.1
    resid_dropout: float = 0.1
    scaled: bool = True

    def param_count(self) -> int:
        """Trainable scalars, from the shapes (a tied weight counts once)."""
        V, C, F, L = self.vocab_size, self.hidden_size, self.filter_size, self.num_layers
        embed = V * C + (self.max_positions * C if self.position == "learned" else 0)
        embed += self.num_segments * C + 2 * C
        attn = 4 * C * C + (3 * C if self.qkv_bias else 0) + (C if self.attn_out_bias else 0)
        mlp = 2 * C * F + ((F + C) if self.ffn_bias else 0)
        mlm = C * C + (C if self.mlm_ffn_bias else 0) + 2 * C
        mlm += (0 if self.tied else V * C) + (V if self.mlm_out_bias else 0)
        nsp = (
            C * C + C + self.nsp_classes * C + (self.nsp_classes if self.nsp_bias else 0)
            if self.nsp
            else 0
        )
        return embed + L * (attn + mlp + 4 * C) + mlm + nsp

    def activation_bytes(self, batch_size: int, seq_len: int, predictions: int) -> int:
        """Host bytes of one training step's buffers (as DecoderConfig.activation_bytes counts
        them per token and layer, plus the MLM head's logits over B * P predictions)."""
        C, F, nh, T = self.hidden_size, self.filter_size, self.num_heads, seq_len
        per_token = self.num_layers * (30 * C + 6 * F + 3 * nh * T) + 8 * C
        head = batch_size * predictions * (2 * self.vocab_size + 6 * C)
        return 4 * (batch_size * seq_len * per_token + head)


def _rate(mp: dict[str, Any], key: str) -> float:
    v = mp.get(key)
    return float(mp.get("dropout_rate") or 0.0) if v is None else float(v)


def bert_config(mp: dict[str, Any]) -> BertConfig:
    """The architecture a (defaults-filled) model section describes; ConfigError if it cannot
    be built."""
    if mp.get("vocab_size") is None:
        raise ConfigError(
            "model.vocab_size is not set; set it in the model section or give "
            "train_input.vocab_file."
        )
    C, nh = int(mp["hidden_size"]), int(mp["num_heads"])
    if C % nh:
        raise ConfigError(f"model.hidden_size ({C}) must be divisible by model.num_heads ({nh}).")
    if mp.get("use_pre_normalization"):
        raise ConfigError(
            "model.use_pre_normalization: true is not implemented (BERT's blocks "
            "are post-LN here); set it to false."
        )
    if mp.get("label_smoothing"):
        raise ConfigError("model.label_smoothing is not implemented; set it to 0.")
    nsp = not mp["disable_nsp"]
    return BertConfig(
        vocab_size=int(mp["vocab_size"]),
        hidden_size=C,
        num_layers=int(mp["num_hidden_layers"]),
        num_heads=nh,
        filter_size=int(mp["filter_size"]),
        max_positions=int(mp["max_position_embeddings"]),
        position=mp["position_embedding_type"] if mp["use_position_embedding"] else None,
        num_segments=2 if (nsp and mp["use_segment_embedding"]) else 0,
        tied=bool(mp["share_embedding_weights"]),
        eps=float(mp["layer_norm_epsilon"]),
        act=mp["encoder_nonlinearity"],
        mlm_act=mp["mlm_nonlinearity"],
        qkv_bias=bool(mp["use_projection_bias_in_attention"]),
        attn_out_bias=bool(mp["use_ffn_bias_in_attention"]),
        ffn_bias=bool(mp["use_ffn_bias"]),
        mlm_ffn_bias=bool(mp["use_ffn_bias_in_mlm"]),
        mlm_out_bias=bool(mp["use_output_bias_in_mlm"]),
        nsp=nsp,
        nsp_classes=int(mp["num_cls_classes"]),
        nsp_bias=bool(mp["use_nsp_bias"]),
        emb_dropout=_rate(mp, "embedding_dropout_rate"),
        attn_dropout=_rate(mp, "attention_dropout_rate"),
        resid_dropout=float(mp.get("dropout_rate") or 0.0),
        scaled=mp["attention_type"] == "scaled_dot_product",
    )


class BertModel(Model):
    """BERT over batches of runtime/data/mlm.py: input_ids, token_type_ids (B, T) int32, and
    attention_mask or input_mask (B, T) when the batch has padding; masked_lm_positions,
    masked_lm_ids (B, P) int32, masked_lm_weights (B, P) float32, next_sentence_label (B,)
    int32."""

    NAME = "bert"
    SCHEMA: Schema = MODEL_SCHEMA
    family = "mlm"
    input_key = "input_ids"
    LABEL_KEYS: tuple[str, ...] = (
        "masked_lm_positions",
        "masked_lm_ids",
        "masked_lm_weights",
        "next_sentence_label",
    )

    # blocks, set by add_block (the classifier's head is its ClassifierHead)
    embed: BertEmbedding
    head: BertHead | ClassifierHead

    def __init__(self, model_params: dict[str, Any], policy: Policy, seed: int) -> None:
        mp = fill_defaults(self.SCHEMA, model_params)
        cfg = bert_config(mp)
        super().__init__(policy, seed, mp.get("weight_initialization_seed"), mp.get("dropout_seed"))
        self.cfg = cfg
        ctx = {"vocab_size": cfg.vocab_size, "num_hidden_layers": cfg.num_layers}
        std = truncated_normal(float(mp["initializer_range"]))
        init = from_config(mp.get("initializer"), std, ctx, "initializer")
        emb_init = from_config(mp.get("embedding_initializer"), init, ctx, "embedding_initializer")
        rng, drop = self.init_rng, self.drop_rng
        self.padding = KeyPadding()  # set by the embedding from each batch, read by the encoder
        self.add_block(
            "embed",
            BertEmbedding(
                cfg.vocab_size,
                cfg.hidden_size,
                rng,
                drop,
                emb_init,
                position=cfg.position,
                max_positions=cfg.max_positions,
                num_segments=cfg.num_segments,
                eps=cfg.eps,
                dropout=cfg.emb_dropout,
                policy=policy,
                padding=self.padding,
            ),
        )
        for i in range(cfg.num_layers):
            self.add_block(
                f"enc{i}",
                EncoderBlock(
                    cfg.hidden_size,
                    cfg.num_heads,
                    cfg.filter_size,
                    cfg.act,
                    rng,
                    drop,
                    eps=cfg.eps,
                    qkv_bias=cfg.qkv_bias,
                    attn_out_bias=cfg.attn_out_bias,
                    ffn_bias=cfg.ffn_bias,
                    attn_dropout=cfg.attn_dropout,
                    resid_dropout=cfg.resid_dropout,
                    scaled=cfg.scaled,
                    init=init,
                    out_init=init,
                    policy=policy,
                    padding=self.padding,
                ),
            )
        self.add_block("head", self.make_head(mp, cfg, init, policy))

    def make_head(
        self, mp: dict[str, Any], cfg: BertConfig, init: Init, policy: Policy
    ) -> BertHead | ClassifierHead:
        """The loss head: masked LM (+ next sentence)."""
        rng = self.init_rng
        mlm = MLMHead(
            cfg.hidden_size,
            cfg.vocab_size,
            rng,
            act=cfg.mlm_act,
            eps=cfg.eps,
            tied_to=self.embed.wte if cfg.tied else None,
            ffn_bias=cfg.mlm_ffn_bias,
            out_bias=cfg.mlm_out_bias,
            init=init,
            policy=policy,
        )
        nsp = (
            NSPHead(
                cfg.hidden_size,
                rng,
                init=init,
                bias=cfg.nsp_bias,
                classes=cfg.nsp_classes,
                policy=policy,
            )
            if cfg.nsp
            else None
        )
        return BertHead(mlm, nsp, policy, DEFAULT_PREDICTIONS)

    # -- data ---------------------------------------------------------------------------------
    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Arrays]:
        """({"input_ids", "token_type_ids", "attention_mask"}, the head's labels); the sequence
        must fit."""
        ids = batch["input_ids"]
        if ids.shape[1] > self.cfg.max_positions:
            raise ConfigError(
                f"sequences of {ids.shape[1]} tokens exceed model.max_position_embeddings "
                f"({self.cfg.max_positions}); lower max_sequence_length in the input section "
                "or raise max_position_embeddings."
            )
        x = {"input_ids": ids}
        if "token_type_ids" in batch:
            x["token_type_ids"] = batch["token_type_ids"]
        mask = batch.get("attention_mask", batch.get("input_mask"))
        if mask is not None:
            if mask.shape != ids.shape:
                raise ConfigError(
                    f"the batch's attention mask has shape {mask.shape} but its input_ids "
                    f"{ids.shape}; re-create the data with one mask value per token."
                )
            x["attention_mask"] = mask
        return x, {k: batch[k] for k in self.LABEL_KEYS if k in batch}

    def set_input(self, section: dict[str, Any]) -> None:
        """The compiler's graph takes the input's predictions per sequence."""
        self._mlm_head().predictions = int(
            section.get("max_predictions_per_seq") or DEFAULT_PREDICTIONS
        )

    def _mlm_head(self) -> BertHead:
        """The masked-LM (+ next sentence) head (a subclass with its own head has none)."""
        if not isinstance(self.head, BertHead):
            raise TypeError(f"{type(self).__name__} has no masked-LM head")
        return self.head

    # -- eval ---------------------------------------------------------------------------------
    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """Sums over one batch in eval mode: the loss (times rows), MLM and NSP counts."""
        was_training = self.training
        self.eval()
        try:
            loss = self.forward_loss(batch)
        finally:
            self.train(was_training)
        B = len(batch["input_ids"])
        return {"loss_sum": float(loss) * B, "count": float(B), **self._mlm_head().metric_sums()}

    @staticmethod
    def summarize_metrics(sums: dict[str, float]) -> dict[str, float]:
        """loss (the training objective), accuracy_masked_lm, mlm_perplexity, accuracy_cls."""
        out = {"loss": sums.get("loss_sum", 0.0) / max(sums.get("count", 0.0), 1.0)}
        n = max(sums.get("mlm_count", 0.0), 1.0)
        out["accuracy_masked_lm"] = sums.get("mlm_correct", 0.0) / n
        out["mlm_perplexity"] = math.exp(min(sums.get("mlm_ce_sum", 0.0) / n, 700.0))
        if "nsp_count" in sums:
            out["accuracy_cls"] = sums.get("nsp_correct", 0.0) / max(sums["nsp_count"], 1.0)
        return out

    # -- for the compiler and the host-memory check -------------------------------------------
    def sequence_length(self) -> int:
        """max_position_embeddings: the longest sequence the model takes (the graph's T)."""
        return self.cfg.max_positions

    def input_bytes_per_sample(self, seq_len: int) -> int:
        """Bytes streamed in per sequence: ids and segments (T each), P positions, ids and
        weights, the next-sentence label; 4 bytes each."""
        return 4 * (2 * seq_len + 3 * self._mlm_head().predictions + 1)

    @classmethod
    def param_count(cls, model_params: dict[str, Any]) -> int:
        """Trainable scalars, from the shapes (no allocation)."""
        return bert_config(fill_defaults(cls.SCHEMA, model_params)).param_count()

    @classmethod
    def param_bytes_estimate(
        cls, model_params: dict[str, Any], batch_size: int = 1, seq_len: int | None = None
    ) -> int:
        """Host bytes to train at batch_size x seq_len; no allocation."""
        mp = fill_defaults(cls.SCHEMA, model_params)
        cfg = bert_config(mp)
        acts = cfg.activation_bytes(
            batch_size,
            seq_len or cfg.max_positions,
            DEFAULT_PREDICTIONS * (seq_len or 128) // 128 + 1,
        )
        return training_bytes(cfg.param_count(), acts, bool(mp.get("mixed_precision")))

    # -- params completion (runtime/params.py calls it after validation) ------------------------
    @classmethod
    def complete_params(cls, params: dict[str, Any], source: str, warnings: list[str]) -> None:
        """model.vocab_size from the input's vocab_file when the model section has none (as
        Model Zoo's TF BERT does); a missing file -> the fallback vocabulary, said once."""
        from cs2sim.runtime.data.vocab import FALLBACK_TABLE_ROWS, read_vocab_size

        model = params["model"]
        if model.get("vocab_size") is not None:
            return
        section = params.get("train_input") or {}
        vocab_file = section.get("vocab_file")
        if section.get("vocab_size"):
            model["vocab_size"] = int(section["vocab_size"])
        elif vocab_file and Path(vocab_file).is_file():
            model["vocab_size"] = read_vocab_size(vocab_file)
        else:
            model["vocab_size"] = FALLBACK_TABLE_ROWS
            what = f"vocab_file {vocab_file} is not there" if vocab_file else "no vocab_file"
            warnings.append(
                f"{source}: {what}; using the byte-level fallback vocabulary in a table of "
                f"{FALLBACK_TABLE_ROWS} rows, BERT's uncased vocabulary size (docs/training.md)."
            )
