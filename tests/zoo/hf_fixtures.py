"""Tiny Hugging Face checkpoints with random weights, written with the Hugging Face tensor names
and shapes of GPT2LMHeadModel, LlamaForCausalLM and BertForPreTraining (spelled out here, not
taken from cs2sim's table) and their config.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

C, L, NH, P = 32, 2, 4, 64


def _gpt2() -> tuple[dict, dict]:
    V, F = 257, 4 * C
    shapes = {"wte.weight": (V, C), "wpe.weight": (P, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(L):
        h = f"h.{i}."
        shapes |= {
            h + "ln_1.weight": (C,),
            h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C),
            h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C),
            h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,),
            h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, F),
            h + "mlp.c_fc.bias": (F,),
            h + "mlp.c_proj.weight": (F, C),
            h + "mlp.c_proj.bias": (C,),
        }
    config = {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": V,
        "n_positions": P,
        "n_embd": C,
        "n_layer": L,
        "n_head": NH,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }
    return shapes, config


def _llama() -> tuple[dict, dict]:
    V, F, KV = 257, 88, 2
    hs = C // NH
    shapes = {
        "model.embed_tokens.weight": (V, C),
        "model.norm.weight": (C,),
        "lm_head.weight": (V, C),
    }
    for i in range(L):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (C,),
            p + "post_attention_layernorm.weight": (C,),
            p + "self_attn.q_proj.weight": (NH * hs, C),
            p + "self_attn.k_proj.weight": (KV * hs, C),
            p + "self_attn.v_proj.weight": (KV * hs, C),
            p + "self_attn.o_proj.weight": (C, C),
            p + "mlp.gate_proj.weight": (F, C),
            p + "mlp.up_proj.weight": (F, C),
            p + "mlp.down_proj.weight": (C, F),
        }
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": V,
        "hidden_size": C,
        "intermediate_size": F,
        "num_hidden_layers": L,
        "num_attention_heads": NH,
        "num_key_value_heads": KV,
        "max_position_embeddings": P,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    }
    return shapes, config


def _bert() -> tuple[dict, dict]:
    V, F = 260, 4 * C
    e = "bert.embeddings."
    shapes = {
        e + "word_embeddings.weight": (V, C),
        e + "position_embeddings.weight": (P, C),
        e + "token_type_embeddings.weight": (2, C),
        e + "LayerNorm.weight": (C,),
        e + "LayerNorm.bias": (C,),
        "bert.pooler.dense.weight": (C, C),
        "bert.pooler.dense.bias": (C,),
        "cls.predictions.transform.dense.weight": (C, C),
        "cls.predictions.transform.dense.bias": (C,),
        "cls.predictions.transform.LayerNorm.weight": (C,),
        "cls.predictions.transform.LayerNorm.bias": (C,),
        "cls.predictions.bias": (V,),
        "cls.seq_relationship.weight": (2, C),
        "cls.seq_relationship.bias": (2,),
    }
    for i in range(L):
        p = f"bert.encoder.layer.{i}."
        for n in ("query", "key", "value"):
            shapes |= {
                p + f"attention.self.{n}.weight": (C, C),
                p + f"attention.self.{n}.bias": (C,),
            }
        shapes |= {
            p + "attention.output.dense.weight": (C, C),
            p + "attention.output.dense.bias": (C,),
            p + "attention.output.LayerNorm.weight": (C,),
            p + "attention.output.LayerNorm.bias": (C,),
            p + "intermediate.dense.weight": (F, C),
            p + "intermediate.dense.bias": (F,),
            p + "output.dense.weight": (C, F),
            p + "output.dense.bias": (C,),
            p + "output.LayerNorm.weight": (C,),
            p + "output.LayerNorm.bias": (C,),
        }
    config = {
        "architectures": ["BertForPreTraining"],
        "model_type": "bert",
        "vocab_size": V,
        "hidden_size": C,
        "num_hidden_layers": L,
        "num_attention_heads": NH,
        "intermediate_size": F,
        "max_position_embeddings": P,
        "type_vocab_size": 2,
        "layer_norm_eps": 1e-12,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    }
    return shapes, config


MODELS = {"gpt2": _gpt2, "llama": _llama, "bert": _bert}


def write_hf(model: str, folder: Path, seed: int = 0) -> tuple[dict[str, np.ndarray], dict]:
    """Random weights (norm gains near 1) as folder/model.safetensors + folder/config.json."""
    shapes, config = MODELS[model]()
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, shape in shapes.items():
        a = rng.standard_normal(shape).astype(np.float32) * 0.08
        if len(shape) == 1 and ("norm" in name.lower() or "ln_" in name) and "bias" not in name:
            a += 1.0
        tensors[name] = a
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(config))
    return tensors, config
