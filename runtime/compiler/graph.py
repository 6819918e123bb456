"""Pass 1, graph extraction: the model's own layer graph -> `Graph` of `Op`s with their sizes.

The graph comes from the runtime's model (`model.layer_graph(batch)`, runtime/nn/spec.py), built
in meta mode (meta.py) so a 6B-parameter model is read in well under a second without a byte of
weights. Each LayerSpec becomes an Op that also knows its block (the model block it belongs to,
`model.block_names`), its input size and its dtype (the 16-bit format of mixed precision, or
float32). Figures are per sample (one image or one sequence of T tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cs2sim.runtime.compiler.meta import meta_models

if TYPE_CHECKING:  # the models are imported where they are built (build_meta_model)
    from cs2sim.runtime.nn.model import Model

__all__ = ["Op", "Graph", "extract_graph", "OPTIMIZER_STATE_BYTES"]

# fp32 bytes of optimizer state per parameter, by optimizer_type (Adam keeps two moments,
# momentum SGD one buffer, plain SGD none)
OPTIMIZER_STATE_BYTES = {
    "adam": 8,
    "adamw": 8,
    "lamb": 8,
    "adafactor": 4,
    "rmsprop": 4,
    "sgd": 0,
    "momentum": 4,
}


@dataclass(frozen=True)
class Op:
    """One op of the graph (a LayerSpec plus where it sits and what it reads)."""

    name: str
    kind: str
    block: str
    index: int  # position in execution order
    params: int  # weights it reads (a tied weight counts in every op that reads it)
    fwd_flops: float  # per sample
    in_elems: int  # per sample
    out_elems: int  # per sample
    positions: int  # positions per sample (T for a sequence, 1 for a vector)
    out_shape: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    param_names: tuple[str, ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        """One kernel attribute by name."""
        return dict(self.attrs).get(key, default)


@dataclass(frozen=True)
class Graph:
    """The training graph the compiler works on."""

    model: str
    ops: tuple[Op, ...]
    blocks: tuple[str, ...]  # model.block_names, in order
    batch_size: int
    seq_len: int | None  # tokens per sequence (LM models), None for vector inputs
    dtype: str  # "float32" | "float16" | "bfloat16" | "cbfloat16"
    optimizer: str  # optimizer_type, lower case
    input_bytes: int  # bytes of one sample's input and labels as streamed in
    num_params: int  # unique trainable scalars
    unique_params: dict[str, int] = field(default_factory=dict)  # param name -> scalars

    @property
    def act_bytes(self) -> int:
        """Bytes of one activation value: 2 in mixed precision, 4 in float32."""
        return 4 if self.dtype == "float32" else 2

    def fingerprint(self) -> dict[str, Any]:
        """What the compile checksum covers from the graph: ops, shapes, dtypes, batch size.

        The optimizer type is part of the training graph (its state lives on the wafer in
        pipelined mode); its hyper-parameters (learning rate, betas) are not.
        """
        return {
            "model": self.model,
            "ops": [
                [
                    o.name,
                    o.kind,
                    o.block,
                    o.params,
                    o.fwd_flops,
                    o.in_elems,
                    o.out_elems,
                    list(o.out_shape),
                    [[k, repr(v)] for k, v in o.attrs],
                    list(o.param_names),
                ]
                for o in self.ops
            ],
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "dtype": self.dtype,
            "optimizer": self.optimizer,
            "input_bytes": self.input_bytes,
        }

    def block_params(self, block: str) -> int:
        """Unique scalars the block's ops read (a weight read twice in a block counts once)."""
        names: dict[str, int] = {}
        for o in self.ops:
            if o.block == block:
                for n in o.param_names:
                    names[n] = self.unique_params.get(n, 0)
        return sum(names.values())


def _optimizer(params: dict[str, Any]) -> str:
    opt = params.get("optimizer") or {}
    name = str(opt.get("optimizer_type", "sgd")).lower()
    if name == "sgd" and float(opt.get("momentum", 0.0) or 0.0) > 0:
        return "momentum"
    return name


def build_meta_model(model_name: str, params: dict[str, Any], half: str) -> Model:
    """The model, built with shape-only weights (see meta.py)."""
    from cs2sim.runtime import registry
    from cs2sim.runtime.numerics.precision import Policy

    with meta_models():
        return registry.build(model_name, params["model"], Policy(half), 0)


def _graph_batch(params: dict[str, Any], batch: int) -> int:
    """The batch the compiler sees: with gradient accumulation the micro-batch of all systems
    (train_input.micro_batch_size x num_csx), else the batch."""
    from cs2sim.runtime.params import grad_accumulation

    _, micro, systems = grad_accumulation(params)
    return batch if micro is None else micro * systems


def extract_graph(
    model_name: str, params: dict[str, Any], half: str, model: Model | None = None
) -> Graph:
    """Pass 1: the layer graph of `model_name` at the train (micro-)batch size, as a Graph."""
    model = model if model is not None else build_meta_model(model_name, params, half)
    ti = params.get("train_input") or {}
    batch = _graph_batch(params, int(ti.get("batch_size") or 1))
    if hasattr(model, "set_input"):  # a graph that depends on the input (BERT: predictions)
        model.set_input(ti)
    seq_len = None
    cfg: Any = getattr(model, "cfg", None)  # a model's own config object (any class), if any
    if hasattr(cfg, "max_positions"):  # a sequence model
        cfg_T = int(cfg.max_positions)
        seq_len = int(ti.get("max_sequence_length") or cfg_T)
        specs = model.layer_graph(batch, seq_len)
        input_shape: tuple[int, ...] = (batch, seq_len)
    else:
        specs = model.layer_graph(batch)
        input_shape = tuple(model.input_shape(batch))
    act = 4 if half == "float32" else 2
    in_per_sample = math.prod(input_shape[1:])
    if seq_len is not None and hasattr(model, "input_bytes_per_sample"):
        input_bytes = int(model.input_bytes_per_sample(seq_len))
    elif seq_len is not None:  # token ids and labels, int32 each
        input_bytes = 4 * seq_len * 2
    else:  # features in the activation format, an int32 label
        input_bytes = act * in_per_sample + 4
    blocks = tuple(model.block_names)
    ops: list[Op] = []
    prev_out = in_per_sample
    for i, s in enumerate(specs):
        block = s.name.split(".")[0]
        positions = math.prod(s.out_shape[1:-1]) if len(s.out_shape) > 2 else 1
        ops.append(
            Op(
                name=s.name,
                kind=s.kind,
                block=block,
                index=i,
                params=int(s.params),
                fwd_flops=float(s.fwd_flops),
                in_elems=int(prev_out),
                out_elems=int(s.out_elems),
                positions=int(positions),
                out_shape=tuple(s.out_shape),
                attrs=tuple(s.attrs),
                param_names=tuple(s.param_names),
            )
        )
        prev_out = s.out_elems
    unique = {n: int(a.size) for n, a in model.parameters().items()}
    return Graph(
        model=model_name,
        ops=tuple(ops),
        blocks=blocks,
        batch_size=batch,
        seq_len=seq_len,
        dtype=half,
        optimizer=_optimizer(params),
        input_bytes=int(input_bytes),
        num_params=int(sum(unique.values())),
        unique_params=unique,
    )
