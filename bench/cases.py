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
        "vocab_size": vocab, "hidden_size": 256, "num_hidden_layers": 4, "num_heads": 4,
        "filter_size": 1024, "max_position_embeddings": seq, "dropout_rate": 0.0,
        "attention_dropout_rate": 0.0, "share_embedding_weights": True, "nonlinearity": "gelu",
    }


def fc_batch(rng: np.random.Generator, batch: int = FC_BATCH) -> dict:
    return {"x": rng.random((batch, 784), dtype=np.float32),
            "y": rng.integers(0, 10, batch).astype(np.int32)}


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
        net = _torch_gpt(self.params)
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
            self.blocks = tnn.ModuleList(Block(d, mp["num_heads"], mp["filter_size"])
                                         for _ in range(mp["num_hidden_layers"]))
            self.ln_f = tnn.LayerNorm(d)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T  # tied output, as ours

    return GPT()


def _gpt_case(key: str, vocab: int, seq: int, batch: int, target: float) -> Case:
    label = f"gpt2 L4 d256 h4 ff1024 V{vocab:,} T{seq} B{batch} fp32 AdamW"
    return Case(key, label, "gpt2", gpt_model(vocab, seq), ADAMW, batch, seq, vocab, "tokens",
                target)


CASES: dict[str, Case] = {
    "fc": Case("fc", f"fc_mnist 784-500-300-10 relu fp32 B{FC_BATCH} Adam", "fc_mnist",
               FC_MODEL, ADAM, FC_BATCH, 1, 10, "samples", 1.4),
    "gpt": _gpt_case("gpt", 256, 128, 8, 1.2),
    # GPT-2's real vocabulary with a short sequence: the output projection and the loss dominate
    "gpt_v50k": _gpt_case("gpt_v50k", 50257, 32, 8, 1.0),
    # ours only: the cost of emulating cbfloat16 + dynamic loss scaling against case "fc"
    "fc_cb16": Case("fc_cb16", f"fc_mnist 784-500-300-10 relu cbfloat16+DLS B{FC_BATCH} Adam",
                    "fc_mnist", {**FC_MODEL, "mixed_precision": True, "fp16_type": "cbfloat16"},
                    {**ADAM, "loss_scaling_factor": "dynamic"}, FC_BATCH, 1, 10, "samples", None,
                    half="cbfloat16"),
}

# HOOK for the CS-2 executors (issue 9): name -> factory(case) returning (step closure, model,
# optimizer) of the case's model trained through that executor. The bench runs every registered
# factory in the same interleaving as the other rows (against PyTorch on the same case). An
# executor is registered only when its module exists (runtime.executors.pipelined /
# weight_streaming, with the QueuedExecutor load / execute_step interface): no row is faked.
EXECUTOR_FACTORIES: dict[str, Callable[[Case], tuple[Callable[[], object], Any, Any]]] = {}
_EXECUTORS = (  # row name, module, class, constructor arguments
    ("pipelined", "cs2sim.runtime.executors.pipelined", "PipelinedExecutor", ()),
    ("weight_streaming", "cs2sim.runtime.executors.weight_streaming", "WeightStreamingExecutor",
     (1,)),
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
    return ("pipelined / weight-streaming rows: not measured (no executor registered in "
            "bench/cases.py EXECUTOR_FACTORIES: runtime.executors.pipelined / weight_streaming "
            "are not in this tree yet; issue 9)")
