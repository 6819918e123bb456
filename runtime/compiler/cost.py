"""The cost model: what one op costs a PE, in cycles, bytes and links, from system/hardware.py.

Every number here is derived from the public WSE-2 facts in system/hardware.py (REFERENCE §7) and
the kernel table (kernels.py); nothing is fitted to a measured throughput.

| figure                    | how it is computed (WSE-2 value)                                   |
|---------------------------|--------------------------------------------------------------------|
| FLOP per PE-cycle         | peak fp16 FLOP/s / (cores x clock)                      (8.02)     |
| SIMD width (multiply-add) | FLOP per PE-cycle / 2                                   (4)        |
| SRAM bytes per PE-cycle   | memory bandwidth / cores / clock                        (21.4)     |
| fabric bytes/s per PE     | fabric bandwidth / cores / 8                            (32.4 GB/s)|
| system I/O bytes/s        | 1.2 Tb/s / 8, shared by every replica                   (150 GB/s) |
| op cycles on one PE       | roofline: max(FLOPs / FLOP-per-cycle, bytes / bytes-per-cycle)     |
|   matrix kernels          | bytes = multiply-adds x 3 values (weight, partial sum in and out)  |
|   elementwise kernels     | bytes = elements x values read + written (kernels.py)              |
| backward FLOPs            | forward x the kernel's `bwd` (dense 2, a first dense layer 1)      |
| useful PEs of an op       | its per-sample work / SIMD width (weights, outputs or scores)      |
| compute samples/s         | min(PEs, useful PEs) x clock / PE-cycles per sample                |
| transmission samples/s    | edge PEs x fabric bytes/s / bytes over the edge per sample (values |
|                           | forward + gradients backward); the input kernel: the system I/O    |
| kernel samples/s          | min(compute, transmission)                                         |
| overall samples/s         | min over kernels (the slowest stage sets the pace)                 |
| pipelined memory of an op | params x (4 master + 2 half copy + 4 gradient + optimizer state)   |
|                           | + in-flight samples x its input (+ attention probabilities)        |
| in-flight samples at op i | 1 + ceil(2 x ops from i to the loss / positions per sample)        |
| weight streaming          | per layer: max(compute on the whole wafer, weights in [+ gradients |
|                           | out] at the system I/O); the backward recomputes the forward       |

What it ignores (honest limits): routing congestion and the exact wavelet protocol, kernel
program size and FIFO buffers in PE memory, pipeline fill/drain at start-up, the input workers
(see cs_input_analyzer), clock or power throttling, sparsity, and MemoryX/SwarmX latency
(only their bandwidth). Per-PE figures are spreads of chip totals, not published per-PE numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.graph import OPTIMIZER_STATE_BYTES, Graph, Op
from cs2sim.runtime.compiler.kernels import Kernel, Match
from cs2sim.system.hardware import WaferSpec

__all__ = ["OpCost", "op_costs", "Rates", "rates"]


@dataclass(frozen=True)
class Rates:
    """Per-PE rates of a wafer (see the table above)."""

    flops_per_cycle: float
    simd: float
    mem_bytes_per_cycle: float
    fabric_bytes_s: float  # per PE
    io_bytes_s: float  # whole system
    clock_hz: float


def rates(wafer: WaferSpec) -> Rates:
    """The per-PE rates of `wafer`, derived from its chip totals."""
    fpc = wafer.flops_per_pe_cycle
    return Rates(
        flops_per_cycle=fpc,
        simd=max(1.0, math.floor(fpc / 2)),
        mem_bytes_per_cycle=wafer.memory_bandwidth_per_pe_bytes_s / wafer.clock_hz,
        fabric_bytes_s=wafer.fabric_bandwidth_bits_s / 8 / wafer.cores,
        io_bytes_s=wafer.io_bytes_s,
        clock_hz=wafer.clock_hz,
    )


@dataclass(frozen=True)
class OpCost:
    """What one op costs, per sample."""

    name: str
    block: str
    kernel: str
    fwd_flops: float
    bwd_flops: float
    fwd_cycles: float  # PE-cycles on one PE (roofline)
    bwd_cycles: float
    max_pes: int  # PEs one sample's work can be spread over
    state_bytes: int  # pipelined: weights, half copy, gradient, optimizer state
    act_bytes: int  # stored for backward, per in-flight sample
    in_flight: int  # samples in flight at this op (pipelined)
    in_link_bytes: float  # bytes over the input edge per sample (values in, gradients out)
    out_link_bytes: float  # bytes over the output edge per sample
    weight_bytes: int  # 16-bit (or fp32) weights as the kernel reads them (weight streaming)
    boundary_bytes: int  # the op's output per sample (what a WS layer keeps on the wafer)

    @property
    def cycles(self) -> float:
        """PE-cycles per sample, forward + backward."""
        return self.fwd_cycles + self.bwd_cycles

    @property
    def min_bytes(self) -> int:
        """On-wafer bytes in pipelined mode."""
        return self.state_bytes + self.act_bytes * self.in_flight


def _roofline(flops: float, nbytes: float, r: Rates) -> float:
    return max(flops / r.flops_per_cycle, nbytes / r.mem_bytes_per_cycle)


def _cost(op: Op, kern: Kernel, g: Graph, r: Rates, n_ops: int) -> OpCost:
    a = g.act_bytes
    bwd_factor = kern.bwd
    if kern.name == "fc" and op.index == 0:
        bwd_factor = 1.0  # the first layer's input is data: dW only, no dx
    fwd_flops = op.fwd_flops
    bwd_flops = fwd_flops * bwd_factor
    if kern.bytes_fma:
        fwd_bytes = fwd_flops / 2 * kern.bytes_fma * a
        bwd_bytes = bwd_flops / 2 * kern.bytes_fma * a
    else:
        elems = max(op.in_elems, op.out_elems)
        fwd_bytes = elems * kern.bytes_elem[0] * a
        bwd_bytes = elems * kern.bytes_elem[1] * a if bwd_factor or kern.name == "add" else 0.0
    heads, seq = int(op.attr("heads", 0) or 0), int(op.attr("seq", 0) or 0)
    if kern.parallel == "scores":
        work = heads * seq * seq
    elif kern.parallel == "weights":
        work = max(op.params, op.out_elems)
    else:
        work = max(op.in_elems, op.out_elems)
    max_pes = max(1, math.ceil(work / r.simd))
    per_param = 4 + (0 if g.dtype == "float32" else 2) + 4 + OPTIMIZER_STATE_BYTES.get(
        g.optimizer, 8)
    act = 0 if kern.name == "add" else op.in_elems * a
    if kern.parallel == "scores":
        act += heads * seq * seq * a  # attention probabilities, kept for backward
    depth = n_ops - op.index  # ops from this one to the loss
    in_flight = 1 + math.ceil(2 * depth / max(1, op.positions))
    return OpCost(
        name=op.name, block=op.block, kernel=kern.name, fwd_flops=fwd_flops,
        bwd_flops=bwd_flops, fwd_cycles=_roofline(fwd_flops, fwd_bytes, r),
        bwd_cycles=_roofline(bwd_flops, bwd_bytes, r), max_pes=max_pes,
        state_bytes=op.params * per_param, act_bytes=int(act), in_flight=in_flight,
        in_link_bytes=float(op.in_elems * a * 2), out_link_bytes=float(op.out_elems * a * 2),
        weight_bytes=op.params * a,
        boundary_bytes=op.out_elems * a)


def op_costs(g: Graph, matches: tuple[Match, ...], wafer: WaferSpec) -> tuple[OpCost, ...]:
    """The cost of every matched op, in order."""
    r = rates(wafer)
    return tuple(_cost(m.op, m.kernel, g, r, len(matches)) for m in matches)
