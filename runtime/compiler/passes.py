"""PASSES: the compiler as one table of named passes, with a verifier after each.

    extract   graph extraction from the model (graph.py)
    match     kernel matching against the library (kernels.py)   <- --validate_only stops here
    place     pipelined: rectangles on the wafer (placement.py)
              weight streaming: the per-layer schedule (streaming.py)
    estimate  samples/s per kernel and overall (estimate.py; streaming.py for WS)
    plan      the executable Plan (plan.py)

Each pass reads and fills a `Compilation` and returns the lines it adds to the compile log; its
verifier checks the invariants the next pass relies on and raises PassVerifyError naming the
pass (a compiler bug, never a user error).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cs2sim.runtime.compiler.cost import OpCost, op_costs
from cs2sim.runtime.compiler.errors import PassVerifyError
from cs2sim.runtime.compiler.estimate import Estimate, estimate_pipelined, shared_edge
from cs2sim.runtime.compiler.graph import Graph, extract_graph
from cs2sim.runtime.compiler.io import InputCluster, as_dict
from cs2sim.runtime.compiler.kernels import KERNELS, Match, match_kernels
from cs2sim.runtime.compiler.placement import Placement, fmt_bytes, place_pipelined
from cs2sim.runtime.compiler.plan import Plan
from cs2sim.runtime.compiler.report import pe_share
from cs2sim.runtime.compiler.streaming import StreamPlan, plan_streaming
from cs2sim.system.hardware import WaferSpec
from cs2sim.system.state import ExecMode

__all__ = ["Compilation", "Pass", "PASSES", "VALIDATE_LAST"]


@dataclass
class Compilation:
    """What the passes share: inputs, then each pass's product."""

    model_name: str
    params: dict[str, Any]
    half: str
    mode: ExecMode
    target: str | None
    num_csx: int
    wafer: WaferSpec
    model: Any = None  # a prebuilt model (tests); else built in meta mode
    input_cluster: InputCluster | None = None  # the job's input workers, when known
    multireplica: bool = False  # runconfig.multireplica: copies of the model on the wafer
    checksum: str = ""
    graph: Graph | None = None
    matches: tuple[Match, ...] = ()
    costs: tuple[OpCost, ...] = ()
    placement: Placement | None = None
    stream: StreamPlan | None = None
    estimate: Estimate | None = None
    plan: Plan | None = None
    log: list[str] = field(default_factory=list)


def _extract(c: Compilation) -> list[str]:
    g = c.graph = extract_graph(c.model_name, c.params, c.half, c.model)
    seq = f", {g.seq_len} tokens a sample" if g.seq_len else ""
    return [
        f"model {g.model}: {len(g.ops)} ops in {len(g.blocks)} blocks, "
        f"{g.num_params:,} parameters, batch {g.batch_size}{seq}, {g.dtype}, "
        f"optimizer {g.optimizer}"
    ]


def _verify_graph(c: Compilation) -> None:
    g = c.graph
    assert g is not None
    if not g.ops:
        raise PassVerifyError("extract produced an empty graph")
    for o in g.ops:
        if o.block not in g.blocks:
            raise PassVerifyError(f"extract: op {o.name} belongs to no model block")
        if o.params < 0 or o.fwd_flops < 0 or not math.isfinite(o.fwd_flops):
            raise PassVerifyError(f"extract: op {o.name} has negative or infinite sizes")


def _match(c: Compilation) -> list[str]:
    assert c.graph is not None
    c.matches = match_kernels(c.graph)
    counts: dict[str, int] = {}
    for m in c.matches:
        counts[m.kernel.name] = counts.get(m.kernel.name, 0) + 1
    return [
        f"matched {len(c.matches)} ops to {len(counts)} kernels: "
        + ", ".join(f"{k} x{n}" for k, n in counts.items())
    ]


