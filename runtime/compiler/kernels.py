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
exist, carrying the kernel-matching report (`matching_report`: every op and its kernel or why it
has none, the library, what to do) that the driver writes to model_dir. That is where
`--validate_only` stops.
"""

from __future__ import annotations

from dataclasses import dataclass

from cs2sim.runtime.compiler.errors import KernelMatchError
from cs2sim.runtime.compiler.graph import Graph, Op

__all__ = [
    "Kernel",
    "KERNELS",
    "Match",
    "match_kernels",
    "matching_report",
    "DTYPES",
    "REPORT_NAME",
]

REPORT_NAME = "kernel_matching_report.txt"  # written to model_dir when matching fails

# Mixed precision: 16-bit inputs to arithmetic, FP32 accumulation (Cerebras' Data Formats page,
# docs/sources.md); float32 runs the same kernels on register pairs (half the values per memory
# word).
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
    Kernel(
        "fc",
        ("dense",),
        DTYPES,
        bwd=2.0,
        dataflow="matrix",
        parallel="weights",
        bytes_fma=3.0,
        keeps_input=True,
        doc="matrix multiply x @ W (+ b), weights stationary in the PEs",
    ),
    Kernel(
        "attention",
        ("attention",),
        DTYPES,
        bwd=2.0,
        dataflow="matrix",
        parallel="scores",
        bytes_fma=3.0,
        keeps_input=True,
        doc="softmax(q k^T / sqrt(d)) v over all heads, causal or bidirectional (+ rotary, "
        "grouped key/value heads)",
    ),
    Kernel(
        "embedding",
        ("embedding",),
        DTYPES,
        bwd=1.0,
        parallel="weights",
        bytes_elem=(2.0, 3.0),
        doc="row gather from a table (backward: scatter-add into the table gradient)",
    ),
    # elementwise: read x, write y (2 values an element); backward reads x and dy, writes dx (3)
    Kernel(
        "eltwise",
        ("relu", "tanh", "elu", "selu", "linear", "gelu", "dropout"),
        DTYPES,
        bwd=1.0,
        bytes_elem=(2.0, 3.0),
        doc="elementwise activation / dropout",
    ),
    # silu(gate) * up: reads two values, writes one; backward reads gate, up, dy, writes two
    Kernel(
        "swiglu",
        ("swiglu",),
        DTYPES,
        bwd=1.5,
        bytes_elem=(3.0, 5.0),
        doc="gated activation silu(a) * b of the SwiGLU feed-forward",
    ),
    # rows picked by index (BERT's masked positions, the [CLS] row); backward scatters them back
    Kernel(
        "gather",
        ("gather",),
        DTYPES,
        bwd=1.0,
        bytes_elem=(2.0, 2.0),
        doc="row gather from the activations (MLM positions, [CLS])",
    ),
    # a + b -> y (3 values); backward hands dy to both inputs (read 1, write 2)
    Kernel(
        "add", ("add",), DTYPES, bwd=0.0, bytes_elem=(3.0, 3.0), doc="residual sum of two streams"
    ),
    # mean and variance pass, normalise pass (read, read, write); backward one more read
    Kernel(
        "layernorm",
        ("layernorm",),
        DTYPES,
        bwd=2.0,
        bytes_elem=(3.0, 4.0),
        doc="layer normalisation (two passes over the row, then scale and shift)",
    ),
    # one pass for the mean square, then scale; backward one more read
    Kernel(
        "rmsnorm",
        ("rmsnorm",),
        DTYPES,
        bwd=2.0,
        bytes_elem=(3.0, 4.0),
        doc="RMS normalisation (mean square over the row, then scale)",
    ),
    # max/sum-exp pass then loss; backward writes softmax - onehot over the logits
    Kernel(
        "softmax_ce",
        ("softmax_ce",),
        DTYPES,
        bwd=0.4,
        bytes_elem=(3.0, 3.0),
        doc="softmax cross-entropy loss head and its gradient",
    ),
)


@dataclass(frozen=True)
class Match:
    """An op and the kernel that runs it."""

    op: Op
    kernel: Kernel


def _problem(op: Op, dtype: str, table: dict[str, Kernel]) -> str | None:
    """Why `op` has no kernel, or None when it has one."""
    kern = table.get(op.kind)
    if kern is None:
        return "no kernel in the CS-2 kernel library runs this op"
    if dtype not in kern.dtypes:
        return f"kernel '{kern.name}' does not take {dtype} (it takes {', '.join(kern.dtypes)})"
    return None


def matching_report(graph: Graph, library: tuple[Kernel, ...] = KERNELS) -> str:
    """The kernel-matching report: the unsupported ops (layer, op, why), every op's kernel, the
    kernels that exist, and what to do."""
    table = {k: kern for kern in library for k in kern.kinds}
    rows = [(op, _problem(op, graph.dtype, table)) for op in graph.ops]
    bad = [(op, why) for op, why in rows if why]
    width = max((len(op.name) for op in graph.ops), default=10)
    kinds = sorted(table)
    lines = [
        f"Kernel matching report: model {graph.model}, {len(graph.ops)} ops, {graph.dtype}",
        "",
        f"Unsupported ops ({len(bad)}):",
    ]
    lines += [
        f"  layer '{op.name}' (block '{op.block}'): op '{op.kind}': {why}" for op, why in bad
    ] or ["  none"]
    lines += ["", "Every op of the graph, in execution order:"]
    lines += [
        f"  {op.name:<{width}}  {op.kind:<12} -> "
        + (table[op.kind].name if not why else "UNSUPPORTED")
        for op, why in rows
    ]
    lines += ["", "Kernels in the CS-2 kernel library (kernel: op kinds; dtypes; what it does):"]
    lines += [f"  {k.name}: {', '.join(k.kinds)}; {', '.join(k.dtypes)}; {k.doc}" for k in library]
    lines += [
        "",
        "What to do:",
        "  1. Write the layer with ops the library runs: its specs() must name op kinds "
        f"from this list ({', '.join(kinds)}); a layer built from runtime/nn's layers "
        "(Dense, Activation, LayerNorm, RMSNorm, SelfAttention, ...) reports theirs "
        "(docs/own-model.md).",
        "  2. Or replace the op in the model with a supported one (an activation: "
        "relu, tanh, elu, selu, gelu, linear).",
        "  3. A dtype the kernel does not take: change model.fp16_type / mixed_precision.",
        "  4. A host run (run.py without --cs_ip) needs no kernel: the model trains on the "
        "CPU as written.",
    ]
    return "\n".join(lines) + "\n"


def match_kernels(graph: Graph, library: tuple[Kernel, ...] = KERNELS) -> tuple[Match, ...]:
    """Pass 2: one Match per op, in order; KernelMatchError (with the report) for the first op
    none covers."""
    table = {k: kern for kern in library for k in kern.kinds}
    names = ", ".join(f"{k.name} ({'/'.join(k.kinds)})" for k in library)
    out: list[Match] = []
    for op in graph.ops:
        kern = table.get(op.kind)
        if kern is None:
            err = KernelMatchError(
                f"kernel matching failed: op '{op.kind}' in layer '{op.name}' has no kernel in "
                f"the CS-2 kernel library (kernels: {names}); replace that layer with a "
                "supported op."
            )
        elif graph.dtype not in kern.dtypes:
            err = KernelMatchError(
                f"kernel matching failed: kernel '{kern.name}' for layer '{op.name}' does not "
                f"take {graph.dtype} (it takes {', '.join(kern.dtypes)}); change "
                "model.fp16_type / mixed_precision."
            )
        else:
            out.append(Match(op, kern))
            continue
        err.report = matching_report(graph, library)
        raise err
    return tuple(out)
