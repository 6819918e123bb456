"""The pipelined executor: every layer resident on the wafer, micro-batches flowing through it.

Cerebras' Pipelined Execution page, Figs. 14, 15 (docs/sources.md): the compiler maps each kernel to
a rectangle of the wafer; the whole network stays resident; samples stream in, activations flow from
layer to layer, gradients flow back, and "weights are updated on the WSE at the end of each backprop
step. The weights remain in the memory of the WSE region assigned by the compiler to that layer."
Losses stream to the user node; "at specified intervals, all the weights can be downloaded to the
chief node".

Here:
  * programming (`load`): the compiled plan's blocks become STAGES (consecutive model blocks
    grouped by the plan's `block` names). The model's weights are copied onto "the wafer" (a
    separate copy of the module tree), each stage gets its own optimizer over its own weights
    with its own optimizer state (the host optimizer's state, split by weight), and M micro-batch
    replicas of the stages are made (per-micro-batch activation memory; runtime/executors/
    replicas.py). The time this takes is the measured programming_time.
  * one global step: the batch is split into M micro-batches (2 to 4, `microbatches_for`) that
    flow through the S stages on a clock: at tick t stage s runs the forward of micro-batch
    t - s (fill: tick 0 only stage 0 works, the pipeline is full from tick S-1 while
    micro-batches remain, then it drains), then the backward flows the other way (stage S-1 first).
    Every (tick, stage, micro-batch, F|B) is recorded in `trace` and logged at DEBUG on
    `cs2sim.run.pipeline` (Cerebras' Pipelined Execution page's Fig. 15).
    The stages busy at one tick work on different micro-batches with different weights, as the
    wafer's regions do at once: they run side by side on the runtime's worker threads (each
    stage's kernels then single-threaded inside it), one meeting of the threads per tick instead
    of one per product. Two stages that share a weight (a tied embedding) never run at the same
    tick side by side, so every gradient array is added to in the same order as one after another.
    Each stage accumulates its micro-batches' gradients; the dynamic loss scaling check and the
    gradient clipping use the global norm over all stages (a global reduction, as the CS-2's
    loss scaling kernel does); then every stage updates its weights in place.
  * the plan's `replicas` (data parallel on one wafer: the compiler placed that many copies of
    the kernels when the model is small for the wafer) are run: the global batch is split into
    that many contiguous replica shards, each split into its micro-batches, and every replica's
    micro-batches flow through the stages at the same ticks (replica r's micro-batch m reaches
    stage s at tick m + s); each replica's gradients add into the stages' (the wafer reduces
    them). `split` is the last step's (replica, rows) per micro-batch; the trace numbers
    micro-batches across replicas in that order. Without a plan: one replica.
  * checkpoints download the weights and optimizer state from the stages (`snapshot`); at the
    end of a run the host model and optimizer receive the final wafer state.

Numerics: those of the CPU executor up to the order of float additions (replicas.py explains
the loss weighting and the dropout masks).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Collection, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cs2sim.runtime.artifacts.checkpoint import TrainState
from cs2sim.runtime.executors.base import (
    LoadReport,
    QueuedExecutor,
    StepOutput,
    StepResult,
    rng_states,
)
from cs2sim.runtime.executors.planview import PlanView
from cs2sim.runtime.executors.replicas import MaskBank, Shard, make_replica, shard_batch
from cs2sim.runtime.numerics.clipping import build_clipper
from cs2sim.runtime.numerics.optim import build_optimizer
from cs2sim.runtime.threads import run_chunks, workers
from cs2sim.system.errors import RuntimeFailure

if TYPE_CHECKING:  # runtime.data is imported by the runs that build a stream
    from cs2sim.runtime.data.stream import Stream

__all__ = ["PipelinedExecutor", "Stage", "stages_from_plan", "DEFAULT_MICROBATCHES"]

log = logging.getLogger("cs2sim.run")
trace_log = logging.getLogger("cs2sim.run.pipeline")

TRACE_EVENTS = 100_000
# Micro-batches in flight per global step. The CS-2 streams samples one by one; here a
# micro-batch is a host GEMM's worth of rows, since numpy's kernels lose efficiency below ~128
# rows (measured: fc_mnist at batch 256 costs 1.09x the host step with 2 micro-batches, 1.19x
# with 4). Unless the executor is given a number, a step uses as many micro-batches as the
# runtime has worker threads (a tick's stages then keep every thread busy, in the largest
# products), each of at least MIN_MICROBATCH_ROWS rows, between 2 (a pipeline still fills and
# drains) and DEFAULT_MICROBATCHES, never more than the batch has samples. Measured (host
# CPU time of one thread, the 4-layer GPT of bench/runtime_bench.py, 1024 rows): 4 micro-batches
# cost 1.12x the host step, 2 cost 1.03x; fc_mnist B256 1.18x and 1.06x.
DEFAULT_MICROBATCHES = 4
MIN_MICROBATCH_ROWS = 128
# A tick's stages run side by side only when each micro-batch has at least this many GEMM rows:
# below it a stage's work is mostly Python between small numpy calls, and two threads fighting
# for the GIL (each handover a ~0.15 ms wake-up on this kind of VM) lose more than they gain
# (measured: fc_mnist, 128-row micro-batches, 1.24x slower side by side; the 4-layer GPT,
# 256-row micro-batches, 1.10x faster; again once a chunk's kernels ran whole on its thread
# (runtime/threads.py workers()): fc_mnist's step 1.22x the host's with this bound, 1.27x-1.30x
# side by side).
MIN_SIDE_BY_SIDE_ROWS = 256
BALANCE = 1.15  # side by side when packing the tick's tasks on the threads wastes <= 15% (below)


@dataclass
class Stage:
    """One resident region of the wafer: consecutive blocks, their weights and optimizer."""

    index: int
    blocks: list[int]  # indices into model.blocks
    names: list[str]  # the blocks' names
    params: dict[str, np.ndarray] = field(default_factory=dict)  # weights it owns (wafer copy)
    grads: dict[str, np.ndarray] = field(default_factory=dict)
    optimizer: Any = None

    @property
    def nbytes(self) -> int:
        """Bytes of the weights resident in this stage."""
        return int(sum(p.nbytes for p in self.params.values()))


def _plan_blocks(plan: PlanView | None) -> list[str] | None:
    """The plan's block names in execution order, or None without a plan."""
    return None if plan is None else list(plan.blocks_in_order())


