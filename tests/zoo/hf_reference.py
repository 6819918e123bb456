"""Hugging Face's GPT-2 and LLaMA forward passes written out in numpy from their published
definitions (transformers' modeling_gpt2.py and modeling_llama.py), over Hugging Face tensor
names: the reference a converted checkpoint's logits are compared with. Not cs2sim code."""

from __future__ import annotations

import numpy as np


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(B, nh, T, hs) each -> (B, T, nh * hs), causal."""
    T = q.shape[2]
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    s = s + np.triu(np.full((T, T), -np.inf), k=1)
    y = _softmax(s) @ v
    return y.transpose(0, 2, 1, 3).reshape(q.shape[0], T, -1)


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gpt2_logits(t: dict[str, np.ndarray], cfg: dict, ids: np.ndarray) -> np.ndarray:
    """GPT2LMHeadModel: Conv1D weights (in, out), c_attn = [q | k | v], tied lm_head."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    B, T = ids.shape
    nh, eps = cfg["n_head"], cfg["layer_norm_epsilon"]
    x = t["wte.weight"][ids] + t["wpe.weight"][np.arange(T)]
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        h = _layer_norm(x, t[p + "ln_1.weight"], t[p + "ln_1.bias"], eps)
        qkv = h @ t[p + "attn.c_attn.weight"] + t[p + "attn.c_attn.bias"]
        q, k, v = (a.reshape(B, T, nh, -1).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, -1))
        x = x + _attend(q, k, v) @ t[p + "attn.c_proj.weight"] + t[p + "attn.c_proj.bias"]
        h = _layer_norm(x, t[p + "ln_2.weight"], t[p + "ln_2.bias"], eps)
        a = h @ t[p + "mlp.c_fc.weight"] + t[p + "mlp.c_fc.bias"]
        a = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))  # gelu_new
        x = x + a @ t[p + "mlp.c_proj.weight"] + t[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, t["ln_f.weight"], t["ln_f.bias"], eps)
    return x @ t["wte.weight"].T


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def llama_logits(t: dict[str, np.ndarray], cfg: dict, ids: np.ndarray) -> np.ndarray:
    """LlamaForCausalLM: nn.Linear weights (out, in), rotate_half rotary, grouped kv heads
    repeated (repeat_kv), SwiGLU down(silu(gate) * up), untied lm_head."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    B, T = ids.shape
    nh, kv, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["rms_norm_eps"]
    hs = cfg["hidden_size"] // nh
    inv = 1.0 / (cfg.get("rope_theta", 10000.0) ** (np.arange(0, hs, 2) / hs))
    freqs = np.outer(np.arange(T), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    x = t["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, t[p + "input_layernorm.weight"], eps)

        def proj(name: str, heads: int, h: np.ndarray = h, p: str = p) -> np.ndarray:
            return (h @ t[p + name].T).reshape(B, T, heads, hs).transpose(0, 2, 1, 3)

        q, k, v = (
            proj("self_attn.q_proj.weight", nh),
            proj("self_attn.k_proj.weight", kv),
            proj("self_attn.v_proj.weight", kv),
        )
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        k, v = np.repeat(k, nh // kv, axis=1), np.repeat(v, nh // kv, axis=1)
        x = x + _attend(q, k, v) @ t[p + "self_attn.o_proj.weight"].T
        h = _rms(x, t[p + "post_attention_layernorm.weight"], eps)
        g = h @ t[p + "mlp.gate_proj.weight"].T
        u = h @ t[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ t[p + "mlp.down_proj.weight"].T
    x = _rms(x, t["model.norm.weight"], eps)
    return x @ t["lm_head.weight"].T


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / np.sqrt(2.0)))


def bert_logits(
    t: dict[str, np.ndarray], cfg: dict, ids: np.ndarray, types: np.ndarray, positions: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """BertForPreTraining: (MLM logits at `positions` (B * P, V), NSP logits (B, 2)); post-norm
    layers, nn.Linear weights (out, in), hidden_act gelu (erf), decoder tied to the embedding."""
    t = {k: v.astype(np.float64) for k, v in t.items()}
    B, T = ids.shape
    nh, eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
    e = "bert.embeddings."
    x = t[e + "word_embeddings.weight"][ids] + t[e + "position_embeddings.weight"][np.arange(T)]
    x = x + t[e + "token_type_embeddings.weight"][types]
    x = _layer_norm(x, t[e + "LayerNorm.weight"], t[e + "LayerNorm.bias"], eps)

    def lin(name: str, h: np.ndarray) -> np.ndarray:
        return h @ t[name + ".weight"].T + t[name + ".bias"]

    for i in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{i}."
        q, k, v = (
            lin(p + f"attention.self.{n}", x).reshape(B, T, nh, -1).transpose(0, 2, 1, 3)
            for n in ("query", "key", "value")
        )
        s = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
        ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, -1)
        a = p + "attention.output."
        x = _layer_norm(
            x + lin(a + "dense", ctx), t[a + "LayerNorm.weight"], t[a + "LayerNorm.bias"], eps
        )
        m = lin(p + "output.dense", _gelu_erf(lin(p + "intermediate.dense", x)))
        x = _layer_norm(
            x + m, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"], eps
        )
    g = x[np.arange(B)[:, None], positions].reshape(B * positions.shape[1], -1)
    c = "cls.predictions.transform."
    h = _layer_norm(
        _gelu_erf(lin(c + "dense", g)), t[c + "LayerNorm.weight"], t[c + "LayerNorm.bias"], eps
    )
    mlm = h @ t[e + "word_embeddings.weight"].T + t["cls.predictions.bias"]
    nsp = lin("cls.seq_relationship", np.tanh(lin("bert.pooler.dense", x[:, 0])))
    return mlm, nsp
