"""compile_report.txt parsed back matches the plan (pipelined kernels, weight-streaming layers)."""

from __future__ import annotations

import math

from compiler_helpers import ZOO, params

from cs2sim.runtime.compiler import compile_run
from cs2sim.runtime.compiler.report import parse_report
from cs2sim.system.state import ExecMode


def _check_overall(parsed, e):
    o = parsed["overall"]
    assert math.isclose(o["Samples/s"], e["samples_per_sec"], abs_tol=0.051)
    assert math.isclose(o["Compute Samples/s"], e["compute_samples_per_sec"], abs_tol=0.051)
    assert math.isclose(
        o["Transmission Samples/s"], e["transmission_samples_per_sec"], abs_tol=0.051
    )
    # one value everywhere (runtime/compiler/report.py pe_share): 3 significant digits
    share = e["active_pes"] / e["total_pes"]
    assert o["Active PEs"] == float(f"{100 * share:.3g}") / 100
    assert o["Compute Utilization"] == round(100 * e["compute_utilization"]) / 100


def test_pipelined_report_matches_plan(tmp_path):
    p = params("gpt2", ZOO / "gpt2" / "configs" / "params_gpt2_small.yaml")
    r = compile_run("gpt2", p, tmp_path, mode=ExecMode.PIPELINED, draw_map=False)
    text = (r.directory / "compile_report.txt").read_text()
    assert text.startswith(
        "Estimated Overall Performance\n-------------------------------\n"
        "Samples/s:                    "
    )
    parsed = parse_report(text)
    _check_overall(parsed, r.plan.estimate)
    assert [k["name"] for k in parsed["kernels"]] == [k["name"] for k in r.plan.kernels]
    for got, k in zip(parsed["kernels"], r.plan.kernels, strict=True):
        assert got["active_pes"] == k["pes"] * k["replicas"]  # an absolute count
        assert math.isclose(got["samples_per_sec"], k["samples_per_sec"], abs_tol=0.051)
        assert math.isclose(
            got["compute_samples_per_sec"], k["compute_samples_per_sec"], abs_tol=0.051
        )
    # overall = min over kernels, also as printed
    assert parsed["overall"]["Samples/s"] == min(k["samples_per_sec"] for k in parsed["kernels"])


def test_weight_streaming_report_has_the_layer_table(tmp_path):
    p = params("gpt2", ZOO / "gpt2" / "configs" / "params_gpt3_xl.yaml")
    r = compile_run("gpt2", p, tmp_path, mode=ExecMode.WEIGHT_STREAMING, draw_map=False)
    parsed = parse_report((r.directory / "compile_report.txt").read_text())
    _check_overall(parsed, r.plan.estimate)
    assert [ly["name"] for ly in parsed["layers"]] == [ly["name"] for ly in r.plan.layers]
    for got, ly in zip(parsed["layers"], r.plan.layers, strict=True):
        assert math.isclose(got["fwd_ms"], 1e3 * ly["fwd_seconds"], abs_tol=0.0006)
        assert math.isclose(got["bwd_ms"], 1e3 * ly["bwd_seconds"], abs_tol=0.0006)
        assert math.isclose(got["fixed_ms"], 1e3 * ly["fixed_seconds"], abs_tol=0.0006)
        assert (got["fwd_bound"], got["bwd_bound"]) == (ly["fwd_bound"], ly["bwd_bound"])
    notes = parsed["notes"]
    assert notes["bound"] == r.plan.estimate["bound"]
    assert int(notes["micro_batches"]) == r.plan.micro_batches
    assert r.plan.blocks_in_order() == ["embed", *[f"h{i}" for i in range(24)], "head"]
    assert [ly["retained"] for ly in r.plan.layers].count(True) == 1
    assert r.plan.layers[-1]["retained"]  # the output layer's weights stay from fwd to bwd
    assert r.active_pes == r.total_pes


def test_weight_streaming_splits_the_batch_over_systems_and_micro_batches(tmp_path):
    cfg = ZOO / "gptj" / "configs" / "params_gptj_6b.yaml"
    one = compile_run(
        "gptj", params("gptj", cfg), tmp_path, mode=ExecMode.WEIGHT_STREAMING, draw_map=False
    )
    two = compile_run(
        "gptj",
        params("gptj", cfg, runconfig__num_csx=2),
        tmp_path,
        mode=ExecMode.WEIGHT_STREAMING,
        draw_map=False,
    )
    assert one.plan.num_csx == 1 and two.plan.num_csx == 2 and one.checksum != two.checksum
    assert two.plan.batch_per_system == -(-one.plan.batch_size // 2)
    # the same layers, half the batch per system: compute halves, weights stream the same
    for a, b in zip(one.plan.layers, two.plan.layers, strict=True):
        assert b["weight_bytes"] == a["weight_bytes"]
        assert b["fwd_compute_seconds"] < a["fwd_compute_seconds"]
    # a batch whose activations cannot stay on one wafer is split into micro-batches, not refused
    big = compile_run(
        "gptj",
        params("gptj", cfg, train_input__batch_size=1024),
        tmp_path,
        mode=ExecMode.WEIGHT_STREAMING,
        draw_map=False,
    )
    p = big.plan
    assert p.micro_batches > 1 and p.micro_batch_size * p.micro_batches >= 1024
    assert p.micro_batch_size * (p.micro_batches - 1) < 1024
    text = (big.directory / "compile_report.txt").read_text()
    assert f"Micro-batches: {p.micro_batches} of {p.micro_batch_size} samples" in text


def test_the_pe_share_is_one_value_in_report_log_and_coordinator_line(
    tmp_path, monkeypatch, capsys
):
    import re

    from cs2sim.runtime.cli.main import main, model_home

    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    monkeypatch.chdir(model_home("fc_mnist"))
    md = str(tmp_path / "md")
    common = ["-p", "configs/params_small.yaml", "-o", md, "--cs_ip", "127.0.1.1"]
    assert main("fc_mnist", ["--mode=compile_only", *common]) == 0
    assert main("fc_mnist", ["--mode", "train", *common, "--max_steps", "1"]) == 0
    out = capsys.readouterr().out
    (cs,) = (tmp_path / "md").glob("cs_*")
    share = re.search(
        r"^Active PEs:\s+(\S+)$", (cs / "compile_report.txt").read_text(), re.M
    ).group(1)
    assert share != "1%" and re.fullmatch(r"0\.0*[1-9]\d{2}%", share)  # 3 significant digits
    assert f"PEs active ({share})" in out  # the compile's log line
    assert f"Waiting for Streaming (using {share} out of 753972 cores on the fabric)" in out
    assert f"{share} of PEs active" in (cs / "compile.log").read_text()