def stages_from_plan(block_names: list[str], plan: PlanView | None) -> list[Stage]:
    """Group the model's blocks into stages at the plan's block names (no plan: one per block).

    A block the plan places no kernel for (e.g. a reshape) joins the stage before it.
    """
    starts = _plan_blocks(plan)
    if starts is None:
        starts = list(block_names)
    unknown = [b for b in starts if b not in block_names]
    if unknown:
        raise RuntimeFailure(
            f"The compiled plan places block {unknown[0]!r}, which this model does not have; "
            "the compile is for another model or config: compile again (drop --cs_ip's cached "
            "cs_* directory or change model_dir)."
        )
    stages: list[Stage] = []
    first = set(starts)
    for i, name in enumerate(block_names):
        if not stages or name in first:
            stages.append(Stage(len(stages), [], []))
        stages[-1].blocks.append(i)
        stages[-1].names.append(name)
    return stages


class PipelinedExecutor(QueuedExecutor):
    """Train on the simulated CS-2 in pipelined mode."""

    device = "CSX"

    def __init__(
        self,
        plan: PlanView | None = None,
        *,
        microbatches: int | None = None,
        compile_time: float | None = None,
        est_samples_per_sec: float | None = None,
        active_pes: int | None = None,
        total_pes: int | None = None,
        pe_share: str | None = None,
        queue_depth: int = 16,
        **kw: Any,
    ) -> None:
        super().__init__(queue_depth, **kw)
        self.plan = plan
        self.fixed_microbatches = None if microbatches is None else max(1, int(microbatches))
        self.microbatches = self.fixed_microbatches or DEFAULT_MICROBATCHES  # replicas made
        self.compile_time, self.est_samples_per_sec = compile_time, est_samples_per_sec
        self.active_pes, self.total_pes = active_pes, total_pes
        self.pe_share = pe_share  # as the compiler writes it (runtime/compiler/report.py)
        self.data_replicas = _plan_replicas(plan)  # copies of the kernels on the wafer
        self.side_by_side_rows = MIN_SIDE_BY_SIDE_ROWS
        self._cost: dict[tuple[str, int], float] = {}  # (F|B, stage) -> seconds, run alone
        self.split: list[tuple[int, Shard]] = []  # the last step's (replica, rows) per mb
        self.stages: list[Stage] = []
        # the last TRACE_EVENTS (step, tick, stage, micro-batch, F|B) events, for tests and tools
        self.trace: deque[tuple[int, int, int, int, str]] = deque(maxlen=TRACE_EVENTS)
        self.keep_trace = True
        self._streamers_ready = False

    # -- programming ---------------------------------------------------------------------------
    def load(self, model: Any, optimizer: Any, scaler: Any, params: dict[str, Any]) -> LoadReport:
        """Program the fabric: stages, their weights and optimizer state, micro-batch replicas."""
        super().load(model, optimizer, scaler, params)
        self.clip = build_clipper(params.get("optimizer") or {})
        log.info(
            "Programming CS-2 fabric. This may take couple of minutes - please do not interrupt."
        )
        t0 = time.perf_counter()
        self.stages = stages_from_plan(list(model.block_names), self.plan)
        # the wafer's own copy of the weights (the host model keeps the user node's copy)
        self.wafer = make_replica(model, None, None, share_rng=False)
        wafer_params = self.wafer.parameters()
        wafer_grads = self.wafer.grads()
        host_state = optimizer.state_dict() if optimizer is not None else None  # None: eval
        owner: dict[int, int] = {}  # id(array) -> stage owning it (a tied weight: its first user)
        for st in self.stages:
            for b in st.blocks:
                for a in self.wafer.blocks[b].parameters().values():
                    owner.setdefault(id(a), st.index)
        half = str(model.policy.half)  # "float32" when mixed precision is off
        for st in self.stages:
            st.params = {n: a for n, a in wafer_params.items() if owner[id(a)] == st.index}
            st.grads = {n: wafer_grads[n] for n in st.params}
            if host_state is not None:
                st.optimizer = build_optimizer(params["optimizer"], st.params, half)
                st.optimizer.load_state_dict(_subset_state(host_state, st.params))
        # stages that must not run side by side: they read or add to the same weight array
        used = [
            {id(a) for b in st.blocks for a in self.wafer.blocks[b].parameters().values()}
            for st in self.stages
        ]
        self.conflicts = {
            (i, j)
            for i in range(len(used))
            for j in range(len(used))
            if i != j and used[i] & used[j]
        }
        self.bank = MaskBank()
        self.shards = [Shard() for _ in range(self.microbatches * self.data_replicas)]
        shared_p = {id(a): a for a in _all_arrays(self.wafer, "p")}
        shared_g = {
            id(a): g
            for a, g in zip(_all_arrays(self.wafer, "p"), _all_arrays(self.wafer, "g"), strict=True)
        }
        scratch: dict[
            str, dict[str, Any]
        ] = {}  # micro-batches run one after another: share scratch
        self.replicas = [
            make_replica(self.wafer, shared_p, shared_g, bank=self.bank, shard=s, scratch=scratch)
            for s in self.shards
        ]
        for r in self.replicas:
            r.train()
        programming = time.perf_counter() - t0
        n_bytes = sum(st.nbytes for st in self.stages)
        log.info("Fabric programmed")
        log.debug(
            f"{len(self.stages)} stages, {n_bytes} bytes of weights loaded in {programming:.3f} s"
        )
        if self.pe_share and self.total_pes:
            log.info(
                f"Coordinator fully up. Waiting for Streaming (using {self.pe_share} out of "
                f"{self.total_pes} cores on the fabric)"
            )
        return LoadReport(self.compile_time, programming, self.est_samples_per_sec)

    def run(
        self, stream: Stream, start_step: int, stop_step: int, checkpoint_steps: Collection[int]
    ) -> Generator[StepOutput, None, None]:
        """The base run; afterwards the host model and optimizer get the wafer's final state."""
        # A launcher's input workers (runtime/job/streamers.py) announce themselves when the
        # stream starts; this process's own input pipeline is announced here as 1 streamer.
        self._streamers_ready = hasattr(stream, "hub")
        if not self._streamers_ready:
            log.info("Waiting for 1 streamer(s) to prime the data pipeline")
        try:
            yield from super().run(stream, start_step, stop_step, checkpoint_steps)
        finally:
            self.download_to_host()

    def summary_arrays(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The wafer's weights and gradients (the host model is updated at the end)."""
        return self.wafer.parameters(), self.wafer.grads()

    # -- one global step -------------------------------------------------------------------------
    def begin_gradients(self) -> None:
        """Zero every stage's gradients (a step's micro-batches add into them)."""
        if not self._streamers_ready:
            self._streamers_ready = True
            log.info("Streamers are ready")
        self.wafer.zero_grad()

    def apply_update(self, step: int, loss: float, scale: float) -> StepResult:
        """The global checks (norm over all stages), then each stage's update in place."""
        grads = self.wafer.grads()
        isfinite, norm = self.scaler.unscale_(grads)
        if isfinite:
            if self.clip.enabled:
                self.clip(grads, norm)
            for st in self.stages:
                st.optimizer.step(st.grads, step - 1)
        self.scaler.update(bool(isfinite))
        return StepResult(
            loss, float(self.optimizer.lr_at(step - 1)), scale, bool(isfinite), float(norm)
        )

    def compute_gradients(self, batch: dict[str, np.ndarray], step: int, scale: float) -> float:
        """The pipeline's forward and backward of one (micro-)batch: adds the gradients of
        scale * loss to the stages' (`self.wafer.grads()`); returns the batch's loss."""
        parts, shards, of = self._split(batch)
        M, S = len(parts), len(self.stages)
        side_by_side = self._rows(batch) // M >= self.side_by_side_rows
        for holder, s in zip(self.shards, shards, strict=False):
            holder.lo, holder.hi, holder.total = s.lo, s.hi, s.total
        self.bank.reset(shards[0].total)
        # micro-batch j of the flat list is number `pos[j]` of its replica: it reaches stage s
        # at tick pos[j] + s, at the same tick as the other replicas' micro-batch pos[j]
        pos = [j - of.index(of[j]) for j in range(M)]
        ticks = max(pos) + 1 + S - 1
        acts: list[Any] = [self.replicas[m].inputs(parts[m])[0] for m in range(M)]
        labels = [self.replicas[m].inputs(parts[m])[1] for m in range(M)]
        losses = [0.0] * M
        last = len(self.wafer.blocks) - 1
        debug = trace_log.isEnabledFor(logging.DEBUG)
        # forward: at tick t stage s works on (each replica's) micro-batch t - s
        for t in range(ticks):
            tasks = []
            for st, m in (
                (st, m) for m in range(M) for st in self.stages if pos[m] == t - st.index
            ):

                def fwd(st: Stage = st, m: int = m) -> None:
                    blocks = self.replicas[m].blocks
                    x = acts[m]
                    for b in st.blocks:
                        if b == last:
                            losses[m] = float(blocks[b].forward(x, labels[m]))
                        else:
                            x = blocks[b].forward(x)
                    acts[m] = x

                tasks.append((st.index, m, fwd))
            self._run_tick(tasks, side_by_side, "F")
            self._record(step, t, [(s, m) for s, m, _ in tasks], "F", debug)
        # backward: stage S-1 first; the loss head is seeded with this shard's share of the mean
        for t in range(ticks):
            tasks = []
            for st, m in (
                (st, m)
                for m in range(M)
                for st in reversed(self.stages)
                if pos[m] == t - (S - 1 - st.index)
            ):

                def bwd(st: Stage = st, m: int = m) -> None:
                    blocks = self.replicas[m].blocks
                    d = acts[m]
                    for b in reversed(st.blocks):
                        d = (
                            blocks[b].backward(scale * shards[m].weight)
                            if b == last
                            else blocks[b].backward(d)
                        )
                    acts[m] = d

                tasks.append((st.index, m, bwd))
            self._run_tick(tasks, side_by_side, "B")
            self._record(step, t, [(s, m) for s, m, _ in tasks], "B", debug)
        return float(np.float32(sum(lo * s.weight for lo, s in zip(losses, shards, strict=True))))

    def _run_tick(self, tasks: list[tuple[int, int, Any]], side_by_side: bool, phase: str) -> None:
        """Run one tick's (stage, micro-batch, work) tasks: side by side over the worker threads
        when allowed (large enough micro-batches), there are several, no two share a weight and
        they keep the threads equally busy (`_balanced`); else one after another in order (each
        task then splits its kernels over the threads, and its time is measured)."""
        busy = [s for s, _, _ in tasks]  # a stage twice (two replicas): one after the other
        if (
            len(tasks) < 2
            or workers() < 2
            or not side_by_side
            or len(set(busy)) < len(busy)
            or any((a, b) in self.conflicts for a in busy for b in busy)
            or not self._balanced([(phase, s) for s in busy])
        ):
            for s, _, work in tasks:
                t0 = time.perf_counter()
                work()
                took = time.perf_counter() - t0  # the least seen: other load only adds to it
                self._cost[(phase, s)] = min(took, self._cost.get((phase, s), took))
            return
        run_chunks(lambda i: tasks[i][2](), len(tasks))

    def _balanced(self, keys: list[tuple[str, int]]) -> bool:
        """Whether these stage tasks, one per thread, keep the threads about equally busy.

        A task run alone splits its kernels over the W threads and takes c (measured, `_cost`);
        side by side it runs on one thread, taking about W x c. Greedy packing of the tasks onto
        W threads then ends after W x (the fullest thread's sum of c), against sum of c one after
        another: side by side only when that is at most BALANCE x as long (it saves the threads'
        meetings inside every product, which the estimate leaves out). A stage not measured yet
        runs alone first. Measured (the 4-layer GPT, two threads): a decoder layer
        beside the embedding or the loss head left one thread idle for most of the tick."""
        got = [self._cost.get(k) for k in keys]
        costs = [c for c in got if c is not None]
        if len(costs) < len(got):
            return False
        W = workers()
        load = [0.0] * W
        for c in sorted(costs, reverse=True):
            load[load.index(min(load))] += c
        return bool(W * max(load) <= BALANCE * sum(costs))

    def _split(
        self, batch: dict[str, np.ndarray]
    ) -> tuple[list[dict[str, np.ndarray]], list[Shard], list[int]]:
        """The step's micro-batches over the replicas: (parts, their rows in the global batch,
        the replica of each), replica by replica."""
        replica_parts, replica_rows = shard_batch(batch, self.data_replicas)
        parts: list[dict[str, np.ndarray]] = []
        shards: list[Shard] = []
        of: list[int] = []
        for r, (part, rows) in enumerate(zip(replica_parts, replica_rows, strict=True)):
            sub, sub_rows = shard_batch(part, self.microbatches_for(part))
            parts += sub
            shards += [Shard(rows.lo + s.lo, rows.lo + s.hi, rows.total) for s in sub_rows]
            of += [r] * len(sub)
        self.split = list(zip(of, shards, strict=True))
        return parts, shards, of

    def microbatches_for(self, batch: dict[str, np.ndarray]) -> int:
        """How many micro-batches this batch is split into (see MIN_MICROBATCH_ROWS)."""
        if self.fixed_microbatches is not None:
            return self.fixed_microbatches
        B = len(next(iter(batch.values())))
        m = max(2, min(DEFAULT_MICROBATCHES, self._rows(batch) // MIN_MICROBATCH_ROWS, workers()))
        return min(m, B)

    def _rows(self, batch: dict[str, np.ndarray]) -> int:
        """GEMM rows of the whole batch: samples times the positions of a token sequence (1 for
        a feature vector)."""
        x = self.wafer.inputs(batch)[0]
        if isinstance(x, dict):  # several inputs (BERT's ids and segments): the first is rows
            x = next(iter(x.values()))
        per = int(np.prod(x.shape[1:] if x.dtype.kind in "iu" else x.shape[1:-1], dtype=np.int64))
        return len(x) * max(per, 1)

    def _record(
        self, step: int, tick: int, busy: list[tuple[int, int]], phase: str, debug: bool
    ) -> None:
        if self.keep_trace:
            self.trace.extend((step, tick, s, m, phase) for s, m in busy)
        if debug:
            cells = " ".join(f"s{s}:mb{m}" for s, m in sorted(busy))
            trace_log.debug(
                f"step {step} {phase} tick {tick}: {len(busy)}/{len(self.stages)} "
                f"stages busy [{cells}]"
            )

    # -- checkpoints ----------------------------------------------------------------------------
    def snapshot(self, step: int, stream: Stream) -> TrainState:
        """Download the weights and optimizer state from the stages."""
        return TrainState(
            step=step,
            model={k: v.copy() for k, v in self.wafer.parameters().items()},
            optimizer=self._optimizer_state(),
            loss_scaler=dict(self.scaler.state_dict()),
            data=stream.state_dict() if stream is not None else None,
            rng=rng_states(self.wafer),
        )

    def _optimizer_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for st in self.stages:
            state.update(st.optimizer.state_dict())
        state["num_updates"] = self.stages[0].optimizer.num_updates if self.stages else 0
        return state

    def download_to_host(self) -> None:
        """Copy the wafer's weights, optimizer state and dropout generator into the host objects."""
        if not self.stages or self.optimizer is None:
            return
        host = self.model.parameters()
        for n, a in self.wafer.parameters().items():
            np.copyto(host[n], a)
        self.optimizer.load_state_dict(self._optimizer_state())
        if hasattr(self.model, "set_rng_state"):
            self.model.set_rng_state(self.wafer.rng_state())


def _plan_replicas(plan: PlanView | None) -> int:
    """The plan's data-parallel replicas; 1 without a plan."""
    return 1 if plan is None else max(1, int(plan.replicas or 1))


def _subset_state(state: dict[str, Any], names: Collection[str]) -> dict[str, Any]:
    """The entries of an optimizer state_dict for the weights `names` (+ num_updates)."""
    keep = set(names)
    return {k: v for k, v in state.items() if k == "num_updates" or k.split("/", 1)[1] in keep}


def _all_arrays(model: Any, which: str) -> list[np.ndarray]:
    """Every parameter (which="p") or gradient ("g") array of every module, tied ones once."""
    out, seen = [], set()
    for _, m in model.named_modules():
        for k, v in m.p.items():
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v if which == "p" else m.g[k])
    return out
