"""run.py's compile workflow: both spellings, the wrapper's mode, --cs_ip as the target."""

from __future__ import annotations

import io
import json
import re

from cs2sim.runtime.cli.main import main, model_home
from cs2sim.runtime.cli.runlog import RunLog
from cs2sim.runtime.compiler.plan import Plan


def _run(argv, monkeypatch, flow=None):
    """`python run.py ARGV` in fc_mnist's directory (its default params: configs/params.yaml)."""
    monkeypatch.chdir(model_home("fc_mnist"))
    out, err = io.StringIO(), io.StringIO()
    if flow:
        monkeypatch.setenv("CS2SIM_FLOW", flow)
    else:
        monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    monkeypatch.setattr("cs2sim.runtime.cli.main.RunLog", lambda: RunLog(out=out, err=err))
    return main("fc_mnist", argv), out.getvalue(), err.getvalue()


def test_both_spellings_compile_without_training(tmp_path, monkeypatch):
    md = tmp_path / "m"
    rc, out, _ = _run(["--mode=validate_only", "-o", str(md)], monkeypatch)
    assert rc == 0 and "Compile stage 2/3: Matching kernels" in out
    assert "Validation for PIPELINED finished" in out
    rc, out, _ = _run(["--mode", "train", "--compile_only", "-o", str(md)], monkeypatch)
    assert rc == 0 and "Compile stage 3/6: Placing kernels on the wafer" in out
    assert "Estimated performance (CS-2 estimate" in out
    # fc_mnist: the estimate names its bound and the ports feeding its input kernel
    assert re.search(r"samples/s, (compute|io|fabric) bound", out)
    assert "of 12 ports feed the input" in out
    rc, out, _ = _run(["--mode=compile_only", "-o", str(md)], monkeypatch)
    assert rc == 0 and "Reusing existing compilation in" in out
    assert not list(md.glob("model.ckpt*")) and not list(md.glob("checkpoint_*"))
    perf = json.loads((md / "performance" / "performance.json").read_text())
    assert perf["compile_time"] > 0 and perf["est_samples_per_sec"] > 0
    assert perf["samples_per_sec"] is None  # nothing trained
    (cs,) = md.glob("cs_*")
    assert {"compile_report.txt", "compile.log", "plan.json", "wafer_map.png"} <= {
        p.name for p in cs.iterdir()
    }
    assert (cs / "wafer_map.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_python_ws_compiles_for_weight_streaming(tmp_path, monkeypatch):
    rc, out, _ = _run(
        ["--mode=compile_only", "-o", str(tmp_path), "--wafer_map"], monkeypatch, flow="ws"
    )
    assert rc == 0 and "Compilation for WEIGHT_STREAMING" in out
    assert "weight-streaming layer schedule" in out  # the map of WS is the layer timeline
    (cs,) = tmp_path.glob("cs_*")
    assert Plan.load(cs).layers[0]["name"] == "fc0"


def test_flag_conflicts_are_one_sentence(tmp_path, monkeypatch):
    rc, _, err = _run(["--mode", "train", "--validate_only", "--compile_only"], monkeypatch)
    assert rc == 2 and "Please only use one of validate_only and compile_only." in err
    rc, _, err = _run(["--mode=compile_only", "--compile_only"], monkeypatch)
    assert rc == 2 and "--mode=compile_only already says" in err


def test_cs_ip_names_the_target_system(tmp_path, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    rc, out, _ = _run(
        ["--mode=compile_only", "-o", str(tmp_path / "a"), "--cs_ip", "127.0.1.1:9000"], monkeypatch
    )
    assert rc == 0 and "on cs2-1" in out
    (cs,) = (tmp_path / "a").glob("cs_*")
    assert Plan.load(cs).target == "cs2-1"
    assert "on cs2-1" in (cs / "compile_report.txt").read_text()
    rc, _, err = _run(
        ["--mode=compile_only", "-o", str(tmp_path / "b"), "--cs_ip", "10.9.9.9"], monkeypatch
    )
    assert rc == 2 and "names no CS-2 system" in err


def test_compile_only_bounds_the_estimate_by_the_analyzers_measurement(tmp_path, monkeypatch):
    from cs2sim.runtime.compiler.io import save_measurement

    md = tmp_path / "m"
    rc, out, _ = _run(["--mode=compile_only", "-o", str(md)], monkeypatch)
    free = json.loads((md / "performance" / "performance.json").read_text())
    assert rc == 0 and "Input Samples/s: not known" in _report(md)
    # cs_input_analyzer measured 1,000 samples/s a worker and recommended 3 streamers
    save_measurement(md, "fc_mnist", 1000.0, 1, 1, streamers=3)
    rc, out, _ = _run(["--mode=compile_only", "-o", str(md)], monkeypatch)
    perf = json.loads((md / "performance" / "performance.json").read_text())
    assert rc == 0 and "samples/s, input bound" in out
    assert perf["est_samples_per_sec"] == 3000.0 < free["est_samples_per_sec"]
    assert perf["predicted_input_bottleneck"] is True
    assert "3 input worker(s) x 1000.0 samples/s each" in _report(md, perf["compile_dir"])


def _report(md, directory=None):
    from pathlib import Path

    d = Path(directory) if directory else max(md.glob("cs_*"), key=lambda p: p.stat().st_mtime)
    return (d / "compile_report.txt").read_text()