def _verify_match(c: Compilation) -> None:
    assert c.graph is not None
    if len(c.matches) != len(c.graph.ops):
        raise PassVerifyError("match: not every op has a kernel")
    names = {k.name for k in KERNELS}
    for m in c.matches:
        if m.kernel.name not in names or m.op.kind not in m.kernel.kinds:
            raise PassVerifyError(f"match: {m.op.name} matched to a kernel that does not cover it")


def _place(c: Compilation) -> list[str]:
    assert c.graph is not None
    c.costs = op_costs(c.graph, c.matches, c.wafer)
    if c.mode == ExecMode.WEIGHT_STREAMING:
        c.stream = plan_streaming(c.graph, c.costs, c.wafer, c.num_csx, c.input_cluster)
        s = c.stream
        return [
            f"weight streaming: {len(s.layers)} layers on the whole wafer, {s.num_csx} "
            f"CS-X, {s.batch_per_system} samples per system in {s.micro_batches} "
            f"micro-batch(es) of {s.micro_batch_size}, "
            f"{fmt_bytes(s.activation_bytes)} of layer outputs kept on the wafer, "
            f"{fmt_bytes(s.offloaded_bytes)} offloaded to MemoryX, "
            f"{fmt_bytes(s.working_bytes)} working set"
        ]
    c.placement = p = place_pipelined(
        c.graph, c.costs, c.wafer, multireplica=c.multireplica, input_cluster=c.input_cluster
    )
    used = sum(k.pes for k in p.kernels) * p.replicas
    return [
        f"pipelined: {len(p.kernels)} kernels placed, {p.replicas} replica(s), "
        f"{used:,} of {c.wafer.pes:,} PEs, {fmt_bytes(p.needed_bytes)} on-wafer memory, "
        f"{_ports(p.ports * p.replicas)} of {c.wafer.ports} ports feeding the input"
    ]


def _ports(n: float) -> str:
    return f"{n:g}" if n >= 1 else f"{n:.2f}"


def _verify_place(c: Compilation) -> None:
    if c.mode == ExecMode.WEIGHT_STREAMING:
        s = c.stream
        assert s is not None and c.graph is not None
        if [lp.block for lp in s.layers] != [
            b for b in c.graph.blocks if any(o.block == b for o in c.graph.ops)
        ]:
            raise PassVerifyError("place: the layer schedule is not the model's block order")
        for lp in s.layers:
            if min(lp.fwd_compute, lp.bwd_compute, lp.fwd_stream, lp.bwd_stream) < 0:
                raise PassVerifyError(f"place: layer {lp.name} has a negative time")
        if sum(lp.retained for lp in s.layers) > 1:
            raise PassVerifyError("place: more than one layer keeps its weights on the wafer")
        if not (
            s.micro_batches >= 1
            and s.micro_batch_size * s.micro_batches
            >= s.batch_per_system
            > s.micro_batch_size * (s.micro_batches - 1)
        ):
            raise PassVerifyError("place: the micro-batches do not cover the batch")
        held = s.activation_bytes + s.working_bytes + s.weights_bytes
        if held > c.wafer.usable_sram_bytes:
            raise PassVerifyError("place: the weight-streaming plan holds more than the wafer")
        return
    p = c.placement
    assert p is not None
    w = c.wafer
    seen: list[tuple[int, int, int, int]] = []
    for k, cost in zip(p.kernels, c.costs, strict=True):
        if k.pes * w.usable_per_pe_bytes < cost.min_bytes:
            raise PassVerifyError(f"place: {k.name} has fewer PEs than its memory needs")
        for r in k.rects:
            if r.x < 0 or r.y < 0 or r.x + r.w > w.width or r.y + r.h > w.height or r.pes < 1:
                raise PassVerifyError(f"place: {k.name} lies outside the wafer")
            seen.append((r.x, r.y, r.w, r.h))
    for j in range(p.replicas):  # consecutive kernels are neighbours on the fabric
        chain = [k.rects[j] for k in p.kernels]
        if any(shared_edge(a, b) == 0 for a, b in zip(chain, chain[1:], strict=False)):
            raise PassVerifyError("place: two consecutive kernels do not touch")
    seen.sort()
    # disjointness: sweep by x; rectangles are few enough for the pairwise check on neighbours
    for i, a in enumerate(seen):
        for b in seen[i + 1 :]:
            if b[0] >= a[0] + a[2]:
                break
            if b[1] < a[1] + a[3] and a[1] < b[1] + b[3]:
                raise PassVerifyError("place: two kernel rectangles overlap")


