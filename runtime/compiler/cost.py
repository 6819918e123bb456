"""The cost model: what one op costs a PE, in cycles, bytes and wavelets.

Every figure comes from a public WSE-2 / CS-2 fact in system/hardware.py, the kernel table
(kernels.py), or one of the calibrated parameters of calibration.py (named where used).

| figure                    | how it is computed (WSE-2 value)                                   |
|---------------------------|--------------------------------------------------------------------|
| FLOP per PE-cycle         | peak fp16 FLOP/s / (cores x clock)                      (8.02)     |
| SIMD width (multiply-add) | FLOP per PE-cycle / 2                                   (4)        |
| SRAM bytes per PE-cycle   | memory bandwidth / cores / clock                        (21.4)     |
| kernel efficiency         | weight streaming: KERNEL_PEAK_SHARE of that peak        (0.44)     |
|                           | pipelined: PIPE_PEAK_SHARE of it (calibration.py)       (0.147)    |
| fabric link               | one 32-bit wavelet per cycle per direction (SDK)        (4.4 GB/s) |
| a port                    | 100 Gb/s less RoCE framing, per direction               (12.2 GB/s)|
| PE memory for data        | 48 KiB less PE_RESERVED_BYTES for code and FIFOs        (40 KiB)   |
| op cycles on one PE       | roofline: max(FLOPs / FLOP-per-cycle, bytes / bytes-per-cycle)     |
|   matrix kernels          | bytes = multiply-adds x 3 values (weight, partial sum in and out)  |
|   stream kernels          | bytes = elements x values read + written (kernels.py)              |
| backward FLOPs            | forward x the kernel's `bwd` (dense 2, a first dense layer 1)      |
| wavelets per PE, sample   | matrix: a tile of t units takes ~sqrt(t) inputs and passes ~sqrt(t)|
|                           | partial sums on, forward and backward: 4 sqrt(t) a position;       |
|                           | stream: every element in, fwd and bwd: 2 per element (3 for a sum) |
| pipelined PE time, sample | arithmetic / p + PIPE_OP_CYCLES x vector ops: a matrix PE starts   |
|                           | one per wavelet of its tile (4 sqrt(t); a sample's positions ride  |
|                           | in the same op), a stream PE two (forward, backward)               |
| PEs of a pipelined op     | at most its knee (knee_pes): no vector op shorter than             |
|                           | PIPE_OP_CYCLES x SIMD elements; never more than its work           |
| pipelined memory of an op | params x (4 master + 2 half copy + 4 gradient + optimizer state)   |
|                           | + in-flight samples x its input (+ attention probabilities)        |
| in-flight samples at op i | 1 + ceil(2 x ops from i to the loss / positions per sample)        |

How the modes use these: placement.py and estimate.py (pipelined), streaming.py (weight
streaming). What the model ignores is listed in docs/cost-model.md ("Limits").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cs2sim.runtime.compiler.calibration import (
    KERNEL_PEAK_SHARE,
    PIPE_OP_CYCLES,
    PIPE_PEAK_SHARE,
)
from cs2sim.runtime.compiler.graph import OPTIMIZER_STATE_BYTES, Graph, Op
from cs2sim.runtime.compiler.kernels import Kernel, Match
from cs2sim.system.hardware import WaferSpec

__all__ = ["OpCost", "op_costs", "Rates", "rates", "GRAD_BYTES", "knee_pes"]

GRAD_BYTES = 4  # gradients leave the wafer as FP32 (mixed precision accumulates in FP32)


@dataclass(frozen=True)
class Rates:
    """Per-PE rates of a wafer and its system (see the table above)."""

    flops_per_cycle: float
    simd: float
    mem_bytes_per_cycle: float
    clock_hz: float
    peak_share: float  # KERNEL_PEAK_SHARE (weight streaming)
    pipe_share: float  # PIPE_PEAK_SHARE (pipelined kernels on long vectors)
    op_cycles: float  # PIPE_OP_CYCLES: fixed cycles of one vector op of a pipelined kernel
    link_bytes_s: float  # one fabric link, one direction
    wavelet_bytes: int
    port_bytes_s: float  # payload of one port, one direction
    ports: int
    usable_pe_bytes: int  # per PE, for data
    fill_seconds: float  # a wavefront across the whole fabric and back: (width + height) hops

    @property
    def io_bytes_s(self) -> float:
        """Payload bytes/s of all ports, one direction."""
        return self.ports * self.port_bytes_s


def rates(wafer: WaferSpec) -> Rates:
    """The per-PE rates of `wafer`, derived from its chip totals."""
    fpc = wafer.flops_per_pe_cycle
    return Rates(
        flops_per_cycle=fpc,
        simd=max(1.0, math.floor(fpc / 2)),
        mem_bytes_per_cycle=wafer.memory_bandwidth_per_pe_bytes_s / wafer.clock_hz,
        clock_hz=wafer.clock_hz,
        peak_share=KERNEL_PEAK_SHARE,
        pipe_share=PIPE_PEAK_SHARE,
        op_cycles=PIPE_OP_CYCLES,
        link_bytes_s=wafer.link_bytes_s,
        wavelet_bytes=wafer.wavelet_bytes,
        port_bytes_s=wafer.port_payload_bytes_s,
        ports=wafer.ports,
        usable_pe_bytes=wafer.usable_per_pe_bytes,
        fill_seconds=(wafer.width + wafer.height) * wafer.hop_cycles / wafer.clock_hz,
    )


@dataclass(frozen=True)
class OpCost:
    """What one op costs, per sample."""

    name: str
    block: str
    kernel: str
    dataflow: str  # "matrix" | "stream"
    fwd_flops: float
    bwd_flops: float
    fwd_cycles: float  # PE-cycles on one PE at peak (roofline)
    bwd_cycles: float
    work: int  # parallel units of one sample (weights, scores or output elements)
    wavelets: float  # stream kernels: wavelets into a PE per element and sample (fwd + bwd)
    max_pes: int  # pipelined: PEs whose time still goes mostly to arithmetic (the knee)
    state_bytes: int  # pipelined: weights, half copy, gradient, optimizer state
    act_bytes: int  # stored for backward, per in-flight sample
    in_flight: int  # samples in flight at this op (pipelined)
    in_link_bytes: float  # bytes across the input edge per sample, one direction
    out_link_bytes: float  # bytes across the output edge per sample, one direction
    weight_bytes: int  # weights as the kernel reads them (16-bit, or fp32)
    grad_bytes: int  # the weights' gradient as it leaves the wafer (FP32)
    boundary_bytes: int  # the op's output per sample (a WS layer's output is kept)
    keep_bytes: int  # its input per sample when its backward needs it (WS working set)
    ws_units: int  # elements of one sample the op's work spreads over in weight streaming
    positions: int = 1  # matrix: multiply-adds a unit of work does a sample (a weight: tokens)
    pipe_arith: float = 0.0  # pipelined: PE-cycles of arithmetic per sample (at PIPE_PEAK_SHARE)
    op_cycles: float = 0.0  # pipelined: PIPE_OP_CYCLES

    @property
    def cycles(self) -> float:
        """PE-cycles per sample, forward + backward, at peak."""
        return self.fwd_cycles + self.bwd_cycles

    @property
    def min_bytes(self) -> int:
        """On-wafer bytes in pipelined mode."""
        return self.state_bytes + self.act_bytes * self.in_flight

    def vector_ops(self, pes: int) -> float:
        """Vector ops a PE starts per sample (pipelined): one per input or partial-sum wavelet
        of its tile for a matrix kernel (4 sqrt(tile), forward and backward; a sample's
        positions ride in the same op), one per pass for a stream kernel."""
        p = max(1, pes)
        if self.dataflow == "matrix":
            return 4.0 * math.sqrt(max(1.0, self.work / p))
        return 2.0

    def pe_cycles(self, pes: int) -> float:
        """Cycles one PE of the kernel spends per sample (pipelined): its share of the
        arithmetic plus the fixed cost of every vector op it starts."""
        p = max(1, min(pes, self.work))  # PEs past one unit of work each have nothing to do
        return self.pipe_arith / p + self.op_cycles * self.vector_ops(p)

    def fabric_cycles(self, pes: int) -> float:
        """Wavelets through the busiest PE's ramp per sample (forward + backward)."""
        p = max(1, pes)
        if self.dataflow == "matrix":
            return 4.0 * math.sqrt(max(1.0, self.work / p)) * self.positions
        return self.wavelets * max(1.0, self.work / p)

    def samples_per_sec(self, pes: int, r: Rates) -> tuple[float, float]:
        """(compute, fabric) samples/s of this kernel on `pes` PEs (pipelined, one replica)."""
        p = max(1, pes)
        t = self.pe_cycles(p)
        compute = r.clock_hz / t if t > 0 else math.inf
        return compute, r.clock_hz / self.fabric_cycles(p)

    def arith_share(self, pes: int, rate: float, r: Rates) -> float:
        """The share of a PE's time spent on multiply-adds and elementwise arithmetic when the
        kernel runs at `rate` samples/s on `pes` PEs (its Compute Utilization)."""
        if rate <= 0:
            return 0.0
        return min(1.0, self.pipe_arith / max(1, pes) * rate / r.clock_hz)


