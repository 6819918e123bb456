"""cs_input_analyzer: flags, the sizing rule, the report and JSON, slower input -> bigger job."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from cs2sim.runtime.cli.analyzer_report import FINISH, START
from cs2sim.runtime.cli.input_analyzer import AnalyzerError, PerThreads, parse_command, recommend
from cs2sim.scripts.cs_input_analyzer import parse_args
from streamers.conftest import FC_SMALL, ROOT

RUN_PY = str(ROOT / "runtime" / "modelzoo" / "fc_mnist" / "run.py")

pytestmark = pytest.mark.slow  # the analyzer measuring real input pipelines


def test_flags_both_spellings_and_the_command_starts_at_python():
    a = parse_args(
        [
            "--available-nodes",
            "3",
            "--mount-dirs=/a,/b",
            "--output-format=json",
            "python",
            "run.py",
            "--mode=validate_only",
            "--available-nodes",
            "9",
        ]
    )
    assert a is not None
    assert (a.available_nodes, a.mount_dirs, a.output) == (3, ["/a", "/b"], "json")
    assert a.command == ["python", "run.py", "--mode=validate_only", "--available-nodes", "9"]
    assert a.threads == (12, 16, 20)  # the real script's THREADS
    assert parse_args(["--help"]) is None


@pytest.mark.parametrize(
    ("site", "flag", "seconds"),
    [
        (None, None, 1.0),
        ("0.25", None, 0.25),
        ("0.25", "2", 2.0),
        ("nonsense", None, 1.0),
        ("-3", None, 1.0),
        ("inf", None, 1.0),
    ],
)
def test_measure_seconds_the_flag_else_the_sites_default_else_one(monkeypatch, site, flag, seconds):
    if site is None:
        monkeypatch.delenv("CS2_ANALYZER_SECONDS", raising=False)
    else:
        monkeypatch.setenv("CS2_ANALYZER_SECONDS", site)
    more = [f"--measure-seconds={flag}"] if flag else []
    a = parse_args([*more, "python", "run.py", "--mode=validate_only"])
    assert a is not None and a.seconds == seconds


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--available-nodes", "x", "python", "run.py"],
            '"--available-nodes" requires a positive integer argument',
        ),
        (["--available-nodes"], '"--available-nodes" requires a non-empty argument'),
        (["--output-format=xml", "python", "run.py"], "is text or json"),
        (["--bogus", "python", "run.py"], "unknown option --bogus"),
        ([], "no command to analyze"),
        (["--threads", "a,b", "python", "run.py"], "comma-separated list of positive integers"),
    ],
)
def test_flag_errors(argv, message):
    with pytest.raises(AnalyzerError, match=message):
        parse_args(argv)


def test_command_names_the_model_and_the_flow(tmp_path):
    cmd = parse_command(["python-ws", RUN_PY, "--mode=compile_only"])
    assert cmd.model == "fc_mnist" and cmd.weight_streaming
    with pytest.raises(AnalyzerError, match="must be python, python-ws or python-pt"):
        parse_command(["bash", RUN_PY])
    other = tmp_path / "run.py"
    other.write_text("print('hi')\n")
    with pytest.raises(AnalyzerError, match="not a cs2sim run.py"):
        parse_command(["python", str(other)])


OPTS = [PerThreads(12, 10, 1000.0), PerThreads(16, 8, 1300.0), PerThreads(20, 6, 1500.0)]


def test_recommend_fewest_nodes_that_meet_the_need():
    r = recommend(OPTS, 25_000.0, available=10, single=0)
    # 12 threads: 25 tasks + the chief -> 3 nodes of 9 (324 CPUs); 16: 20 + 1 -> 3 of 7 (336);
    # 20: 17 + 1 -> 3 of 6 (360): a tie on nodes goes to the fewest CPUs
    assert (r.nodes, r.tasks_per_node, r.cpus_per_task) == (3, 9, 12)
    assert r.meets_need is True and r.streamers == 3 * 9 - 1
    assert r.expected == r.streamers * 1000.0 >= 25_000


def test_recommend_grows_with_a_slower_input_and_caps_at_available():
    fast = recommend(OPTS, 25_000.0, available=10, single=0)
    slow = recommend(
        [PerThreads(p.threads, p.workers_per_node, p.per_worker / 4) for p in OPTS],
        25_000.0,
        available=10,
        single=0,
    )
    assert slow.nodes > fast.nodes
    short = recommend(OPTS, 1e9, available=4, single=2)
    assert short.nodes == 4 and short.meets_need is False and short.nodes_needed > 4
    assert short.single_task_nodes == 2 and short.streamers == 2 * short.tasks_per_node
    none = recommend(OPTS, None, available=5, single=0)
    assert none.nodes == 5 and none.meets_need is None


def test_thread_counts_a_worker_here_cannot_run_share_one_measurement(monkeypatch):
    """A worker runs at most this host's CPU count of threads: 12 and 16 threads on a 4-CPU
    host are the same processes, measured once and reported for both; 2 threads is its own."""
    from contextlib import contextmanager

    import cs2sim.runtime.job.input_measure as input_measure
    from cs2sim.runtime.cli.input_analyzer import Options, _measure
    from cs2sim.runtime.job import streamers

    runs: list[tuple[int, int]] = []

    def measure_delivery(model, params, *, workers, threads, seconds, extra_work):
        runs.append((threads, workers))
        samples = 1000 * len(runs)  # each run its own figure
        return input_measure.Measurement(threads, workers, samples, 1.0, 0.1, 8)

    monkeypatch.setattr(input_measure, "measure_delivery", measure_delivery)
    monkeypatch.setattr(streamers.os, "cpu_count", lambda: 4)
    labels: list[str] = []

    class Progress:
        @contextmanager
        def measuring(self, total):
            assert total == 6
            yield labels.append

    opts = Options(None, [], "json", None, (2, 12, 16), 0.1, ["python", "run.py"])
    got = _measure("fc_mnist", {}, opts, 128, 4, 0, Progress())
    assert runs == [(2, 1), (2, 4), (12, 1), (12, 4)]
    assert [(m.threads, m.workers, m.samples) for m in got] == [
        (2, 1, 1000),
        (2, 4, 2000),
        (12, 1, 3000),
        (12, 4, 4000),
        (16, 1, 3000),
        (16, 4, 4000),
    ]
    assert len(labels) == 6 and "the 12-thread run: a worker here runs 4 threads" in labels[4]


def _analyze(tmp_path, *flags, env=None, mode="--mode=validate_only"):
    e = {**os.environ, "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "cs2sim.scripts.cs_input_analyzer",
            *flags,
            "python",
            RUN_PY,
            mode,
            "-p",
            FC_SMALL,
            "-o",
            str(tmp_path / "md"),
        ],
        capture_output=True,
        text=True,
        env=e,
        cwd=ROOT,
        timeout=300,
    )


def test_text_report_has_the_progress_lines_measurements_and_three_values(tmp_path):
    p = _analyze(
        tmp_path,
        "--threads",
        "12,20",
        "--measure-seconds",
        "0.1",
        "--available-nodes",
        "4",
        mode="--mode=compile_only",
    )
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert START in out and FINISH in out
    bars = [line for line in out.splitlines() if line.endswith("%)")]
    assert bars[-1] == "#" * 67 + " (100%)" and len(bars) == 4  # 2 thread counts x (1, 2)
    assert "host measurements" in out and "CS-2 estimate from the compile" in out
    for key in ("nodes:", "tasks_per_node:", "cpus_per_task:"):
        assert f"\n  {key} " in out
    assert "csrun_wse --total-nodes=" in out and "--mode=train" in out
    assert (tmp_path / "md").is_dir()  # the compile directory a later run reuses
    assert any(d.name.startswith("cs_") for d in (tmp_path / "md").iterdir())
    # the per-worker rate is saved where the run's compile finds it; with few workers the
    # compile's estimate is then bound by the input and says so
    from cs2sim.runtime.compiler import compile_run
    from cs2sim.runtime.compiler.io import InputCluster, load_measurement
    from cs2sim.runtime.params import load_params, validate_params
    from cs2sim.system.state import ExecMode

    rate = load_measurement(tmp_path / "md", "fc_mnist")
    assert rate is not None and rate > 0 and "saved in" in out
    params, _ = validate_params(load_params(FC_SMALL), "fc_mnist")
    r = compile_run(
        "fc_mnist",
        params,
        tmp_path / "md2",
        mode=ExecMode.PIPELINED,
        draw_map=False,
        input_cluster=InputCluster(1, rate),
    )
    assert r.plan.estimate["bound"] == "input"  # one host worker is far below a CS-2 port
    assert "Bound: input" in (r.directory / "compile_report.txt").read_text()


def test_json_report_and_slower_input_changes_the_recommendation(tmp_path):
    flags = (
        "--output-format=json",
        "--threads=12",
        "--measure-seconds=0.2",
        "--available-nodes=64",
        "--target-samples-per-sec=100000",
    )
    fast = _analyze(tmp_path, *flags)
    assert fast.returncode == 0, fast.stderr
    a = json.loads(fast.stdout)  # stdout is only the JSON (progress went to stderr)
    assert START in fast.stderr
    assert a["model"] == "fc_mnist" and a["flow"] == "PIPELINED"
    assert a["compile"]["stop_after"] == "validate" and a["compile"]["est_samples_per_sec"] is None
    assert a["need"] == {"samples_per_sec": 100000.0, "source": "--target-samples-per-sec"}
    assert [m["workers"] for m in a["measurements"]] == [1, 2]
    assert all(m["samples_per_sec"] > 0 and m["samples"] > 0 for m in a["measurements"])
    rec = a["recommendation"]
    assert {"nodes", "tasks_per_node", "cpus_per_task", "csrun_wse"} <= rec.keys()
    assert rec["cpus_per_task"] == 12 and rec["meets_need"] is True
    slow = _analyze(tmp_path, *flags, env={"CS2SIM_INPUT_EXTRA_WORK": "150"})
    assert slow.returncode == 0, slow.stderr
    b = json.loads(slow.stdout)
    assert b["host"]["extra_work_rounds"] == 150
    per_fast = a["per_threads"][0]["per_worker_samples_per_sec"]
    per_slow = b["per_threads"][0]["per_worker_samples_per_sec"]
    assert per_slow < per_fast / 3  # the knob is real work
    assert b["recommendation"]["streamers"] > rec["streamers"]
    assert (b["recommendation"]["nodes"], b["recommendation"]["tasks_per_node"]) != (
        rec["nodes"],
        rec["tasks_per_node"],
    )


def test_errors_are_one_line(tmp_path):
    p = _analyze(tmp_path, "--mount-dirs", str(tmp_path / "nope"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("ERROR: --mount-dirs names") and "Traceback" not in p.stderr
    p = _analyze(tmp_path, mode="--mode=train")
    assert p.returncode == 2 and "--mode=compile_only (best) or --mode=validate_only" in p.stderr


def test_on_a_terminal_a_rich_progress_bar_then_the_report(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "cs2sim.scripts.cs_input_analyzer",
            "--threads=12",
            "--measure-seconds=0.1",
            "python",
            RUN_PY,
            "--mode=validate_only",
            "-p",
            FC_SMALL,
            "-o",
            str(tmp_path / "md"),
        ],
        cwd=str(ROOT),
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "TERM": "xterm"},
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 160),
    )
    child.delaybeforesend = None
    seen = io.StringIO()
    child.logfile_read = seen
    child.expect("Measuring input workers|12 threads x")  # rich's bar, not the '#' lines
    child.expect("tasks_per_node: ")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert "#" * 30 not in seen.getvalue()  # the real script's '#' lines are for pipes only


def test_a_run_py_that_passes_its_own_model_class_is_analyzed():
    """docs/own-model.md: `main(ResidualMLP)`; the analyzer imports the run.py (its main() is
    under __main__), registers the class and analyzes it by its NAME."""
    from cs2sim.runtime import registry

    run_py = ROOT / "examples" / "own_model" / "run.py"
    cmd = parse_command(["python", str(run_py), "--mode=validate_only"])
    assert cmd.model == "residual_mlp"
    assert registry.get("residual_mlp").NAME == "residual_mlp"
    assert registry.get("residual_mlp").family == "mnist"


def test_a_run_py_naming_a_class_it_lacks_is_one_line(tmp_path):
    bad = tmp_path / "run.py"
    bad.write_text(
        "from cs2sim.runtime.cli.main import main\nif __name__ == '__main__':\n    main(Missing)\n"
    )
    with pytest.raises(AnalyzerError, match="passes Missing to main"):
        parse_command(["python", str(bad)])


# -- the recommended line and the examples, as a user runs them -------------------------------
def _train_line(report: str) -> str:
    lines = report.splitlines()
    at = lines.index("Train with (on the CS-2):")
    return lines[at + 1].strip()


@pytest.mark.slow
def test_the_recommended_line_run_as_printed_trains_on_the_cs2(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    # 128-CPU worker nodes at 64 threads: 2 workers a node; 2 nodes: a chief and 3 streamers
    report = (
        cs2_system.run(
            [
                "cs_input_analyzer",
                "--available-nodes=2",
                "--threads=64",
                "--measure-seconds=0.1",
                "python",
                "run.py",
                "--mode=compile_only",
                "-p",
                "configs/params_small.yaml",
                "--max_steps",
                "10",
            ],
            cwd=work,
        )
        .check()
        .output
    )
    line = _train_line(report)
    assert "Time to train (CS-2 estimate): " in report and " for 10 steps (" in report
    assert line.startswith("csrun_wse --total-nodes=2 ") and " python run.py --mode=train " in line
    assert line.endswith(f"--max_steps 10 --cs_ip={cs2_system.ip}")
    result = cs2_system.run(["sh", "-c", line], cwd=work)  # as printed
    assert result.ok, result.combined[-3000:]
    assert f"running on cs2-1 ({cs2_system.ip}) in PIPELINED mode" in result.output
    assert "| Train Device=CSX, Step=10," in result.output
    assert "not on a CS-2" not in result.combined


@pytest.mark.slow
def test_the_help_examples_run_as_written(cs2_system):
    work = cs2_system.model_copy("fc_mnist")
    help_text = cs2_system.run(["cs_input_analyzer", "--help"]).check().output
    examples = [
        ln.strip()
        for ln in help_text.split("Example usage")[1].splitlines()
        if ln.strip().startswith("cs_input_analyzer ")
    ]
    assert len(examples) == 2 and f"--cs_ip={cs2_system.ip}" in examples[0]
    assert " -p " not in examples[1] and "--cs_ip" not in examples[1]  # checked below
    for example in examples:
        # as written, on a site whose measurements are short (the default is 1 s each: the same
        # code runs either way)
        result = cs2_system.run(["bash", "-c", f"CS2_ANALYZER_SECONDS=0.1 {example}"], cwd=work)
        assert result.ok, f"{example}\n{result.combined[-3000:]}"
        assert f"--cs_ip={cs2_system.ip}" in _train_line(result.output)
    # Without -p the analyzer uses the default params as run.py does: run.py reuses the second
    # example's compile. run.py compiles for the system --cs_ip names; the analyzer (no --cs_ip
    # there) for the one its line names.
    directory = re.search(r"\n  compile: (\S+) \(", result.output)
    assert directory, result.output
    run = cs2_system.run(
        ["python", "run.py", "--mode=validate_only", "--cs_ip", cs2_system.ip], cwd=work
    ).check()
    assert (
        f"Params file: {work / 'configs' / 'params.yaml'} (the default next to run.py" in run.output
    )
    assert f"Reusing existing compilation in {directory[1]}" in run.output  # the same params
