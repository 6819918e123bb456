"""`LayerSpec`: one kernel of a model's layer graph, as the compiler sees it.

`Model.layer_graph(batch_size)` lists the kernels in execution order. Figures are PER SAMPLE
(one image, or one sequence of T tokens) except `out_shape`, which is the output's full shape at
the requested batch size. `params` counts every weight the kernel reads, so a tied weight shows
up in two specs under the SAME name in `param_names`; `Model.num_params()` counts it once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LayerSpec", "KINDS", "make_spec"]

# The kernel library the graph is written in; fwd FLOPs are counted as 2 per multiply-add and
# ~1 per elementwise operation (approximate for transcendental functions).
KINDS = (
    "embedding",  # gather rows of a table
    "dense",  # x @ W (+ b)
    "relu",
    "tanh",
    "elu",
    "selu",
    "linear",
    "gelu",  # activations, elementwise
    "dropout",
    "layernorm",
    "rmsnorm",  # LLaMA's normalisation (no centring, no bias)
    "swiglu",  # silu(gate) * up of the gated feed-forward
    "gather",  # rows picked by index (BERT's masked positions, the [CLS] row)
    "attention",  # softmax(q k^T / sqrt(hs)) v over all heads, causal or not, optional rotary
    "add",  # residual sum
    "softmax_ce",  # softmax cross-entropy loss head
)


@dataclass(frozen=True)
class LayerSpec:
    """One kernel: name (dotted, as the parameters), kind (a KINDS entry), per-sample figures."""

    name: str
    kind: str
    params: int  # scalars of the weights the kernel reads
    fwd_flops: float  # forward FLOPs per sample
    out_elems: int  # output elements per sample
    param_names: tuple[str, ...] = ()  # keys into Model.parameters()
    out_shape: tuple[int, ...] = ()  # output shape at the batch size asked for, e.g. (B, T, C)
    attrs: tuple[
        tuple[str, Any], ...
    ] = ()  # kernel attributes, e.g. (("n_in", 784), ("n_out", 500))

    def attr(self, key: str, default: Any = None) -> Any:
        """One kernel attribute by name."""
        return dict(self.attrs).get(key, default)


def make_spec(
    name: str,
    kind: str,
    out_shape: tuple[int, ...],
    flops_per_position: float,
    arrays: tuple[Any, ...] = (),
    names: dict[int, str] | None = None,
    attrs: tuple[tuple[str, Any], ...] = (),
) -> LayerSpec:
    """A spec for a kernel whose output is out_shape = (B, [T,] width); flops are per position."""
    positions = 1
    for d in out_shape[1:-1]:
        positions *= d  # positions per sample: 1 for an image, T for a sequence
    names = names or {}
    return LayerSpec(
        name=name,
        kind=kind,
        params=int(sum(a.size for a in arrays)),
        fwd_flops=float(flops_per_position * positions),
        out_elems=int(out_shape[-1] * positions),
        param_names=tuple(names.get(id(a), "?") for a in arrays),
        out_shape=tuple(out_shape),
        attrs=attrs,
    )
