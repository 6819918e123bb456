"""`compile_run`: run the PASSES for one model and mode, into a reusable compile directory.

1. extract the graph (pass 1) and hash what forces a recompile (cache.py);
2. a complete `cs_<sum>/` that reached the asked stage is reused ("Reusing existing compilation
   in ...") and nothing else runs;
3. otherwise the passes run in order (stopping after kernel matching for validate), each one
   verified, each one's lines in the compile log; the report, plan.json and wafer map are
   written into a temp directory that is renamed into place.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.compiler.cache import (
    COMPILER_VERSION,
    checksum,
    complete_stage,
    discard,
    publish,
    staging_dir,
)
from cs2sim.runtime.compiler.errors import KernelMatchError
from cs2sim.runtime.compiler.io import InputCluster
from cs2sim.runtime.compiler.kernels import REPORT_NAME
from cs2sim.runtime.compiler.passes import PASSES, VALIDATE_LAST, Compilation
from cs2sim.runtime.compiler.plan import PLAN_FILE, Plan
from cs2sim.runtime.compiler.report import REPORT_FILE, render_report
from cs2sim.runtime.compiler.timetrain import for_plan
from cs2sim.system.hardware import WSE2, WaferSpec
from cs2sim.system.state import ExecMode

__all__ = ["CompileResult", "compile_run", "compile_checksum", "LOG_FILE", "STOPS", "stages"]

LOG_FILE = "compile.log"
WAFER_MAP_FILE = "wafer_map.png"
STOPS = ("validate", "compile")
log = logging.getLogger("cs2sim.compiler")


@dataclass(frozen=True)
class CompileResult:
    """What a compile produced."""

    directory: Path
    checksum: str
    reused: bool
    compile_time: float
    mode: ExecMode
    stop_after: str
    est_samples_per_sec: float | None
    active_pes: int | None
    total_pes: int
    plan: Plan | None
    log_lines: tuple[str, ...] = ()


def stages(stop_after: str) -> list[str]:
    """The stage names a compile that stops after `stop_after` shows, in order."""
    out = []
    for p in PASSES:
        out.append(p.stage)
        if stop_after == "validate" and p.name == VALIDATE_LAST:
            break
    return out + ["Writing the compile directory"]


def _half(params: dict[str, Any]) -> str:
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision

    half, _ = resolve_precision(copy.deepcopy(params))
    return half


def _num_csx(params: dict[str, Any]) -> int:
    return int((params.get("runconfig") or {}).get("num_csx") or 1)


def _multireplica(params: dict[str, Any]) -> bool:
    """runconfig.multireplica (--multireplica), unless the model says it may not be copied."""
    allowed = (params.get("model") or {}).get("allow_multireplica", True)
    wanted = bool((params.get("runconfig") or {}).get("multireplica") or False)
    return wanted and allowed is not False


def _result(
    c: Compilation, directory: Path, reused: bool, t0: float, stop: str, plan: Plan | None
) -> CompileResult:
    est = plan.estimate if plan else None
    return CompileResult(
        directory=directory,
        checksum=c.checksum,
        reused=reused,
        compile_time=time.perf_counter() - t0,
        mode=c.mode,
        stop_after=stop,
        est_samples_per_sec=float(est["samples_per_sec"]) if est else None,
        active_pes=int(est["active_pes"]) if est else None,
        total_pes=c.wafer.pes,
        plan=plan,
        log_lines=tuple(c.log),
    )


def _reusable(c: Compilation, final: Path) -> tuple[Plan | None, str | None]:
    """(the plan of a complete compile directory, None), or (None, why it cannot be reused)."""
    assert c.graph is not None
    try:
        plan = Plan.load(final)
    except (OSError, ValueError, TypeError) as e:
        return None, f"its {PLAN_FILE} cannot be read ({e})"
    g = c.graph
    why = plan.problem(
        mode=c.mode.value,
        model=c.model_name,
        checksum=c.checksum,
        batch_size=g.batch_size,
        dtype=g.dtype,
        num_csx=c.num_csx,
        blocks=list(g.blocks),
        pes=c.wafer.pes,
    )
    return (None, f"its {PLAN_FILE} does not fit the model: {why}") if why else (plan, None)


def _load_cached(c: Compilation, wafer: WaferSpec, cached: Path, t0: float) -> CompileResult | None:
    """The result of loading `cached` (see compile_run), or None (warned) when it does not fit."""
    c.checksum = _checksum(c, wafer, None, any_target=True)
    why: str | None
    if cached.name != f"cs_{c.checksum}":
        why = f"it is not this model's compile (cs_{c.checksum})"
    elif complete_stage(cached) != "compile":
        why = "it is not a complete compile"
    else:
        plan, why = _reusable(c, cached)
        if why is None:
            c.log.append(f"Loaded the cached compile {cached}")
            return _result(c, cached, True, t0, "compile", plan)
    log.warning(f"The cached compile {cached} cannot be loaded: {why}; compiling again.")
    return None


def _notes(c: Compilation, seconds: float) -> list[str]:
    e, g = c.estimate, c.graph
    assert e is not None and g is not None
    lines = [
        f"cs2sim compile of {c.model_name} for {c.mode.value}"
        f"{' on ' + c.target if c.target else ''} ({c.wafer.name}, "
        f"{c.wafer.width} x {c.wafer.height} PEs), checksum {c.checksum}",
        f"{g.num_params:,} parameters, batch size "
        f"{(c.params.get('train_input') or {}).get('batch_size', g.batch_size)} (graph "
        f"compiled at {g.batch_size} samples a pass), {g.dtype}; passes ran in "
        f"{seconds:.3f} s (host measurement)",
        f"These are CS-2 estimates from the cost model (docs/cost-model.md), not "
        f"measurements; bound by {e.bound}.",
        f"Bound: {e.bound} ({BOUND_TEXT[e.bound]})",
    ]
    if e.input_samples_per_sec is not None and c.input_cluster is not None:
        ic = c.input_cluster
        cap = (
            f"the ports feeding the input kernel could carry {e.io_samples_per_sec:.1f}; "
            "kernels are sized to what feeds them"
            if e.io_samples_per_sec is not None
            else f"the wafer alone: {e.wafer_samples_per_sec:.1f}"
        )
        lines.append(
            f"Input Samples/s: {e.input_samples_per_sec:.1f} ({ic.workers} input "
            f"worker(s) x {ic.per_worker_samples_per_sec:.1f} samples/s each, "
            f"{ic.source}); {cap}"
        )
    else:
        lines.append(
            "Input Samples/s: not known (run cs_input_analyzer to measure the input "
            "workers; the estimate assumes they keep up)"
        )
    if c.placement is not None:
        p = c.placement
        lines.append(
            f"Ports used: {p.ports * p.replicas:g} of {c.wafer.ports} "
            f"(100 GbE, {c.wafer.port_payload_bytes_s / 1e9:.1f} GB/s each after "
            "framing) feed the input kernel(s)"
        )
        lines.append(
            f"Replicas: {p.replicas} (copies of the model, data parallel; "
            + (
                "runconfig.multireplica)"
                if c.multireplica
                else "set runconfig.multireplica: True to let the compiler add more)"
            )
        )
    plan = c.plan
    assert plan is not None
    micro = (c.params.get("train_input") or {}).get("micro_batch_size")
    lines.append(
        plan.batch_line(c.target)
        + (
            " (train_input.micro_batch_size: the executors sum the gradients of a "
            "step's micro-batches into one update)"
            if micro
            else ""
        )
    )
    if c.stream is not None:
        s = c.stream
        lines.append(
            f"Layer passes: {2 * len(s.layers) * plan.micro_batches} per step and CS-X "
            f"(forward and backward of {len(s.layers)} layers per micro-batch); "
            "each micro-batch streams every layer's weights in again; output layer "
            "weights retained from forward to backward."
        )
    ttt = for_plan(plan, c.params)
    lines.append(
        "Time to train: "
        + (
            ttt.line() + " (CS-2 estimate: docs/cost-model.md)"
            if ttt
            else "not known (runconfig.max_steps is not set)"
        )
    )
    return lines


BOUND_TEXT = {
    "compute": "the kernels' arithmetic",
    "fabric": "the fabric: links between PEs, or filling and draining the wafer per pass",
    "io": "the ports feeding the input kernel",
    "input": "the input workers deliver fewer samples than the wafer could take",
    "stream": "weights in from MemoryX and gradients out through SwarmX",
    "memory": "the activations do not fit: micro-batches stream the weights again",
}


def _with_report(e: KernelMatchError, model_dir: Path) -> KernelMatchError:
    """Write the kernel-matching report to model_dir; the error then names it."""
    report = e.report
    if not report:
        return e
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / REPORT_NAME
    atomic_write(path, report, within=model_dir)
    out = KernelMatchError(
        f"{str(e).rstrip('.')}; the kernel matching report is in {path.resolve()}."
    )
    out.report = report
    return out


def _checksum(
    c: Compilation,
    wafer: WaferSpec,
    input_cluster: InputCluster | None,
    *,
    any_target: bool = False,
) -> str:
    """The compile directory's checksum (cache.py: what forces a recompile), after the graph
    pass; `any_target`: as a compile for no named system (the appliance's compile job)."""
    assert c.graph is not None
    return checksum(
        {
            "compiler": COMPILER_VERSION,
            "graph": c.graph.fingerprint(),
            "mode": c.mode.value,
            "num_csx": c.num_csx,
            "target": None if any_target else c.target,
            "wafer": [
                wafer.name,
                wafer.width,
                wafer.height,
                wafer.sram_per_pe_bytes,
                wafer.reserved_per_pe_bytes,
                wafer.ports,
            ],
            "multireplica": c.multireplica,
            "input": input_cluster.fingerprint() if input_cluster else None,
        }
    )


def compile_checksum(
    model_name: str,
    params: dict[str, Any],
    *,
    mode: ExecMode,
    target: str | None = None,
    wafer: WaferSpec = WSE2,
) -> str:
    """The checksum `compile_run` would give these params, from the graph pass alone (what the
    appliance client looks up before it asks for a compile job)."""
    c = Compilation(
        model_name,
        params,
        _half(params),
        ExecMode(mode),
        target,
        _num_csx(params) if mode == ExecMode.WEIGHT_STREAMING else 1,
        wafer,
        None,
        multireplica=_multireplica(params),
    )
    PASSES[0].run(c)
    return _checksum(c, wafer, None)


def compile_run(
    model_name: str,
    params: dict[str, Any],
    model_dir: Path,
    *,
    mode: ExecMode,
    stop_after: str = "compile",
    target: str | None = None,
    on_stage: Callable[[str, int, int], None] | None = None,
    wafer: WaferSpec = WSE2,
    model: Any = None,
    draw_map: bool = True,
    input_cluster: InputCluster | None = None,
    cached: Path | None = None,
) -> CompileResult:
    """Compile `model_name` for `mode` into model_dir/cs_<checksum>/ (or reuse it).

    `cached`: a complete compile directory made for no named system (the appliance's compile
    job, which the execute job loads by its hash); used when its hash and plan fit these
    params, else ignored with a warning."""
    if stop_after not in STOPS:
        raise ValueError(f"stop_after must be one of {STOPS}, not {stop_after!r}")
    t0 = time.perf_counter()
    if stop_after == "validate":
        input_cluster = None  # validation stops before anything the input cluster bounds
    names = stages(stop_after)
    n = len(names)
    c = Compilation(
        model_name,
        params,
        _half(params),
        ExecMode(mode),
        target,
        _num_csx(params) if mode == ExecMode.WEIGHT_STREAMING else 1,
        wafer,
        model,
        input_cluster=input_cluster,
        multireplica=_multireplica(params),
    )

    def run(i: int) -> None:
        p = PASSES[i]
        if on_stage:
            on_stage(p.stage, i + 1, n)
        t = time.perf_counter()
        lines = p.run(c)
        p.verify(c)
        c.log.extend(f"[{p.name}] {line}" for line in lines)
        c.log.append(f"[{p.name}] done in {time.perf_counter() - t:.3f} s, verified")
        log.debug("%s: %s", p.name, "; ".join(lines))

    run(0)
    if cached is not None and stop_after == "compile":
        reused = _load_cached(c, wafer, Path(cached), t0)
        if reused is not None:
            if on_stage:
                on_stage("Reusing existing compilation", n, n)
            return reused
    c.checksum = _checksum(c, wafer, input_cluster)
    model_dir = Path(model_dir)
    final = model_dir / f"cs_{c.checksum}"
    reused = _reuse_existing(c, final, stop_after, t0)
    if reused is not None:
        if on_stage:
            on_stage("Reusing existing compilation", n, n)
        return reused
    for i in range(1, len(PASSES)):
        try:
            run(i)
        except KernelMatchError as e:
            raise _with_report(e, Path(model_dir)) from None
        if stop_after == "validate" and PASSES[i].name == VALIDATE_LAST:
            break
    if on_stage:
        on_stage(names[-1], n, n)
    _emit(c, model_dir, final, stop_after, t0, draw_map, wafer)
    return _result(c, final, False, t0, stop_after, c.plan)


def _reuse_existing(
    c: Compilation, final: Path, stop_after: str, t0: float
) -> CompileResult | None:
    """The compile already in `final` when it is complete for `stop_after` and its plan fits
    these params; None to compile (a damaged one is discarded, with a warning)."""
    done = complete_stage(final)
    if not (done == "compile" or (done == "validate" and stop_after == "validate")):
        return None
    plan, why = _reusable(c, final) if stop_after == "compile" else (None, None)
    if why is None:
        c.log.append(f"Reusing existing compilation in {final}")
        return _result(c, final, True, t0, stop_after, plan)
    log.warning(f"The compile directory {final} is marked complete but {why}; compiling again.")
    c.log.append(f"Recompiling: {final} was damaged ({why})")
    discard(final)
    return None


def _emit(
    c: Compilation,
    model_dir: Path,
    final: Path,
    stop_after: str,
    t0: float,
    draw_map: bool,
    wafer: WaferSpec,
) -> None:
    """Write the compile directory (plan, report, wafer map, or a validation's kernel
    matching; the log) under a staging name, then publish it as `final` in one rename."""
    tmp = staging_dir(model_dir, final.name)
    seconds = time.perf_counter() - t0
    if stop_after == "compile":
        assert c.plan is not None
        (tmp / PLAN_FILE).write_text(json.dumps(c.plan.to_json(), indent=2) + "\n")
        (tmp / REPORT_FILE).write_text(render_report(c.plan, _notes(c, seconds)))
        if draw_map:
            from cs2sim.runtime.compiler.wafermap import save_png

            save_png(c.plan, tmp / WAFER_MAP_FILE, wafer)
            c.log.append(f"[emit] wafer map written to {WAFER_MAP_FILE}")
    else:
        kernels = [{"op": m.op.name, "kind": m.op.kind, "kernel": m.kernel.name} for m in c.matches]
        (tmp / "kernel_matching.json").write_text(json.dumps(kernels, indent=1) + "\n")
    c.log.append(f"compile time {time.perf_counter() - t0:.3f} s (host measurement)")
    (tmp / LOG_FILE).write_text("\n".join(c.log) + "\n")
    publish(tmp, final, stop_after)