def _roofline(flops: float, nbytes: float, r: Rates) -> float:
    return max(flops / r.flops_per_cycle, nbytes / r.mem_bytes_per_cycle)


def knee_pes(work: int, dataflow: str, op_cycles: float, simd: float, positions: int = 1) -> int:
    """The most PEs a pipelined kernel is split over: no finer than vector ops of
    op_cycles x simd elements, the length whose arithmetic at the full SIMD rate takes as long
    as starting the op (a shorter op spends most of its time starting). A matrix PE's ops run
    along its tile's side times the sample's positions, so a GEMV per sample (positions 1)
    needs tiles of (op_cycles x simd)^2 weights while a GEMM of 1,024 tokens may go down to one
    weight a PE; a stream PE's op runs over its elements. The bound depends on the hardware and
    the shape only, so more arithmetic per sample never buys a faster kernel."""
    length = max(0.0, op_cycles) * simd
    if dataflow == "matrix":
        tile = max(1.0, (length / max(1, positions)) ** 2)
    else:
        tile = max(1.0, length)
    return max(1, int(work / tile))


def _cost(op: Op, kern: Kernel, g: Graph, r: Rates, n_ops: int) -> OpCost:
    a = g.act_bytes
    bwd_factor = kern.bwd
    if kern.name == "fc" and op.index == 0:
        bwd_factor = 1.0  # the first layer's input is data: dW only, no dx
    fwd_flops = op.fwd_flops
    bwd_flops = fwd_flops * bwd_factor
    elems = max(op.in_elems, op.out_elems)
    if kern.bytes_fma:
        fwd_bytes = fwd_flops / 2 * kern.bytes_fma * a
        bwd_bytes = bwd_flops / 2 * kern.bytes_fma * a
    else:
        fwd_bytes = elems * kern.bytes_elem[0] * a
        bwd_bytes = elems * kern.bytes_elem[1] * a if bwd_factor or kern.name == "add" else 0.0
    fwd_cycles = _roofline(fwd_flops, fwd_bytes, r)
    bwd_cycles = _roofline(bwd_flops, bwd_bytes, r)
    heads, seq = int(op.attr("heads", 0) or 0), int(op.attr("seq", 0) or 0)
    if kern.parallel == "scores":
        work = heads * seq * seq
    elif kern.parallel == "weights":
        work = max(op.params, op.out_elems)
    else:
        work = elems
    work = max(1, int(work))
    # pipelined: arithmetic at PIPE_PEAK_SHARE of the roofline (weight streaming uses
    # KERNEL_PEAK_SHARE, streaming.py)
    pipe_arith = (fwd_cycles + bwd_cycles) / r.pipe_share
    # multiply-adds a unit of work does per sample: the length factor of a matrix PE's ops and
    # ramp (a weight's: the sample's positions; an attention score's: 2 x the head's width)
    positions = max(1, round(fwd_flops / (2 * work))) if kern.dataflow == "matrix" else 1
    max_pes = knee_pes(work, kern.dataflow, r.op_cycles, r.simd, positions)
    if kern.dataflow == "matrix":
        wavelets = 0.0
    else:
        wavelets = 3.0 if kern.name == "add" else 2.0  # in per element: forward + backward
    per_param = (
        4 + (0 if g.dtype == "float32" else 2) + 4 + OPTIMIZER_STATE_BYTES.get(g.optimizer, 8)
    )
    act = 0 if kern.name == "add" else op.in_elems * a
    if kern.parallel == "scores":
        act += heads * seq * seq * a  # attention probabilities, kept for backward
    depth = n_ops - op.index  # ops from this one to the loss
    in_flight = 1 + math.ceil(2 * depth / max(1, op.positions))
    w = r.wavelet_bytes  # one value a wavelet on the fabric
    return OpCost(
        name=op.name,
        block=op.block,
        kernel=kern.name,
        dataflow=kern.dataflow,
        fwd_flops=fwd_flops,
        bwd_flops=bwd_flops,
        fwd_cycles=fwd_cycles,
        bwd_cycles=bwd_cycles,
        work=work,
        wavelets=wavelets,
        max_pes=max_pes,
        state_bytes=op.params * per_param,
        act_bytes=int(act),
        in_flight=in_flight,
        in_link_bytes=float(op.in_elems * w),
        out_link_bytes=float(op.out_elems * w),
        weight_bytes=op.params * a,
        grad_bytes=op.params * GRAD_BYTES,
        boundary_bytes=op.out_elems * a,
        keep_bytes=op.in_elems * a if kern.keeps_input else 0,
        ws_units=max(1, int(elems)),
        positions=positions,
        pipe_arith=pipe_arith,
        op_cycles=r.op_cycles,
    )


def op_costs(g: Graph, matches: tuple[Match, ...], wafer: WaferSpec) -> tuple[OpCost, ...]:
    """The cost of every matched op, in order."""
    r = rates(wafer)
    return tuple(_cost(m.op, m.kernel, g, r, len(matches)) for m in matches)
