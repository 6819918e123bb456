"""eval, eval_all and train_and_eval with `python run.py CSX`, as Model Zoo R1.8-R2.0 runs them:
an eval job with eval_steps from the YAML, its loss and metrics printed by the client exactly as
the job computed them (and as the same eval on the host computes them), eval_all as one eval job
per checkpoint in step order, train_and_eval as train and eval jobs in turn at eval_frequency;
what a mode cannot do refused before any wsjob is submitted."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from appliance_helpers import keys_of, losses, messages

TINY = ["-p", "configs/params_tiny.yaml", "-o", "md"]
AVG = re.compile(r"Avg Eval Loss: (\S+)")
METRIC = re.compile(r"Metric: (\S+) = (\S+)")


def _host(system, model: Path, *argv: str) -> str:
    """run.py CPU on this host, in the model's copy: its output."""
    res = system.run([sys.executable, str(model / "run.py"), "CPU", *TINY, *argv], cwd=model)
    assert res.exit_code == 0, res.combined
    return res.combined


def _results(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each evaluation's (Avg Eval Loss, its Metric lines), in order."""
    found, metrics = [], []
    for line in text.splitlines():
        m = METRIC.search(line)
        if m:
            metrics.append((m.group(1), m.group(2)))
        a = AVG.search(line)
        if a:
            found.append((a.group(1), metrics))
            metrics = []
    return found


def _execute_logs(cluster) -> list[str]:
    """Each execute wsjob's launch log, in submission order."""
    home = cluster.system.home / "wsjob" / "workdir" / "job-operator"
    names = [j["meta"]["name"] for j in cluster.jobs() if j["meta"]["type"] == "execute"]
    return [(home / n / "launch.log").read_text() for n in names]


def _eval_summary_losses(model_dir: Path) -> dict[int, float]:
    """The eval `loss` scalars the jobs wrote to model_dir/eval (TensorBoard), by step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(model_dir / "eval"))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars("loss")}


def _nothing_submitted(cluster) -> None:
    assert cluster.jobs() == []  # no wsjob, not even a compile job
    assert cluster.system.jobs() == []  # and the scheduler never saw a job


@pytest.mark.slow  # whole wsjobs through a cluster server
@pytest.mark.parametrize(
    "model_name, systems",
    [("gpt2", ("1", "2")), ("llama", ("1", "2")), ("gptj", ("1",)), ("bert", ("2",))],
)
def test_eval_prints_the_jobs_loss_and_metrics_on_one_and_two_systems(
    cs2_appliance, model_name, systems
):
    system = cs2_appliance.system
    model = system.model_copy(model_name)
    _host(system, model, "--mode", "train", "--max_steps", "3")
    # the host's eval of the same checkpoint, its events kept out of md/eval (the jobs' alone)
    ckpt = str(model / "md" / "model-ckpt-3.npz")
    host = _results(_host(system, model, "--mode", "eval", "--checkpoint_path", ckpt, "-o", "h"))
    assert len(host) == 1
    for n, num_csx in enumerate(systems):
        # eval_steps comes from the YAML (runconfig.eval_steps), no --eval_steps
        res = cs2_appliance.run_csx(model, *TINY, "--mode", "eval", "--num_csx", num_csx)
        assert res.exit_code == 0, res.combined
        keys = keys_of(res.output)
        assert keys[-4:] == ["eval_metric", "eval_loss", "eval_completed", "processed"], keys
        assert "eval" in keys and "completed" not in keys and "train" not in keys
        printed = _results(res.output)
        # the client prints what the job computed, and it is the host's eval of that checkpoint
        job_log = _execute_logs(cs2_appliance)[n]
        assert printed == _results(job_log) == host, (printed, res.combined)
        assert f"Preparing to execute using {num_csx} CSX" in res.output
        assert "Step=20, Loss=" in res.output  # runconfig.eval_steps: 20 batches
    assert _eval_summary_losses(model / "md") == {3: pytest.approx(float(host[0][0]), rel=1e-6)}
    jobs = cs2_appliance.jobs()
    assert all(j["status"]["phase"] == "SUCCEEDED" for j in jobs)
    assert [j["meta"]["type"] for j in jobs].count("execute") == len(systems)


@pytest.mark.slow
def test_eval_all_evaluates_every_checkpoint_in_step_order(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("gpt2")
    _host(system, model, "--mode", "train", "--max_steps", "4", "--save_checkpoints_steps", "2")
    host = _results(_host(system, model, "--mode", "eval_all"))
    assert len(host) == 2
    res = cs2_appliance.run_csx(model, *TINY, "--mode", "eval_all", "--eval_steps", "3")
    assert res.exit_code == 0, res.combined
    out = messages(res.output)
    loading = [m for m in out if m.startswith("Loading weights from checkpoint")]
    assert [Path(m.rsplit(" ", 1)[1]).name for m in loading] == [
        "model-ckpt-2.npz",
        "model-ckpt-4.npz",
    ]
    printed = _results(res.output)
    assert len(printed) == 2 and printed == [
        r for log in _execute_logs(cs2_appliance) for r in _results(log)
    ]
    assert printed != host  # 3 batches here, the YAML's 20 on the host
    again = _results(_host(system, model, "--mode", "eval_all", "--eval_steps", "3"))
    assert printed == again
    execute = [j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute"]
    assert len(execute) == 2 and all(j["status"]["phase"] == "SUCCEEDED" for j in execute)


@pytest.mark.slow
def test_train_and_eval_trains_and_evaluates_at_eval_frequency(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("gpt2")
    config = model / "configs" / "params_tiny.yaml"
    config.write_text(
        config.read_text().replace(
            "    eval_steps: 20\n", "    eval_steps: 2\n    eval_frequency: 2\n"
        )
    )
    res = cs2_appliance.run_csx(model, *TINY, "--mode", "train_and_eval", "--max_steps", "4")
    assert res.exit_code == 0, res.combined
    keys = keys_of(res.output)
    assert keys.count("completed") == 2 and keys.count("eval_completed") == 2, keys
    order = [k for k in keys if k in ("completed", "eval_completed")]
    assert order == ["completed", "eval_completed"] * 2
    execute = [j for j in cs2_appliance.jobs() if j["meta"]["type"] == "execute"]
    assert len(execute) == 4 and all(j["status"]["phase"] == "SUCCEEDED" for j in execute)
    printed = _results(res.output)
    # the same on the host: train to 4, then evaluate the checkpoints of steps 2 and 4
    host_model = model.parent / "gpt2_host"
    shutil.copytree(model, host_model, ignore=shutil.ignore_patterns("md", "cs_*"))
    first = losses(_host(system, host_model, "--mode", "train", "--max_steps", "2"))
    then = losses(_host(system, host_model, "--mode", "train", "--max_steps", "4"))
    assert losses(res.output) == {**first, **then}
    assert sorted(losses(res.output)) == [2, 4]
    host = _results(_host(system, host_model, "--mode", "eval_all"))
    assert printed == host and len(host) == 2
    tb = _eval_summary_losses(model / "md")
    assert sorted(tb) == [2, 4]
    assert [tb[2], tb[4]] == pytest.approx([float(host[0][0]), float(host[1][0])], rel=1e-6)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--mode", "eval_all"], "No checkpoints found at"),
        (["--mode", "eval"], "No checkpoint to evaluate in"),
        (["--mode", "train_and_eval"], "train_and_eval needs runconfig.eval_frequency"),
        (
            ["--mode", "eval_all", "--checkpoint_path", "x.npz"],
            "cannot be given with --mode eval_all",
        ),
        (["pipeline", "--mode", "eval_all"], "does not run in a pipeline job"),
        (
            ["--mode", "eval", "--num_csx", "4", "--checkpoint_path", "configs/params_tiny.yaml"],
            "eval_input.batch_size 2 is smaller than --num_csx 4",
        ),
    ],
)
def test_what_a_mode_cannot_do_is_refused_before_any_job(cs2_appliance, argv, says):
    model = cs2_appliance.system.model_copy("gpt2")
    config = model / "configs" / "params_tiny.yaml"
    config.write_text(
        config.read_text().replace("    batch_size: 16\n\nmodel", "    batch_size: 2\n\nmodel")
    )
    res = cs2_appliance.run_csx(model, *TINY, *argv)
    assert res.exit_code == 2, res.combined
    err = res.errors.strip()
    assert err.count("\n") == 0 and says in err, res.combined
    assert "Traceback" not in res.combined
    _nothing_submitted(cs2_appliance)


def _plan(tmp_path: Path, mode: str, runconfig: dict, *argv: str) -> list[tuple[str, object, str]]:
    """plan_parts on params with `runconfig`: each part's (mode, max_steps, checkpoint name)."""
    from cs2sim.runtime.cli.appliance import build_csx_parser
    from cs2sim.runtime.cli.appliance_eval import plan_parts

    params = {"runconfig": runconfig, "eval_input": {"batch_size": 4}}
    path = tmp_path / "params.yaml"
    path.write_text("runconfig: {}\n")
    args = build_csx_parser("gpt2").parse_args(["--mode", mode, "-o", str(tmp_path), *argv])
    parts = plan_parts("gpt2", args, path, False, lambda argv: params, lambda *a: [])
    return [(p.mode, p.max_steps, Path(p.checkpoint_path or "-").name) for p in parts]


def test_train_and_eval_parts_resume_from_what_is_there(tmp_path):
    """Model Zoo's sideband_train_eval_all: eval_frequency steps, then an eval, up to the end
    (the last part trains what is left), from the step a resume would start at."""
    rc = {"max_steps": 5, "eval_frequency": 2}
    assert _plan(tmp_path, "train_and_eval", rc) == [
        ("train", 2, "-"),
        ("eval", None, "model-ckpt-2.npz"),
        ("train", 4, "model-ckpt-2.npz"),
        ("eval", None, "model-ckpt-4.npz"),
        ("train", 5, "model-ckpt-4.npz"),
        ("eval", None, "model-ckpt-5.npz"),
    ]
    (tmp_path / "model-ckpt-3.npz").write_bytes(b"")  # a resume starts at step 3
    assert [p[1] for p in _plan(tmp_path, "train_and_eval", rc) if p[0] == "train"] == [5]
    epochs = {"num_epochs": 2, "steps_per_epoch": 3, "autoload_last_checkpoint": False}
    assert [p[1] for p in _plan(tmp_path, "train_and_eval", epochs) if p[0] == "train"] == [3, 6]


def test_eval_all_parts_are_the_checkpoints_in_step_order(tmp_path):
    for step in (10, 2, 100):
        (tmp_path / f"model-ckpt-{step}.npz").write_bytes(b"")
    assert _plan(tmp_path, "eval_all", {}) == [
        ("eval", None, "model-ckpt-2.npz"),
        ("eval", None, "model-ckpt-10.npz"),
        ("eval", None, "model-ckpt-100.npz"),
    ]


def test_a_compile_for_any_mode_is_planned_as_one_compile(tmp_path):
    """--compile_only runs no mode: eval_all with no checkpoint yet still compiles."""
    assert _plan(tmp_path, "eval_all", {}, "--compile_only") == [("eval_all", None, "-")]
    assert _plan(tmp_path, "train_and_eval", {}, "--validate_only") == [
        ("train_and_eval", None, "-")
    ]