def _estimate(c: Compilation) -> list[str]:
    assert c.graph is not None
    if c.mode == ExecMode.WEIGHT_STREAMING:
        assert c.stream is not None
        c.estimate = c.stream.estimate
    else:
        assert c.placement is not None
        c.estimate = estimate_pipelined(c.graph, c.costs, c.placement, c.wafer, c.input_cluster)
    e = c.estimate
    inp = (
        f", input {e.input_samples_per_sec:.1f}"
        if e.input_samples_per_sec is not None
        else ", input cluster not known"
    )
    return [
        f"estimate: {e.samples_per_sec:.1f} samples/s ({e.bound} bound), compute "
        f"{e.compute_samples_per_sec:.1f}, transmission {e.transmission_samples_per_sec:.1f}"
        f"{inp}, {pe_share(e.active_pes, e.total_pes)} of PEs active, "
        f"{e.compute_utilization:.0%} compute "
        "utilization"
    ]


def _verify_estimate(c: Compilation) -> None:
    e = c.estimate
    assert e is not None
    if not e.samples_per_sec > 0:
        raise PassVerifyError("estimate: the throughput is not positive")
    if c.mode == ExecMode.PIPELINED:
        lo = min(k.samples_per_sec for k in e.kernels)
        if not math.isclose(e.samples_per_sec, lo, rel_tol=1e-9):
            raise PassVerifyError("estimate: overall samples/s is not the slowest kernel's")
    if e.input_samples_per_sec is not None and e.samples_per_sec > e.input_samples_per_sec * (
        1 + 1e-9
    ):
        raise PassVerifyError("estimate: faster than the input cluster feeds it")


def _plan(c: Compilation) -> list[str]:
    g, e = c.graph, c.estimate
    assert g is not None and e is not None
    est = {
        "samples_per_sec": e.samples_per_sec,
        "compute_samples_per_sec": e.compute_samples_per_sec,
        "transmission_samples_per_sec": e.transmission_samples_per_sec,
        "input_samples_per_sec": e.input_samples_per_sec,
        "wafer_samples_per_sec": e.wafer_samples_per_sec,
        "active_pes": e.active_pes,
        "total_pes": e.total_pes,
        "compute_utilization": e.compute_utilization,
        "bound": e.bound,
        "ports_used": e.ports_used,
        "io_samples_per_sec": e.io_samples_per_sec,
        "num_params": g.num_params,
    }
    kernels, layers = _kernel_rows(c), _layer_rows(c)
    replicas, micro, micro_size, per_system = 1, 1, g.batch_size, g.batch_size
    if c.placement is not None:
        replicas = c.placement.replicas
        micro_size = per_system = math.ceil(g.batch_size / replicas)
    if c.stream is not None:
        s = c.stream
        micro, micro_size, per_system = s.micro_batches, s.micro_batch_size, s.batch_per_system
    micro, micro_size, per_system = _step_batches(c, micro, micro_size, per_system)
    c.plan = Plan(
        mode=c.mode.value,
        model=c.model_name,
        checksum=c.checksum,
        target=c.target,
        batch_size=g.batch_size,
        dtype=g.dtype,
        estimate=est,
        kernels=kernels,
        layers=layers,
        replicas=replicas,
        num_csx=c.num_csx,
        blocks=list(g.blocks),
        batch_per_system=per_system,
        micro_batch_size=micro_size,
        micro_batches=micro,
        input=as_dict(c.input_cluster),
    )
    return [
        f"plan: {len(kernels) or len(layers)} entries, blocks "
        f"{', '.join(c.plan.blocks_in_order()[:6])}{' ...' if len(g.blocks) > 6 else ''}",
        c.plan.batch_line(c.target),
    ]


