"""Pass 2, kernel matching: every op of the graph -> a kernel of the library, or a clear refusal.

The library (KERNELS) is the one table of what the simulated CS-2 can run; cost.py reads only
these fields, so a new layer kind is one row here (and its LayerSpec in runtime/nn):

  kinds        op kinds (runtime/nn/spec.py KINDS) the kernel runs
  bwd          backward FLOPs / forward FLOPs (dense: dW and dx; the first layer needs no dx)
  dataflow     "matrix": a tile of weights (or attention scores) stays in each PE; per sample a
               PE receives a slice of the inputs and passes partial sums on (broadcast along
               rows, reduction along columns: ~2 sqrt(tile) wavelets a pass), and does tile
               multiply-adds. "stream": each PE streams its share of the elements through
               (a wavelet in and out per element and pass).
  parallel     what one sample's work splits over: "weights" (params), "scores" (heads x T x T),
               "outputs" (output elements of the sample)
  bytes_fma    SRAM values a PE moves per multiply-add (matrix kernels) -- or
  bytes_elem   (forward, backward) values read + written per element (stream kernels)
  keeps_input  its backward needs its input (dense: x for dW; attention: q, k, v), so a
               weight-streaming layer keeps these for the backward; other ops are recomputed

Unsupported op kind or dtype -> KernelMatchError naming the op, its layer and the kernels that
exist. That is where `--validate_only` stops.
"""

from __future__ import annotations

from dataclasses import dataclass

from cs2sim.runtime.compiler.errors import KernelMatchError
from cs2sim.runtime.compiler.graph import Graph, Op

__all__ = ["Kernel", "KERNELS", "Match", "match_kernels", "DTYPES"]

# Mixed precision: 16-bit inputs to arithmetic, FP32 accumulation (REFERENCE §6.1); float32 runs
# the same kernels on register pairs (half the values per memory word).
DTYPES = ("float16", "cbfloat16", "bfloat16", "float32")


@dataclass(frozen=True)
class Kernel:
    """One kernel of the library and its cost-model parameters."""

    name: str
    kinds: tuple[str, ...]
    dtypes: tuple[str, ...]
    bwd: float
    dataflow: str = "stream"  # "matrix" | "stream"
    parallel: str = "outputs"  # "weights" | "scores" | "outputs"
    bytes_fma: float = 0.0
    bytes_elem: tuple[float, float] = (0.0, 0.0)  # (forward, backward)
    keeps_input: bool = False
    doc: str = ""


KERNELS: tuple[Kernel, ...] = (
    # a multiply-add reads one weight and reads and writes one partial sum: 3 values
    Kernel("fc", ("dense",), DTYPES, bwd=2.0, dataflow="matrix", parallel="weights",
           bytes_fma=3.0, keeps_input=True,
           doc="matrix multiply x @ W (+ b), weights stationary in the PEs"),
    Kernel("attention", ("attention",), DTYPES, bwd=2.0, dataflow="matrix", parallel="scores",
           bytes_fma=3.0, keeps_input=True,
           doc="causal softmax(q k^T / sqrt(d)) v over all heads (+ rotary)"),
    Kernel("embedding", ("embedding",), DTYPES, bwd=1.0, parallel="weights",
           bytes_elem=(2.0, 3.0),
           doc="row gather from a table (backward: scatter-add into the table gradient)"),
    # elementwise: read x, write y (2 values an element); backward reads x and dy, writes dx (3)
    Kernel("eltwise", ("relu", "tanh", "elu", "selu", "linear", "gelu", "dropout"), DTYPES,
           bwd=1.0, bytes_elem=(2.0, 3.0), doc="elementwise activation / dropout"),
    # a + b -> y (3 values); backward hands dy to both inputs (read 1, write 2)
    Kernel("add", ("add",), DTYPES, bwd=0.0, bytes_elem=(3.0, 3.0),
           doc="residual sum of two streams"),
    # mean and variance pass, normalise pass (read, read, write); backward one more read
    Kernel("layernorm", ("layernorm",), DTYPES, bwd=2.0, bytes_elem=(3.0, 4.0),
           doc="layer normalisation (two passes over the row, then scale and shift)"),
    # max/sum-exp pass then loss; backward writes softmax - onehot over the logits
    Kernel("softmax_ce", ("softmax_ce",), DTYPES, bwd=0.4, bytes_elem=(3.0, 3.0),
           doc="softmax cross-entropy loss head and its gradient"),
)


@dataclass(frozen=True)
class Match:
    """An op and the kernel that runs it."""

    op: Op
    kernel: Kernel


def _by_kind() -> dict[str, Kernel]:
    return {k: kern for kern in KERNELS for k in kern.kinds}


def match_kernels(graph: Graph, library: tuple[Kernel, ...] = KERNELS) -> tuple[Match, ...]:
    """Pass 2: one Match per op, in order; KernelMatchError for the first op none covers."""
    table = {k: kern for kern in library for k in kern.kinds}
    names = ", ".join(f"{k.name} ({'/'.join(k.kinds)})" for k in library)
    out: list[Match] = []
    for op in graph.ops:
        kern = table.get(op.kind)
        if kern is None:
            raise KernelMatchError(
                f"kernel matching failed: op '{op.kind}' in layer '{op.name}' has no kernel in "
                f"the CS-2 kernel library (kernels: {names}); replace that layer with a "
                "supported op.")
        if graph.dtype not in kern.dtypes:
            raise KernelMatchError(
                f"kernel matching failed: kernel '{kern.name}' for layer '{op.name}' does not "
                f"take {graph.dtype} (it takes {', '.join(kern.dtypes)}); change "
                "model.fp16_type / mixed_precision.")
        out.append(Match(op, kern))
    return tuple(out)
