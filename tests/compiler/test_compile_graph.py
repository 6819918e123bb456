"""Graph extraction in meta mode: the real model's graph, without allocating its weights."""

from __future__ import annotations

import json
import tracemalloc
from dataclasses import replace

import pytest
from compiler_helpers import ZOO, fc_params, params

from cs2sim.runtime import registry
from cs2sim.runtime.artifacts.perf import PERF_PATH, write_compile_perf
from cs2sim.runtime.compiler import KernelMatchError
from cs2sim.runtime.compiler.graph import build_meta_model, extract_graph
from cs2sim.runtime.compiler.kernels import KERNELS, match_kernels
from cs2sim.runtime.numerics.precision import Policy


@pytest.mark.parametrize(
    ("model", "cfg"),
    [("fc_mnist", "params.yaml"), ("gpt2", "params_tiny.yaml"), ("gptj", "params_tiny.yaml")],
)
def test_meta_graph_equals_the_built_models_graph(model, cfg):
    p = params(model, ZOO / model / "configs" / cfg)
    real = registry.get(model)(p["model"], Policy("float32"), 0)
    meta = build_meta_model(model, p, "float32")
    assert meta.layer_graph(4) == real.layer_graph(4)
    assert meta.num_params() == real.num_params()
    assert extract_graph(model, p, "float32", meta) == extract_graph(model, p, "float32", real)


def test_gptj_6b_graph_without_its_weights():
    p = params("gptj", ZOO / "gptj" / "configs" / "params_gptj_6b.yaml")
    tracemalloc.start()
    try:
        g = extract_graph("gptj", p, "float16")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert g.num_params > 6_000_000_000
    assert peak < 200 * 2**20  # 6e9 float32 weights would be 24 GB


def test_unsupported_dtype_names_the_kernel_and_dtypes():
    g = extract_graph("fc_mnist", fc_params(), "float32")
    half_only = tuple(replace(k, dtypes=("float16", "cbfloat16")) for k in KERNELS)
    with pytest.raises(KernelMatchError) as e:
        match_kernels(g, half_only)
    assert "'fc'" in str(e.value) and "float32" in str(e.value) and "cbfloat16" in str(e.value)


def test_compile_figures_merge_into_performance_json(tmp_path):
    from types import SimpleNamespace

    path = tmp_path / PERF_PATH
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps({"samples_per_sec": 12.5, "total_samples": 100, "compile_time": None})
    )
    res = SimpleNamespace(compile_time=0.25, est_samples_per_sec=1234.5, directory=tmp_path)
    write_compile_perf(tmp_path, res)
    doc = json.loads(path.read_text())
    assert doc["samples_per_sec"] == 12.5 and doc["total_samples"] == 100  # the run's figures
    assert doc["compile_time"] == 0.25 and doc["est_samples_per_sec"] == 1234.5
    assert "host measurement" in doc["compile_measurement"]
    assert "estimate" in doc["compile_measurement"]
