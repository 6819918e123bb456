"""cszoo benchmarks: the front end's cost and Hugging Face conversion.

1. To the first step on the host: `cszoo fit` of a converted config (`cszoo config
   convert_legacy`, device CPU) against `python run.py` of the legacy file, gpt2 params_tiny.yaml
   (one step, log_steps 1), interleaved rounds, each from the moment the process is started to
   its first `| Train Device=` line, a fresh model_dir every round.
2. The same on the Wafer-Scale Cluster: `cszoo fit` (device CSX) against `python run.py CSX`,
   fc_mnist params_small.yaml, one step, the compile cached (as appliance_bench.py does).
3. Converting a 124M-parameter GPT-2 (GPT-2 small's shapes: 50257 x 768, 12 layers, random
   weights) from Hugging Face to cs2sim and back, each the whole `cszoo checkpoint convert`
   process.

All figures are host measurements on this machine. Usage: python bench/cszoo_bench.py
[--rounds N] [--skip-csx]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

BIN = Path(sys.executable).parent
RESULTS = Path(__file__).parent / "results" / "cszoo.md"

sys.path.insert(0, str(Path(__file__).parent))  # run as a script or imported: the bench folder
from appliance_bench import _env, _to_first_step  # noqa: E402 (the same start and clock)


def _converted(model: Path, config: str, device: str, env: dict[str, str]) -> str:
    subprocess.run(
        [str(BIN / "cszoo"), "config", "convert_legacy", f"configs/{config}", "-o", "zoo"],
        cwd=model, env=env, check=True, capture_output=True,
    )  # fmt: skip
    path = model / "zoo" / config.replace(".yaml", "_v2.yaml")
    raw = yaml.safe_load(path.read_text())
    raw["trainer"]["init"]["device"] = device
    raw["trainer"]["init"]["loop"]["max_steps"] = 1
    raw["trainer"]["init"]["logging"] = {"log_steps": 1}
    raw["trainer"]["fit"].pop("val_dataloader", None)  # train only, as run.py --mode train
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path.relative_to(model))


def first_step_host(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    from cs2sim.runtime.modelzoo import __file__ as zoo

    env = _env(root / "home-host")
    model = root / "gpt2"
    shutil.copytree(Path(zoo).parent / "gpt2", model)
    legacy = yaml.safe_load((model / "configs" / "params_tiny.yaml").read_text())
    legacy["runconfig"] |= {"log_steps": 1, "max_steps": 1}
    (model / "configs" / "params_tiny.yaml").write_text(yaml.safe_dump(legacy))
    conv = _converted(model, "params_tiny.yaml", "CPU", env)
    run_py = [sys.executable, "run.py", "-p", "configs/params_tiny.yaml", "-m", "train"]
    cszoo = [str(BIN / "cszoo"), "fit", conv]
    _to_first_step([*run_py, "-o", "warm-a"], model, env)  # page caches, the stand-in data
    _to_first_step([*cszoo, "-o", "warm-b"], model, env)
    a, b = [], []
    for i in range(rounds):
        a.append(_to_first_step([*run_py, "-o", f"a-{i}"], model, env))
        b.append(_to_first_step([*cszoo, "-o", f"b-{i}"], model, env))
    return a, b


def first_step_csx(root: Path, rounds: int) -> tuple[list[float], list[float]]:
    from cs2sim.runtime.modelzoo import __file__ as zoo

    env = _env(root / "home-csx")
    model = root / "fc_mnist"
    shutil.copytree(Path(zoo).parent / "fc_mnist", model)
    legacy = yaml.safe_load((model / "configs" / "params_small.yaml").read_text())
    legacy["runconfig"] |= {"log_steps": 1}
    (model / "configs" / "params_small.yaml").write_text(yaml.safe_dump(legacy))
    conv = _converted(model, "params_small.yaml", "CSX", env)
    compiles = ["--compile_dir", str(root / "compiles")]
    raw = yaml.safe_load((model / conv).read_text())
    raw["trainer"]["init"]["backend"] = {"compile_dir": str(root / "compiles")}  # as run.py's
    (model / conv).write_text(yaml.safe_dump(raw, sort_keys=False))
    run_py = [sys.executable, "run.py", "CSX", "-p", "configs/params_small.yaml", "--mode", "train",
              "--max_steps", "1", *compiles]  # fmt: skip
    cszoo = [str(BIN / "cszoo"), "fit", conv]
    try:
        _to_first_step([*run_py, "-o", "warm-a"], model, env)  # the server, the compile
        _to_first_step([*cszoo, "-o", "warm-b"], model, env)
        a, b = [], []
        for i in range(rounds):
            a.append(_to_first_step([*run_py, "-o", f"a-{i}"], model, env))
            b.append(_to_first_step([*cszoo, "-o", f"b-{i}"], model, env))
    finally:
        subprocess.run([sys.executable, "-m", "cs2sim.scripts.cluster_server", "stop"], env=env,
                       capture_output=True)  # fmt: skip
    return a, b


def conversion(root: Path) -> tuple[float, float, int]:
    """Seconds hf -> cs and cs -> hf of GPT-2 small's shapes, and its parameter count."""
    from safetensors.numpy import save_file

    V, P, C, L = 50257, 1024, 768, 12
    rng = np.random.default_rng(0)
    t = {"wte.weight": (V, C), "wpe.weight": (P, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(L):
        h = f"h.{i}."
        t |= {h + "ln_1.weight": (C,), h + "ln_1.bias": (C,), h + "ln_2.weight": (C,),
              h + "ln_2.bias": (C,), h + "attn.c_attn.weight": (C, 3 * C),
              h + "attn.c_attn.bias": (3 * C,), h + "attn.c_proj.weight": (C, C),
              h + "attn.c_proj.bias": (C,), h + "mlp.c_fc.weight": (C, 4 * C),
              h + "mlp.c_fc.bias": (4 * C,), h + "mlp.c_proj.weight": (4 * C, C),
              h + "mlp.c_proj.bias": (C,)}  # fmt: skip
    hf = root / "hf_gpt2"
    hf.mkdir()
    tensors = {k: rng.standard_normal(s, dtype=np.float32) * 0.02 for k, s in t.items()}
    save_file(tensors, str(hf / "model.safetensors"))
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": V,
              "n_positions": P, "n_embd": C, "n_layer": L, "n_head": 12, "n_inner": None,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}  # fmt: skip
    (hf / "config.json").write_text(json.dumps(config))
    n = sum(a.size for a in tensors.values())
    del tensors
    zoo = str(BIN / "cszoo")
    t0 = time.perf_counter()
    subprocess.run([zoo, "checkpoint", "convert", "--model", "gpt2", "--src-fmt", "hf",
                    "--tgt-fmt", "cs-2.4", "--config", str(hf / "config.json"), str(hf), "-o",
                    str(root / "cs")], check=True, capture_output=True)  # fmt: skip
    t_in = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([zoo, "checkpoint", "convert", "--model", "gpt2", "--src-fmt", "cs-2.4",
                    "--tgt-fmt", "hf", "--config", str(root / "cs" / "params_from_hf.yaml"),
                    str(root / "cs" / "model-ckpt-0.npz"), "-o", str(root / "back")],
                   check=True, capture_output=True)  # fmt: skip
    t_out = time.perf_counter() - t0
    return t_in, t_out, n


def _line(name: str, a: list[float], b: list[float]) -> str:
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    return (
        f"| {name} | {statistics.median(a):.2f} s | {statistics.median(b):.2f} s | "
        f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--skip-csx", action="store_true")
    args = p.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cszoo-bench-"))
    try:
        lines = [
            "# cszoo (bench/cszoo_bench.py)",
            "",
            "Host measurements on this machine; medians of interleaved rounds, the ratio's range "
            f"(load average at the start {os.getloadavg()[0]:.1f}).",
            "",
            "| to the first step | run.py | cszoo fit | cszoo / run.py |",
            "|---|---|---|---|",
        ]
        a, b = first_step_host(root, args.rounds)
        lines.append(_line(f"host, gpt2 tiny ({args.rounds} rounds)", a, b))
        print(lines[-1], flush=True)
        if not args.skip_csx:
            a, b = first_step_csx(root, args.rounds)
            lines.append(_line(f"CSX, fc_mnist small ({args.rounds} rounds)", a, b))
            print(lines[-1], flush=True)
        t_in, t_out, n = conversion(root)
        lines += [
            "",
            f"Hugging Face GPT-2 ({n:,} parameters, float32): hf -> cs {t_in:.1f} s, "
            f"cs -> hf {t_out:.1f} s (each the whole `cszoo checkpoint convert` process).",
        ]
        print(lines[-1])
        lines.append(f"Load average at the end: {os.getloadavg()[0]:.1f}.")
        RESULTS.write_text("\n".join(lines) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
