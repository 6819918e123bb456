"""The benchmark's cases: one model, batch and optimizer each, built for our runtime and for the
PyTorch reference with the same shapes. Every case's label states its shapes (vocabulary too).

A case's `ours()` / `torch()` return a closure running one training step (forward, backward,
optimizer update), plus our model (for its FLOP count and the per-layer profile).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Case", "CASES", "EXECUTOR_FACTORIES", "executor_note", "fc_batch", "lm_batch"]

FC_MODEL = {"hidden_sizes": [500, 300], "dropout": 0.0, "activation_fn": "relu"}
FC_BATCH = 256
ADAM = {"optimizer_type": "adam", "learning_rate": 1e-3}
ADAMW = {"optimizer_type": "adamw", "learning_rate": 2.8e-4, "weight_decay_rate": 0.01}


def gpt_model(vocab: int, seq: int) -> dict:
    """The 4-layer d=256 GPT-2 of the bench (4 heads, filter 1024, tied output, no dropout)."""
    return {
        "vocab_size": vocab,
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_heads": 4,
        "filter_size": 1024,
        "max_position_embeddings": seq,
        "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "share_embedding_weights": True,
        "nonlinearity": "gelu",
    }


def bert_model(vocab: int, seq: int) -> dict:
    """The 4-layer d=256 BERT of the bench (4 heads, filter 1024, tied MLM output, NSP head)."""
    return {
        "vocab_size": vocab,
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_heads": 4,
        "filter_size": 1024,
        "max_position_embeddings": seq,
        "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0,
        "encoder_nonlinearity": "gelu",
        "layer_norm_epsilon": 1e-5,
    }


def llama_model(vocab: int, seq: int) -> dict:
    """The 4-layer d=256 LLaMA of the bench (4 heads of 64, SwiGLU 688, RMSNorm, rotary over
    the whole head, no biases, untied output)."""
    return {
        "vocab_size": vocab,
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_heads": 4,
        "filter_size": 688,
        "max_position_embeddings": seq,
        "dropout_rate": 0.0,
    }


def bert_batch(
    rng: np.random.Generator, vocab: int, batch: int, seq: int, predictions: int = 20
) -> dict:
    """A masked-LM batch as runtime/data/mlm.py makes it: P predictions per row, weights
    scaled by B / (masked tokens), a next-sentence label."""
    ids = rng.integers(4, vocab, (batch, seq)).astype(np.int32)  # (B, T)
    seg = (np.arange(seq)[None, :] >= rng.integers(2, seq - 2, (batch, 1))).astype(np.int32)
    pos = np.sort(
        np.stack(
            [rng.choice(np.arange(1, seq - 1), predictions, replace=False) for _ in range(batch)]
        ),
        axis=1,
    ).astype(np.int32)  # (B, P)
    w = np.full((batch, predictions), 1.0 / predictions, np.float32)  # B / (B * P)
    return {
        "input_ids": ids,
        "token_type_ids": seg,
        "masked_lm_positions": pos,
        "masked_lm_ids": np.take_along_axis(ids, pos, axis=1),
        "masked_lm_weights": w,
        "next_sentence_label": rng.integers(0, 2, batch).astype(np.int32),
    }


def fc_batch(rng: np.random.Generator, batch: int = FC_BATCH) -> dict:
    return {
        "x": rng.random((batch, 784), dtype=np.float32),
        "y": rng.integers(0, 10, batch).astype(np.int32),
    }


def lm_batch(rng: np.random.Generator, vocab: int, batch: int, seq: int) -> dict:
    tok = rng.integers(0, vocab, (batch, seq + 1)).astype(np.int32)  # (B, T + 1)
    return {"input_ids": tok[:, :-1].copy(), "labels": tok[:, 1:].copy()}


@dataclass(frozen=True)
class Case:
    """One benchmark row: what runs, in what units, and the target ratio (ours / PyTorch)."""

    key: str
    label: str  # shapes included
    model: str  # runtime/modelzoo name
    params: dict
    optimizer: dict
    batch: int
    seq: int  # 1 for fc_mnist
    vocab: int  # classes for fc_mnist
    unit: str  # "samples" | "tokens"
    target: float | None  # ours / PyTorch at least this (None: no reference)
    half: str = "float32"
    extra: dict = field(default_factory=dict)

    @property
    def units_per_step(self) -> int:
        return self.batch * (self.seq if self.unit == "tokens" else 1)

    def data(self) -> dict:
        rng = np.random.default_rng(0)
        if self.model == "fc_mnist":
            return fc_batch(rng, self.batch)
        if self.model == "bert":
            return bert_batch(rng, self.vocab, self.batch, self.seq)
        return lm_batch(rng, self.vocab, self.batch, self.seq)

    # ------------------------------------------------------------ ours
    def ours(self, executor: Any = None) -> tuple[Callable[[], object], Any, Any]:
        """(step closure, model, optimizer) of our runtime's real training step, run by
        `executor` (default: a new CpuExecutor)."""
        from cs2sim.runtime import registry
        from cs2sim.runtime.executors.cpu import CpuExecutor
        from cs2sim.runtime.numerics.loss_scale import build_loss_scaler
        from cs2sim.runtime.numerics.optim import build_optimizer
        from cs2sim.runtime.numerics.precision import Policy

        model = registry.get(self.model)(self.params, Policy(self.half), seed=1)
        model.train()
        opt = build_optimizer(self.optimizer, model.parameters(), half=self.half)
        scaler = build_loss_scaler(self.optimizer, self.half)
        ex = executor if executor is not None else CpuExecutor()
        ex.load(model, opt, scaler, {"optimizer": self.optimizer})
        if hasattr(ex, "keep_trace"):
            ex.keep_trace = False  # a benchmark keeps no per-step trace
        batch = self.data()
        counter = iter(range(1, 10**9))
        return (lambda: ex.execute_step(batch, next(counter))), model, opt

    # ------------------------------------------------------------ PyTorch
    def torch(self) -> Callable[[], object]:
        """The same step in PyTorch (eager, fp32, CPU)."""
        import torch
        import torch.nn.functional as F

        torch.manual_seed(1)
        batch = self.data()
        if self.model == "fc_mnist":
            net = _torch_fc(self.params)
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            x, y = torch.from_numpy(batch["x"]), torch.from_numpy(batch["y"]).long()

            def fc_step() -> None:
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(net(x), y).backward()
                opt.step()

            return fc_step
        if self.model == "bert":
            return _torch_bert_step(self.params, batch)
        net = _torch_llama(self.params) if self.model == "llama" else _torch_gpt(self.params)
        opt = torch.optim.AdamW(net.parameters(), lr=2.8e-4, weight_decay=0.01)
        x = torch.from_numpy(batch["input_ids"]).long()
        y = torch.from_numpy(batch["labels"]).long()

        def lm_step() -> None:
            opt.zero_grad(set_to_none=True)
            logits = net(x)  # (B, T, V)
            F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1)).backward()
            opt.step()

        return lm_step


def _torch_fc(mp: dict) -> Any:
    import torch.nn as tnn

    sizes = [784, *mp["hidden_sizes"], 10]
    layers: list[Any] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(tnn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(tnn.ReLU())
    return tnn.Sequential(*layers)


def _torch_gpt(mp: dict) -> Any:
    """GPT-2 as nanoGPT writes it: pre-LN blocks, fused qkv, SDPA causal attention, tanh GELU,
    learned positions, output tied to the token embedding."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    class Block(tnn.Module):
        def __init__(self, d: int, nh: int, f: int) -> None:
            super().__init__()
            self.ln1, self.ln2 = tnn.LayerNorm(d), tnn.LayerNorm(d)
            self.qkv, self.proj = tnn.Linear(d, 3 * d), tnn.Linear(d, d)
            self.fc, self.out = tnn.Linear(d, f), tnn.Linear(f, d)
            self.nh = nh

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, nh, T, hs)
            x = x + self.proj(a.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            d, T = mp["hidden_size"], mp["max_position_embeddings"]
            self.wte = tnn.Embedding(mp["vocab_size"], d)
            self.wpe = tnn.Embedding(T, d)
            self.blocks = tnn.ModuleList(
                Block(d, mp["num_heads"], mp["filter_size"]) for _ in range(mp["num_hidden_layers"])
            )
            self.ln_f = tnn.LayerNorm(d)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T  # tied output, as ours

    return GPT()


def _torch_bert_step(mp: dict, batch: dict) -> Callable[[], object]:
    """BERT as Hugging Face writes it (post-LN encoder, SDPA bidirectional attention, tanh
    GELU), the MLM head on the gathered positions with the output tied to the token embedding,
    the NSP head; loss = sum(w * CE_mlm) / B + mean CE_nsp, as ours."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    d, nh, f, T, V = (
        mp["hidden_size"],
        mp["num_heads"],
        mp["filter_size"],
        mp["max_position_embeddings"],
        mp["vocab_size"],
    )
    eps = mp["layer_norm_epsilon"]

    class Layer(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = tnn.Linear(d, 3 * d), tnn.Linear(d, d)
            self.ln1, self.ln2 = tnn.LayerNorm(d, eps=eps), tnn.LayerNorm(d, eps=eps)
            self.fc, self.out = tnn.Linear(d, f), tnn.Linear(f, d)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T_, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=2)
            q, k, v = (t.view(B, T_, nh, C // nh).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v)  # (B, nh, T, hs), no mask
            x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(B, T_, C)))
            return self.ln2(x + self.out(F.gelu(self.fc(x), approximate="tanh")))

    class Bert(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe, self.tte = (
                tnn.Embedding(V, d),
                tnn.Embedding(T, d),
                tnn.Embedding(2, d),
            )
            self.ln = tnn.LayerNorm(d, eps=eps)
            self.layers = tnn.ModuleList(Layer() for _ in range(mp["num_hidden_layers"]))
            self.mlm_dense, self.mlm_ln = tnn.Linear(d, d), tnn.LayerNorm(d, eps=eps)
            self.mlm_bias = tnn.Parameter(torch.zeros(V))
            self.pooler, self.nsp = tnn.Linear(d, d), tnn.Linear(d, 2)

        def forward(self, ids, seg, pos):  # type: ignore[no-untyped-def]
            x = self.ln(self.wte(ids) + self.wpe(torch.arange(ids.shape[1])) + self.tte(seg))
            for layer in self.layers:
                x = layer(x)
            g = torch.gather(x, 1, pos[..., None].expand(-1, -1, d))  # (B, P, C)
            h = self.mlm_ln(F.gelu(self.mlm_dense(g), approximate="tanh"))
            mlm = h @ self.wte.weight.T + self.mlm_bias  # (B, P, V) tied
            return mlm, self.nsp(torch.tanh(self.pooler(x[:, 0])))

    torch.manual_seed(1)
    net = Bert()
    opt = torch.optim.AdamW(net.parameters(), lr=2.8e-4, weight_decay=0.01)
    t = {k: torch.from_numpy(v) for k, v in batch.items()}
    ids, seg, pos = (
        t["input_ids"].long(),
        t["token_type_ids"].long(),
        t["masked_lm_positions"].long(),
    )
    labels, w, nsp = (
        t["masked_lm_ids"].long(),
        t["masked_lm_weights"],
        t["next_sentence_label"].long(),
    )
    B = ids.shape[0]

    def bert_step() -> None:
        opt.zero_grad(set_to_none=True)
        mlm, nsp_logits = net(ids, seg, pos)
        ce = F.cross_entropy(mlm.reshape(-1, V), labels.reshape(-1), reduction="none")
        loss = (ce * w.reshape(-1)).sum() / B + F.cross_entropy(nsp_logits, nsp)
        loss.backward()
        opt.step()

    return bert_step


def _torch_llama(mp: dict) -> Any:
    """LLaMA as its reference code writes it: pre-RMSNorm blocks, rotary (rotate_half) on q
    and k over the whole head, SDPA causal attention, SwiGLU, no biases, untied output."""
    import torch
    import torch.nn as tnn
    import torch.nn.functional as F

    d, nh, f, T, V = (
        mp["hidden_size"],
        mp["num_heads"],
        mp["filter_size"],
        mp["max_position_embeddings"],
        mp["vocab_size"],
    )
    hs = d // nh
    inv = 10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv  # (T, hs/2)
    cos = torch.cat([ang.cos(), ang.cos()], -1).float()  # (T, hs)
    sin = torch.cat([ang.sin(), ang.sin()], -1).float()

    def rope(x: torch.Tensor) -> torch.Tensor:  # (B, nh, T, hs)
        x1, x2 = x[..., : hs // 2], x[..., hs // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Block(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.n2 = tnn.RMSNorm(d, eps=1e-6), tnn.RMSNorm(d, eps=1e-6)
            self.qkv, self.o = tnn.Linear(d, 3 * d, bias=False), tnn.Linear(d, d, bias=False)
            self.w13 = tnn.Linear(d, 2 * f, bias=False)
            self.w2 = tnn.Linear(f, d, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            B, T_, C = x.shape
            q, k, v = self.qkv(self.n1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T_, nh, hs).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(B, T_, C))
            g, u = self.w13(self.n2(x)).split(f, dim=2)
            return x + self.w2(F.silu(g) * u)

    class Llama(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = tnn.Embedding(V, d)
            self.blocks = tnn.ModuleList(Block() for _ in range(mp["num_hidden_layers"]))
            self.norm, self.out = tnn.RMSNorm(d, eps=1e-6), tnn.Linear(d, V, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx)
            for blk in self.blocks:
                x = blk(x)
            return self.out(self.norm(x))

    return Llama()


def _gpt_case(key: str, vocab: int, seq: int, batch: int, target: float) -> Case:
    label = f"gpt2 L4 d256 h4 ff1024 V{vocab:,} T{seq} B{batch} fp32 AdamW"
    return Case(
        key, label, "gpt2", gpt_model(vocab, seq), ADAMW, batch, seq, vocab, "tokens", target
    )


CASES: dict[str, Case] = {
    "fc": Case(
        "fc",
        f"fc_mnist 784-500-300-10 relu fp32 B{FC_BATCH} Adam",
        "fc_mnist",
        FC_MODEL,
        ADAM,
        FC_BATCH,
        1,
        10,
        "samples",
        1.4,
    ),
    "gpt": _gpt_case("gpt", 256, 128, 8, 1.2),
    # GPT-2's real vocabulary with a short sequence: the output projection and the loss dominate
    "gpt_v50k": _gpt_case("gpt_v50k", 50257, 32, 8, 1.0),
    # the 4-layer d=256 BERT (bidirectional, MLM on 20 gathered positions + NSP) and
    # LLaMA (RMSNorm, SwiGLU, rotary), sequences of 128, the byte-level vocabularies
    "bert": Case(
        "bert",
        "bert L4 d256 h4 ff1024 V260 T128 P20 B8 fp32 AdamW",
        "bert",
        bert_model(260, 128),
        ADAMW,
        8,
        128,
        260,
        "tokens",
        1.0,
    ),
    "llama": Case(
        "llama",
        "llama L4 d256 h4 ff688 V256 T128 B8 fp32 AdamW",
        "llama",
        llama_model(256, 128),
        ADAMW,
        8,
        128,
        256,
        "tokens",
        1.0,
    ),
    # ours only: the cost of emulating cbfloat16 + dynamic loss scaling against case "fc"
    "fc_cb16": Case(
        "fc_cb16",
        f"fc_mnist 784-500-300-10 relu cbfloat16+DLS B{FC_BATCH} Adam",
        "fc_mnist",
        {**FC_MODEL, "mixed_precision": True, "fp16_type": "cbfloat16"},
        {**ADAM, "loss_scaling_factor": "dynamic"},
        FC_BATCH,
        1,
        10,
        "samples",
        None,
        half="cbfloat16",
    ),
}

# HOOK for the CS-2 executors: name -> factory(case) returning (step closure, model,
# optimizer) of the case's model trained through that executor. The bench runs every registered
# factory in the same interleaving as the other rows (against PyTorch on the same case). An
# executor is registered only when its module exists (runtime.executors.pipelined /
# weight_streaming, with the QueuedExecutor load / execute_step interface): no row is faked.
EXECUTOR_FACTORIES: dict[str, Callable[[Case], tuple[Callable[[], object], Any, Any]]] = {}
_EXECUTORS = (  # row name, module, class, constructor arguments
    ("pipelined", "cs2sim.runtime.executors.pipelined", "PipelinedExecutor", ()),
    (
        "weight_streaming",
        "cs2sim.runtime.executors.weight_streaming",
        "WeightStreamingExecutor",
        (1,),
    ),
)


def _executor_factory(module: str, cls_name: str, args: tuple) -> Callable[[Case], Any]:
    def make(case: Case) -> tuple[Callable[[], object], Any, Any]:
        cls = getattr(importlib.import_module(module), cls_name)
        return case.ours(cls(*args))

    return make


for _name, _module, _cls, _args in _EXECUTORS:
    try:
        _found = importlib.util.find_spec(_module) is not None
    except ImportError:
        _found = False
    if _found:
        EXECUTOR_FACTORIES[_name] = _executor_factory(_module, _cls, _args)


def executor_note() -> str:
    """What the bench says about the executor rows."""
    if EXECUTOR_FACTORIES:
        return f"executor rows: {', '.join(EXECUTOR_FACTORIES)}"
    return (
        "pipelined / weight-streaming rows: not measured (no executor registered in "
        "bench/cases.py EXECUTOR_FACTORIES: runtime.executors.pipelined / weight_streaming "
        "are not in this tree)"
    )
