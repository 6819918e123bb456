"""A benchmark worker: one process holding one side's steps (ours or PyTorch), run on command.

    python bench/bench_worker.py ours|torch [--threads N]

The driver (bench/runtime_bench.py, bench/contention_bench.py) keeps both sides alive and has
them take turns: it writes one JSON command per line, the worker runs it and answers one JSON
line. Between commands the worker blocks on its stdin (sleeping, not spinning), so the side not
being measured leaves the cores to the side that is.

Commands:
  {"op": "run", "case": key, "steps": n, "executor": name|null}
        -> {"sec": [seconds of each step], "cpu": process CPU seconds / step}
  {"op": "gemm", "n": 1024, "reps": 6} -> {"gflops": best float32 n x n x n matmul rate}
        (ours: runtime.nn.parallel.gemm, the path our layers use; PyTorch: torch.mm)
  {"op": "profile", "case": key, "steps": n} -> {category: seconds per step}   (ours only)
  {"op": "loop", "steps": n} -> {"rate": fc_mnist GlobalRate through the Trainer} (ours only)
  {"op": "info"} -> versions and thread counts;  {"op": "quit"}
Cases are built on first use and kept (weights keep training across windows, as a run does).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("side", choices=("ours", "torch"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--blas-threading",
        action="store_true",
        help="ours as before runtime/threads.py: OpenBLAS's own threads, no wait "
        "settings (give the worker the user's environment)",
    )
    args = ap.parse_args()
    if args.side == "ours":
        os.environ["CS2SIM_BLAS_THREADS"] = str(args.threads)
        import cs2sim.runtime  # noqa: F401 - first: the BLAS wait settings, before numpy loads

        if args.blas_threading:
            from cs2sim.runtime import threads

            threads.configure()
            threads.use_blas_threading(args.threads)
    # (the PyTorch side runs in the environment the driver gives it: the user's, by default)
    import numpy as np

    from bench.cases import CASES, EXECUTOR_FACTORIES

    torch: Any = None
    if args.side == "torch":
        import torch

        torch.set_num_threads(args.threads)
    built: dict[str, Any] = {}
    mats: dict[int, tuple] = {}

    def step_of(key: str, executor: str | None) -> Any:
        name = f"{key}@{executor}" if executor else key
        if name not in built:
            case = CASES[key]
            if args.side == "torch":
                built[name] = (case.torch(), None, None)
            elif executor:
                built[name] = EXECUTOR_FACTORIES[executor](case)
            else:
                built[name] = case.ours()
        return built[name]

    def gemm(n: int, reps: int) -> float:
        if n not in mats:
            r = np.random.default_rng(0)
            a = r.standard_normal((n, n), dtype=np.float32)
            b = r.standard_normal((n, n), dtype=np.float32)
            if torch is not None:
                a, b = torch.from_numpy(a), torch.from_numpy(b)
            mats[n] = (a, b, a @ b)
        a, b, c = mats[n]
        if torch is not None:
            mm = lambda: torch.mm(a, b, out=c)  # noqa: E731
        else:  # our GEMM path: BLAS one thread per call, blocks over the runtime's workers
            from cs2sim.runtime import threads
            from cs2sim.runtime.nn.parallel import gemm as pgemm

            threads.configure()
            mm = lambda: pgemm(a, b, c)  # noqa: E731
        mm()
        best = 0.0
        for _ in range(reps):
            t0 = time.perf_counter()
            mm()
            best = max(best, 2 * n**3 / (time.perf_counter() - t0) / 1e9)
        return best

    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "quit":
            break
        if op == "info":
            if torch is not None:
                out: Any = {
                    "side": "torch",
                    "version": torch.__version__,
                    "threads": torch.get_num_threads(),
                }
            else:
                from cs2sim.runtime import threads

                s = threads.configure()
                desc = (
                    s.describe()
                    if not args.blas_threading
                    else (
                        f"OpenBLAS's own {args.threads} threads, spin settings: "
                        + (
                            ", ".join(
                                f"{k}={os.environ[k]}" for k in threads.SPIN_ENV if k in os.environ
                            )
                            or "library defaults"
                        )
                    )
                )
                out = {
                    "side": "ours",
                    "version": f"numpy {np.__version__}",
                    "threads": s.workers,
                    "settings": desc,
                }
        elif op == "gemm":
            out = {"gflops": gemm(int(cmd.get("n", 1024)), int(cmd.get("reps", 6)))}
        elif op == "run":
            step = step_of(cmd["case"], cmd.get("executor"))[0]
            secs = []
            c0 = time.process_time()
            for _ in range(int(cmd["steps"])):
                t0 = time.perf_counter()
                step()
                secs.append(time.perf_counter() - t0)
            out = {"sec": secs, "cpu": (time.process_time() - c0) / max(1, len(secs))}
        elif op == "profile":
            from bench.layer_profile import profile_step

            step, model, opt = step_of(cmd["case"], None)
            out = profile_step(model, opt, step, int(cmd.get("steps", 3)))
        elif op == "flops":
            case = CASES[cmd["case"]]
            model = step_of(cmd["case"], None)[1]
            per = (
                model.flops_per_sample(case.seq)
                if case.unit == "tokens"
                else model.flops_per_sample()
            )
            out = {"flops_per_step": per * case.batch}
        elif op == "loop":
            out = {"rate": loop_global_rate(int(cmd["steps"]))}
        else:
            out = {"error": f"unknown op {op!r}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


def loop_global_rate(steps: int) -> float:
    """GlobalRate of case "fc" trained by the Trainer on the digits for `steps` steps: what a
    run.py user sees, loop overheads included (input stream, producer thread, logging,
    summaries, the final checkpoint)."""
    import logging
    import tempfile

    from bench.cases import CASES
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision
    from cs2sim.runtime.params import validate_params
    from cs2sim.runtime.training.trainer import Trainer

    case = CASES["fc"]
    raw = {
        "train_input": {"batch_size": case.batch},
        "model": dict(case.params),
        "optimizer": dict(case.optimizer),
        "runconfig": {"max_steps": steps, "log_steps": max(1, steps // 4)},
    }
    params, _ = validate_params(raw, "fc_mnist")
    half, _ = resolve_precision(params)
    logging.getLogger("cs2sim").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as model_dir:
        return Trainer("fc_mnist", params, Path(model_dir), half=half).train().samples_per_sec


if __name__ == "__main__":
    sys.exit(main())
