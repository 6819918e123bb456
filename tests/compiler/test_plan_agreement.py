"""What a step runs is stated the same everywhere: compile_report.txt, plan.json, the wafer
map's title, the compile's log, the run's log and performance.json (micro-batches, their size,
the samples on each system, the systems). Cases: a given train_input.micro_batch_size, the
compiler's automatic micro-batches, two systems; and the run's own log and performance.json on
two systems."""

from __future__ import annotations

import io
import json

import pytest
import yaml

from cs2sim.runtime.cli.main import main, model_home
from cs2sim.runtime.cli.runlog import RunLog
from cs2sim.runtime.compiler.plan import Plan
from cs2sim.runtime.compiler.report import parse_report
from cs2sim.runtime.compiler.wafermap import title


def _params(tmp_path, model: str, cfg: str, changes: dict) -> str:
    doc = yaml.safe_load((model_home(model) / "configs" / cfg).read_text())
    for dotted, value in changes.items():
        sec, key = dotted.split(".")
        doc.setdefault(sec, {})[key] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _compile(tmp_path, monkeypatch, model: str, cfg: str, changes: dict):
    monkeypatch.chdir(model_home(model))
    monkeypatch.setenv("CS2SIM_FLOW", "ws")
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr("cs2sim.runtime.cli.main.RunLog", lambda: RunLog(out=out, err=err))
    md = tmp_path / "m"
    rc = main(
        model, ["--mode=compile_only", "-p", _params(tmp_path, model, cfg, changes), "-o", str(md)]
    )
    assert rc == 0, err.getvalue()
    (cdir,) = md.glob("cs_*")
    return Plan.load(cdir), cdir, out.getvalue() + err.getvalue(), md


CASES = {
    # (model, config, changes, expected (micro-batches, size, per system, systems) or None)
    "given micro_batch_size": (
        "llama",
        "params_tiny.yaml",
        {
            "train_input.batch_size": 16,
            "train_input.micro_batch_size": 4,
            "runconfig.use_cs_grad_accum": True,
        },
        (4, 4, 16, 1),
    ),
    "automatic": (
        "llama",
        "params_llama_7b.yaml",
        {"train_input.batch_size": 2048, "runconfig.use_cs_grad_accum": True},
        None,
    ),
    "two systems": (
        "llama",
        "params_tiny.yaml",
        {"train_input.batch_size": 16, "runconfig.num_csx": 2},
        (1, 8, 8, 2),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_report_plan_map_log_and_performance_agree(tmp_path, monkeypatch, case):
    model, cfg, changes, want = CASES[case]
    plan, cdir, log, md = _compile(tmp_path, monkeypatch, model, cfg, changes)
    got = (plan.micro_batches, plan.micro_batch_size, plan.batch_per_system, plan.num_csx)
    if want is not None:
        assert got == want
    else:  # the compiler chose: several micro-batches that cover the batch of each system
        assert plan.micro_batches > 1
        assert plan.micro_batches * plan.micro_batch_size >= plan.batch_per_system
        assert (plan.micro_batches - 1) * plan.micro_batch_size < plan.batch_per_system
    assert plan.batch_per_system * plan.num_csx == changes["train_input.batch_size"]
    line = plan.batch_line()
    report = (cdir / "compile_report.txt").read_text()
    assert line in report
    assert parse_report(report)["notes"]["micro_batches"] == str(plan.micro_batches)
    assert line in title(plan)  # the wafer map (the layer timeline in weight streaming)
    assert line in log  # the compile's log
    assert plan.batch_line(plan.target) in (cdir / "compile.log").read_text()
    perf = json.loads((md / "performance" / "performance.json").read_text())
    assert (
        perf["micro_batches"],
        perf["micro_batch_size"],
        perf["batch_per_system"],
        perf["num_csx"],
    ) == got
    doc = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert perf["time_to_train"]["steps"] == doc["runconfig"]["max_steps"]
    assert "Time to train (CS-2 estimate): " in log and "Time to train: " in report


@pytest.fixture
def cs2_two(tmp_path, monkeypatch):
    """A CS2_HOME of two weight-streaming systems, instant reboots."""
    home = tmp_path / "cs2home"
    monkeypatch.setenv("CS2_HOME", str(home))
    monkeypatch.setenv("CS2_BOOT_SECONDS", "0")
    monkeypatch.delenv("CS2_CLUSTER", raising=False)
    from cs2sim.system.store import Store

    Store.open()
    two = "".join(
        f"  - {{name: cs2-{i}, ip: 127.0.1.{i}, execmode: WEIGHT_STREAMING}}\n" for i in (1, 2)
    )
    (home / "cluster.yaml").write_text(f"systems:\n{two}")
    return home


def test_a_two_system_run_logs_and_records_what_its_compile_chose(
    tmp_path, monkeypatch, capsys, cs2_two
):
    monkeypatch.setenv("CS2SIM_FLOW", "ws")
    params = _params(tmp_path, "fc_mnist", "params_small.yaml", {"runconfig.num_csx": 2})
    md = tmp_path / "run"
    code = main(
        "fc_mnist",
        ["-m", "train", "-p", params, "-o", str(md), "--max_steps", "2", "--cs_ip", "cs2-1"],
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    (cdir,) = md.glob("cs_*")
    plan = Plan.load(cdir)
    assert plan.num_csx == 2
    assert f"{plan.batch_line()} on cs2-1, cs2-2." in out + err  # the run's log
    perf = json.loads((md / "performance" / "performance.json").read_text())
    assert perf["systems"] == ["cs2-1", "cs2-2"] and perf["num_csx"] == 2
    assert (perf["micro_batches"], perf["micro_batch_size"], perf["batch_per_system"]) == (
        plan.micro_batches,
        plan.micro_batch_size,
        plan.batch_per_system,
    )
    assert perf["time_to_train"]["steps"] == 2 and perf["time_to_train"]["num_csx"] == 2