def _kernel_rows(c: Compilation) -> list[dict[str, Any]]:
    """The plan's row of each placed kernel (pipelined): where it sits and its estimate."""
    if c.placement is None:
        return []
    assert c.estimate is not None
    replicas = c.placement.replicas
    return [
        {
            "name": k.name,
            "block": k.block,
            "kernel": k.kernel,
            "pes": k.pes,
            "rect": k.rect.as_list(),
            "rects": [r.as_list() for r in k.rects],
            "replicas": replicas,
            "samples_per_sec": ke.samples_per_sec,
            "compute_samples_per_sec": ke.compute_samples_per_sec,
            "transmission_samples_per_sec": ke.transmission_samples_per_sec,
            "compute_utilization": ke.compute_utilization,
            "bound": ke.bound,
            "ports": ke.ports,
        }
        for k, ke in zip(c.placement.kernels, c.estimate.kernels, strict=True)
    ]


def _layer_rows(c: Compilation) -> list[dict[str, Any]]:
    """The plan's row of each streamed layer (weight streaming): its pass times and bytes."""
    if c.stream is None:
        return []
    return [
        {
            "name": lp.name,
            "block": lp.block,
            "fwd_seconds": lp.fwd_seconds,
            "bwd_seconds": lp.bwd_seconds,
            "bound": lp.bound,
            "fwd_bound": lp.fwd_bound,
            "bwd_bound": lp.bwd_bound,
            "fwd_compute_seconds": lp.fwd_compute,
            "fwd_stream_seconds": lp.fwd_stream,
            "bwd_compute_seconds": lp.bwd_compute,
            "bwd_stream_seconds": lp.bwd_stream,
            "fixed_seconds": lp.fixed,
            "overlap": lp.overlap,
            "weight_bytes": lp.weight_bytes,
            "grad_bytes": lp.grad_bytes,
            "kept_bytes": lp.kept_bytes,
            "offloaded_bytes": lp.offloaded_bytes,
            "retained": lp.retained,
        }
        for lp in c.stream.layers
    ]


def _step_batches(c: Compilation, micro: int, size: int, per_system: int) -> tuple[int, int, int]:
    """(micro-batches, micro-batch size, samples per system) of one STEP. With
    train_input.micro_batch_size m the graph was compiled at m a system, and a step of B samples
    on n systems runs B / (n m) of them (each of which the compiler may split again to fit)."""
    from cs2sim.runtime.params import grad_accumulation

    _, m, systems = grad_accumulation(c.params)
    if m is None:
        return micro, size, per_system
    batch = int((c.params.get("train_input") or {}).get("batch_size") or m * systems)
    per = batch // max(1, systems)
    return micro * max(1, per // m), size, per


def _verify_plan(c: Compilation) -> None:
    p, g = c.plan, c.graph
    assert p is not None and g is not None
    order = p.blocks_in_order()
    if [b for b in g.blocks if b in set(order)] != order:
        raise PassVerifyError("plan: blocks are not in the model's order")


@dataclass(frozen=True)
class Pass:
    """One named pass: its display stage, its function and its verifier."""

    name: str
    stage: str
    run: Callable[[Compilation], list[str]]
    verify: Callable[[Compilation], None]


PASSES: tuple[Pass, ...] = (
    Pass("extract", "Extracting the graph", _extract, _verify_graph),
    Pass("match", "Matching kernels", _match, _verify_match),
    Pass("place", "Placing kernels on the wafer", _place, _verify_place),
    Pass("estimate", "Estimating performance", _estimate, _verify_estimate),
    Pass("plan", "Writing the plan", _plan, _verify_plan),
)
VALIDATE_LAST = "match"  # --validate_only: "Compile model up to kernel matching."
