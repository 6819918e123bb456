"""The one table of Hugging Face checkpoints: for gpt2, llama and bert, which Hugging Face tensors
make each of our weights (names, layout, concatenation) and which config.json keys make each
model key. runtime/zoo/hf_convert.py reads it in both directions.

Sources: Hugging Face transformers' GPT2LMHeadModel (Conv1D weights stored (in, out)),
LlamaForCausalLM and BertForPreTraining (nn.Linear weights stored (out, in)), and the Model
Zoo's converters (cerebras/modelzoo `tools/checkpoint_converters/gpt2_hf_cs.py`, `llama.py`,
`bert.py`; github Cerebras/modelzoo), which split GPT-2's c_attn into q, k, v the same way.
Our weights are (in, out) and the attention's q, k, v (and SwiGLU's gate, up) are one matrix,
concatenated along the output axis in that order (runtime/nn/attention.py, runtime/nn/glu.py);
LLaMA's rotary pairs are halves (`rotate_half`, runtime/nn/rotary.py), as Hugging Face's, so
no row permutation is needed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Tensor", "ConfigKey", "HFModel", "MODELS"]

Sizes = Callable[[dict[str, Any]], list[int]]  # model params -> the pieces' output widths


@dataclass(frozen=True)
class Tensor:
    """Our weight `cs` is the Hugging Face tensors `hf` (one, or pieces concatenated along our
    output axis, widths `sizes`), transposed when `transpose` (nn.Linear's (out, in)).
    `{i}` is the layer index."""

    cs: str
    hf: tuple[str, ...]
    transpose: bool = False
    sizes: Sizes | None = None


@dataclass(frozen=True)
class ConfigKey:
    """config.json key `hf` <-> model key `cs`; `to_cs` / `to_hf` convert the value (None:
    the same); `default` is Hugging Face's when config.json leaves the key out."""

    hf: str
    cs: str
    to_cs: Callable[[Any, dict[str, Any]], Any] | None = None
    to_hf: Callable[[Any, dict[str, Any]], Any] | None = None
    default: Any = None


@dataclass(frozen=True)
class HFModel:
    """One model: its Hugging Face identity, tensors, config keys, the model keys fixed by the
    architecture, the tensors Hugging Face may carry that are not weights (buffers, tied
    copies), and the config.json values cs2sim cannot run (key -> (allowed, why))."""

    model_type: str
    architecture: str
    layers: str  # config.json key of the layer count
    tensors: tuple[Tensor, ...]
    config: tuple[ConfigKey, ...]
    fixed: dict[str, Any]
    ignored: tuple[str, ...]
    prefix: str = ""  # an optional name prefix on reading (GPT2LMHeadModel's "transformer.")
    requires: dict[str, tuple[Any, str]] | None = None


def _hs(mp: dict[str, Any]) -> int:
    return int(mp["hidden_size"]) // int(mp["num_heads"])


def _kv(mp: dict[str, Any]) -> int:
    groups = (mp.get("extra_attention_params") or {}).get("num_kv_groups")
    return int(groups or mp["num_heads"])


def _qkv(mp: dict[str, Any]) -> list[int]:
    return [int(mp["hidden_size"]), _kv(mp) * _hs(mp), _kv(mp) * _hs(mp)]


def _gate_up(mp: dict[str, Any]) -> list[int]:
    return [int(mp["filter_size"])] * 2


def _act(hf_name: str, cs_name: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    return (lambda v, c: cs_name if v == hf_name else v), (
        lambda v, m: hf_name if v == cs_name else v
    )


_GELU_NEW = _act("gelu_new", "gelu")  # both the tanh approximation (runtime/nn/activations.py)
_SILU = _act("silu", "swiglu")  # LLaMA's hidden_act silu is the SwiGLU gate

GPT2 = HFModel(
    model_type="gpt2",
    architecture="GPT2LMHeadModel",
    layers="n_layer",
    prefix="transformer.",
    tensors=(
        Tensor("embed.wte.weight", ("wte.weight",)),
        Tensor("embed.wpe.weight", ("wpe.weight",)),
        Tensor("h{i}.ln_1.weight", ("h.{i}.ln_1.weight",)),
        Tensor("h{i}.ln_1.bias", ("h.{i}.ln_1.bias",)),
        Tensor("h{i}.attn.qkv.weight", ("h.{i}.attn.c_attn.weight",)),
        Tensor("h{i}.attn.qkv.bias", ("h.{i}.attn.c_attn.bias",)),
        Tensor("h{i}.attn.proj.weight", ("h.{i}.attn.c_proj.weight",)),
        Tensor("h{i}.attn.proj.bias", ("h.{i}.attn.c_proj.bias",)),
        Tensor("h{i}.ln_2.weight", ("h.{i}.ln_2.weight",)),
        Tensor("h{i}.ln_2.bias", ("h.{i}.ln_2.bias",)),
        Tensor("h{i}.mlp.fc.weight", ("h.{i}.mlp.c_fc.weight",)),
        Tensor("h{i}.mlp.fc.bias", ("h.{i}.mlp.c_fc.bias",)),
        Tensor("h{i}.mlp.proj.weight", ("h.{i}.mlp.c_proj.weight",)),
        Tensor("h{i}.mlp.proj.bias", ("h.{i}.mlp.c_proj.bias",)),
        Tensor("head.ln_f.weight", ("ln_f.weight",)),
        Tensor("head.ln_f.bias", ("ln_f.bias",)),
    ),
    config=(
        ConfigKey("vocab_size", "vocab_size", default=50257),
        ConfigKey("n_positions", "max_position_embeddings", default=1024),
        ConfigKey("n_embd", "hidden_size", default=768),
        ConfigKey("n_layer", "num_hidden_layers", default=12),
        ConfigKey("n_head", "num_heads", default=12),
        ConfigKey(
            "n_inner",
            "filter_size",
            to_cs=lambda v, c: v if v is not None else 4 * int(c.get("n_embd", 768)),
        ),
        ConfigKey("layer_norm_epsilon", "layer_norm_epsilon", default=1e-5),
        ConfigKey("activation_function", "nonlinearity", *_GELU_NEW, default="gelu_new"),
        ConfigKey("resid_pdrop", "dropout_rate", default=0.1),
    ),
    fixed={
        "position_embedding_type": "learned",
        "share_embedding_weights": True,
        "use_bias_in_output": False,
        "use_projection_bias_in_attention": True,
        "use_ffn_bias_in_attention": True,
        "use_ffn_bias": True,
    },
    ignored=("lm_head.weight", "h.{i}.attn.bias", "h.{i}.attn.masked_bias"),
    requires={"activation_function": ("gelu_new", "cs2sim's gelu is the tanh approximation")},
)

LLAMA = HFModel(
    model_type="llama",
    architecture="LlamaForCausalLM",
    layers="num_hidden_layers",
    tensors=(
        Tensor("embed.wte.weight", ("model.embed_tokens.weight",)),
        Tensor("h{i}.ln_1.weight", ("model.layers.{i}.input_layernorm.weight",)),
        Tensor(
            "h{i}.attn.qkv.weight",
            tuple(f"model.layers.{{i}}.self_attn.{p}_proj.weight" for p in "qkv"),
            transpose=True,
            sizes=_qkv,
        ),
        Tensor("h{i}.attn.proj.weight", ("model.layers.{i}.self_attn.o_proj.weight",), True),
        Tensor("h{i}.ln_2.weight", ("model.layers.{i}.post_attention_layernorm.weight",)),
        Tensor(
            "h{i}.mlp.fc.weight",
            ("model.layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.mlp.up_proj.weight"),
            transpose=True,
            sizes=_gate_up,
        ),
        Tensor("h{i}.mlp.proj.weight", ("model.layers.{i}.mlp.down_proj.weight",), True),
        Tensor("head.ln_f.weight", ("model.norm.weight",)),
        Tensor("head.out.weight", ("lm_head.weight",), True),
    ),
    config=(
        ConfigKey("vocab_size", "vocab_size", default=32000),
        ConfigKey("hidden_size", "hidden_size", default=4096),
        ConfigKey("intermediate_size", "filter_size", default=11008),
        ConfigKey("num_hidden_layers", "num_hidden_layers", default=32),
        ConfigKey("num_attention_heads", "num_heads", default=32),
        ConfigKey("max_position_embeddings", "max_position_embeddings", default=2048),
        ConfigKey("rms_norm_eps", "layer_norm_epsilon", default=1e-6),
        ConfigKey("tie_word_embeddings", "share_embedding_weights", default=False),
        ConfigKey("hidden_act", "nonlinearity", *_SILU, default="silu"),
        ConfigKey(
            "num_key_value_heads",
            "extra_attention_params",
            to_cs=lambda v, c: {"num_kv_groups": int(v)} if v is not None else None,
            to_hf=lambda v, m: int((v or {}).get("num_kv_groups") or m["num_heads"]),
        ),
    ),
    fixed={
        "position_embedding_type": "rotary",
        "norm_type": "rmsnorm",
        "use_bias_in_output": False,
        "use_projection_bias_in_attention": False,
        "use_ffn_bias_in_attention": False,
        "use_ffn_bias": False,
    },
    ignored=("model.layers.{i}.self_attn.rotary_emb.inv_freq",),
    requires={
        "rope_theta": (10000.0, "cs2sim's rotary base is 10000"),
        "hidden_act": ("silu", "cs2sim's LLaMA gate is SwiGLU"),
        "attention_bias": (False, "cs2sim's LLaMA has no attention biases"),
        "rope_scaling": (None, "cs2sim has no rotary scaling"),
    },
)

BERT = HFModel(
    model_type="bert",
    architecture="BertForPreTraining",
    layers="num_hidden_layers",
    tensors=(
        Tensor("embed.wte.weight", ("bert.embeddings.word_embeddings.weight",)),
        Tensor("embed.wpe.weight", ("bert.embeddings.position_embeddings.weight",)),
        Tensor("embed.tte.weight", ("bert.embeddings.token_type_embeddings.weight",)),
        Tensor("embed.ln.weight", ("bert.embeddings.LayerNorm.weight",)),
        Tensor("embed.ln.bias", ("bert.embeddings.LayerNorm.bias",)),
        *(
            Tensor(
                f"enc{{i}}.attn.qkv.{w}",
                tuple(
                    f"bert.encoder.layer.{{i}}.attention.self.{p}.{w}"
                    for p in ("query", "key", "value")
                ),
                transpose=w == "weight",
                sizes=_qkv,
            )
            for w in ("weight", "bias")
        ),
        Tensor(
            "enc{i}.attn.proj.weight",
            ("bert.encoder.layer.{i}.attention.output.dense.weight",),
            True,
        ),
        Tensor("enc{i}.attn.proj.bias", ("bert.encoder.layer.{i}.attention.output.dense.bias",)),
        Tensor("enc{i}.ln_1.weight", ("bert.encoder.layer.{i}.attention.output.LayerNorm.weight",)),
        Tensor("enc{i}.ln_1.bias", ("bert.encoder.layer.{i}.attention.output.LayerNorm.bias",)),
        Tensor("enc{i}.mlp.fc.weight", ("bert.encoder.layer.{i}.intermediate.dense.weight",), True),
        Tensor("enc{i}.mlp.fc.bias", ("bert.encoder.layer.{i}.intermediate.dense.bias",)),
        Tensor("enc{i}.mlp.proj.weight", ("bert.encoder.layer.{i}.output.dense.weight",), True),
        Tensor("enc{i}.mlp.proj.bias", ("bert.encoder.layer.{i}.output.dense.bias",)),
        Tensor("enc{i}.ln_2.weight", ("bert.encoder.layer.{i}.output.LayerNorm.weight",)),
        Tensor("enc{i}.ln_2.bias", ("bert.encoder.layer.{i}.output.LayerNorm.bias",)),
        Tensor("head.mlm.dense.weight", ("cls.predictions.transform.dense.weight",), True),
        Tensor("head.mlm.dense.bias", ("cls.predictions.transform.dense.bias",)),
        Tensor("head.mlm.ln.weight", ("cls.predictions.transform.LayerNorm.weight",)),
        Tensor("head.mlm.ln.bias", ("cls.predictions.transform.LayerNorm.bias",)),
        Tensor("head.mlm.out.bias", ("cls.predictions.bias",)),
        Tensor("head.nsp.pooler.weight", ("bert.pooler.dense.weight",), True),
        Tensor("head.nsp.pooler.bias", ("bert.pooler.dense.bias",)),
        Tensor("head.nsp.cls.weight", ("cls.seq_relationship.weight",), True),
        Tensor("head.nsp.cls.bias", ("cls.seq_relationship.bias",)),
    ),
    config=(
        ConfigKey("vocab_size", "vocab_size", default=30522),
        ConfigKey("hidden_size", "hidden_size", default=768),
        ConfigKey("num_hidden_layers", "num_hidden_layers", default=12),
        ConfigKey("num_attention_heads", "num_heads", default=12),
        ConfigKey("intermediate_size", "filter_size", default=3072),
        ConfigKey("max_position_embeddings", "max_position_embeddings", default=512),
        ConfigKey("layer_norm_eps", "layer_norm_epsilon", default=1e-12),
        ConfigKey("hidden_act", "encoder_nonlinearity", default="gelu"),
        ConfigKey("hidden_dropout_prob", "dropout_rate", default=0.1),
        ConfigKey("attention_probs_dropout_prob", "attention_dropout_rate", default=0.1),
    ),
    fixed={
        "position_embedding_type": "learned",
        "share_embedding_weights": True,
        "use_segment_embedding": True,
        "disable_nsp": False,
    },
    ignored=(
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
        "bert.embeddings.position_ids",
    ),
    requires={"type_vocab_size": (2, "cs2sim's BERT has two segments")},
)

MODELS: dict[str, HFModel] = {"gpt2": GPT2, "llama": LLAMA, "bert": BERT}
