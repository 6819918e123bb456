"""Overhead of the CS-2 executors over the host (CPU) executor, on this host.

    python bench/executor_bench.py [--rounds N] [--steps K] [--quick]

Two models (those of bench/runtime_bench.py): fc_mnist 784-500-300-10 (batch 256, Adam) and a
small gpt2 (4 layers, d=256, 4 heads, seq 128, batch 8, AdamW). For each, four executors train
the same model from the same seed on the same global batch:

    cpu        runtime/executors/cpu.py          the reference
    pipelined  runtime/executors/pipelined.py    4 micro-batches through one stage per block
    ws1        weight streaming, 1 CS-X           MemoryX + SwarmX + one system
    ws4        weight streaming, 4 CS-X           the batch split in 4 shards

Step time: the bare training step (executor.execute_step: forward, backward, update), measured
INTERLEAVED (round robin: K steps of each executor, then the next, for N rounds) so that the
load of a shared machine hits all of them alike. The targets are checked on the median CPU time
of the stepping thread (one BLAS thread: all of a step's work is in that thread), which the other
processes of a shared machine do not inflate; best and median wall times are shown too.
Targets: pipelined and ws1 within 1.15x of cpu, ws4 within 1.3x.

Peak memory: each executor in a fresh child process (load + 3 steps); the peak of numpy's
allocations (tracemalloc sees them) and the process's peak RSS. Target: ws4 within 1.5x of cpu.
Every figure is a host measurement. Results are also written to bench/results/executor.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results" / "executor.md"
EXECUTORS = ("cpu", "pipelined", "ws1", "ws4")
TARGETS = {"pipelined": 1.15, "ws1": 1.15, "ws4": 1.3}
MEMORY_TARGET = 1.5

MODELS: dict[str, dict[str, Any]] = {
    "fc_mnist": {
        "model": {"hidden_sizes": [500, 300], "dropout": 0.0, "activation_fn": "relu"},
        "optimizer": {"optimizer_type": "adam", "learning_rate": 0.001},
        "batch": 256,
    },
    "gpt2": {
        "model": {
            "vocab_size": 256,
            "hidden_size": 256,
            "num_hidden_layers": 4,
            "num_heads": 4,
            "filter_size": 1024,
            "max_position_embeddings": 128,
            "dropout_rate": 0.0,
            "attention_dropout_rate": 0.0,
            "share_embedding_weights": True,
            "nonlinearity": "gelu",
        },
        "optimizer": {"optimizer_type": "adamw", "learning_rate": 0.001, "weight_decay_rate": 0.01},
        "batch": 8,
        "seq": 128,
    },
}


def _parts(model_name: str) -> tuple[Any, Any, Any, dict, dict]:
    """(model, optimizer, scaler, batch, params) built the way the trainer builds them."""
    import numpy as np

    from cs2sim.runtime import registry
    from cs2sim.runtime.numerics.loss_scale import build_loss_scaler
    from cs2sim.runtime.numerics.optim import build_optimizer
    from cs2sim.runtime.numerics.precision import Policy

    spec = MODELS[model_name]
    model = registry.get(model_name)(dict(spec["model"]), Policy("float32"), 1)
    opt = build_optimizer(spec["optimizer"], model.parameters())
    scaler = build_loss_scaler(spec["optimizer"], "float32")
    rng = np.random.default_rng(0)
    B = spec["batch"]
    if model_name == "fc_mnist":
        batch = {
            "x": rng.random((B, 784), dtype=np.float32),
            "y": rng.integers(0, 10, B).astype(np.int32),
        }
    else:
        T, V = spec["seq"], spec["model"]["vocab_size"]
        batch = {
            "input_ids": rng.integers(0, V, (B, T)).astype(np.int32),
            "labels": rng.integers(0, V, (B, T)).astype(np.int32),
        }
        batch = {model.input_key: batch["input_ids"], model.label_key: batch["labels"]}
    params = {"optimizer": spec["optimizer"]}
    return model, opt, scaler, batch, params


def _executor(name: str) -> Any:
    from cs2sim.runtime.executors.cpu import CpuExecutor
    from cs2sim.runtime.executors.pipelined import PipelinedExecutor
    from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor

    return {
        "cpu": CpuExecutor,
        "pipelined": PipelinedExecutor,
        "ws1": lambda: WeightStreamingExecutor(1),
        "ws4": lambda: WeightStreamingExecutor(4),
    }[name]()


def step_times(model_name: str, rounds: int, steps: int) -> dict[str, tuple[float, float, float]]:
    """Seconds per step of each executor, interleaved round robin: (median CPU time of this
    thread, best wall time, median wall time). With one BLAS thread every step runs in this
    thread, so its CPU time is the step's work without the time other processes took the core:
    the figure the targets are checked on (wall times are shown too). The runtime's own worker
    threads are set to one here, for the same reason: with more, part of each step's work would
    run (and be counted) on the helpers (runtime/threads.py)."""
    from cs2sim.runtime.threads import set_workers

    set_workers(1)
    runs: dict[str, tuple[Any, dict]] = {}
    for name in EXECUTORS:
        model, opt, scaler, batch, params = _parts(model_name)
        ex = _executor(name)
        ex.load(model, opt, scaler, params)
        if hasattr(ex, "keep_trace"):
            ex.keep_trace = False
        model.train()
        runs[name] = (ex, batch)
    step = {name: 1 for name in EXECUTORS}
    for name, (ex, batch) in runs.items():  # warm-up: buffers allocated, pages touched
        for _ in range(2):
            ex.execute_step(batch, step[name])
            step[name] += 1
    wall: dict[str, list[float]] = {name: [] for name in EXECUTORS}
    cpu: dict[str, list[float]] = {name: [] for name in EXECUTORS}
    for _ in range(rounds):
        for name, (ex, batch) in runs.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(steps):
                ex.execute_step(batch, step[name])
                step[name] += 1
            cpu[name].append((time.thread_time() - c0) / steps)
            wall[name].append((time.perf_counter() - t0) / steps)
    return {
        name: (statistics.median(cpu[name]), min(wall[name]), statistics.median(wall[name]))
        for name in EXECUTORS
    }


def _memory_child(model_name: str, name: str) -> None:
    """In a fresh process: load + 3 steps; print peak numpy bytes and peak RSS as JSON."""
    import resource
    import tracemalloc

    tracemalloc.start()
    model, opt, scaler, batch, params = _parts(model_name)
    ex = _executor(name)
    ex.load(model, opt, scaler, params)
    model.train()
    for s in range(1, 4):
        ex.execute_step(batch, s)
    _, peak = tracemalloc.get_traced_memory()
    rss = 0
    try:  # VmHWM: this process's own peak (ru_maxrss would include the parent's, kept over exec)
        with open("/proc/self/status") as f:
            rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"traced_peak": peak, "rss_peak": rss}))


def peak_memory(model_name: str) -> dict[str, dict[str, int]]:
    out = {}
    for name in EXECUTORS:
        r = subprocess.run(
            [sys.executable, __file__, "--memory-child", model_name, name],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
            env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1"),
        )
        out[name] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 2 steps")
    ap.add_argument(
        "--memory-child", nargs=2, metavar=("MODEL", "EXECUTOR"), help=argparse.SUPPRESS
    )
    args = ap.parse_args()
    import numpy  # noqa: F401 - BLAS must be loaded before threadpoolctl can limit it

    try:
        from threadpoolctl import threadpool_info, threadpool_limits

        threadpool_limits(1)  # one BLAS thread: a shared machine's spinning threads cost ~10x
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    except ImportError:
        pass
    if args.memory_child:
        _memory_child(*args.memory_child)
        return 0
    rounds, steps = (3, 2) if args.quick else (args.rounds, args.steps)
    lines = [
        "# Executor overhead (host measurements)",
        "",
        f"python bench/executor_bench.py --rounds {rounds} --steps {steps}; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}, one BLAS thread",
        "",
    ]
    ok = True
    for model_name in MODELS:
        t = step_times(model_name, rounds, steps)
        mem = peak_memory(model_name)
        lines += [
            f"## {model_name}",
            "",
            "| executor | CPU ms/step | x cpu | target | wall ms best / median | x cpu "
            "(best wall) | numpy peak MB | x cpu | RSS peak MB |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name in EXECUTORS:
            ratio = t[name][0] / t["cpu"][0]
            wratio = t[name][1] / t["cpu"][1]
            mratio = mem[name]["traced_peak"] / mem["cpu"]["traced_peak"]
            target = TARGETS.get(name)
            good = target is None or ratio <= target
            if name == "ws4":
                good = good and mratio <= MEMORY_TARGET
            ok = ok and good
            lines.append(
                f"| {name} | {t[name][0] * 1e3:.2f} | {ratio:.3f} | "
                f"{'<= ' + str(target) if target else '-'}"
                f"{' + mem <= 1.5' if name == 'ws4' else ''} {'ok' if good else 'MISSED'} | "
                f"{t[name][1] * 1e3:.2f} / {t[name][2] * 1e3:.2f} | {wratio:.3f} | "
                f"{mem[name]['traced_peak'] / 2**20:.1f} | {mratio:.3f} | "
                f"{mem[name]['rss_peak'] / 2**20:.1f} |"
            )
        lines.append("")
    text = "\n".join(lines)
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(RESULTS)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
