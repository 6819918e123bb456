"""run.py end to end through `runtime.cli.main`: flags and messages (Model Zoo's run.py,
docs/sources.md), overrides,
artifacts, accuracy of fc_mnist on the digits, and the host-memory refusal."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cs2sim.runtime.cli.main import main, model_home

FC_SMALL = str(model_home("fc_mnist") / "configs" / "params_small.yaml")


@pytest.fixture(autouse=True)
def _one_blas_thread():
    """One BLAS thread: on a shared, loaded machine OpenBLAS's spinning threads cost ~10x."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def run(capsys, model: str, *argv: str) -> tuple[int, str, str]:
    code = main(model, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- flags and messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "argv", "message"),
    [
        (
            "fc_mnist",
            ["-m", "train", "--validate_only", "--compile_only"],
            "Please only use one of validate_only and compile_only.",
        ),
        (
            "fc_mnist",
            ["-m", "train", "--multireplica"],
            "Multi-replica training is only possible on the Cerebras System.",
        ),
        (
            "fc_mnist",
            ["-m", "eval", "--cs_ip", "10.0.0.1"],
            "For FC_MNIST model, only training is supported on the Cerebras System.",
        ),
        (
            "gpt2",
            ["-m", "eval_all", "-p", "x.yaml", "--cs_ip", "10.0.0.1"],
            "Cannot run eval_all mode on the Cerebras System!",
        ),
        (
            "gpt2",
            ["-m", "train_and_eval", "-p", "x.yaml", "--cs_ip", "10.0.0.1"],
            "Cannot run train_and_eval mode on the Cerebras System!",
        ),
    ],
)
def test_flag_messages_verbatim_exit_2(capsys, model, argv, message):
    code, out, err = run(capsys, model, *argv)
    assert code == 2
    assert err == f"error: {message}\n"
    assert out == ""


def test_a_pipelined_cs_eval_needs_eval_steps_from_the_yaml_or_the_flag(capsys, tmp_path):
    """TF check_env reads the effective runconfig: the YAML's eval_steps counts as the flag."""
    tiny = model_home("gpt2") / "configs" / "params_tiny.yaml"
    without = tmp_path / "no_eval_steps.yaml"
    without.write_text(tiny.read_text().replace("    eval_steps: 20\n", ""))
    argv = ["-m", "eval", "-o", str(tmp_path / "md"), "--cs_ip", "10.0.0.1"]
    code, out, err = run(capsys, "gpt2", *argv, "-p", str(without))
    message = "When performing eval on the Cerebras System, eval_steps must be provided."
    assert (code, err) == (2, f"error: {message}\n")
    for given in (["-p", str(tiny)], ["-p", str(without), "--eval_steps", "3"]):
        code, out, err = run(capsys, "gpt2", *argv, *given)
        assert "eval_steps must be provided" not in err and code != 0  # no system 10.0.0.1


def test_missing_mode_and_params_are_usage_errors(capsys):
    code, _, err = run(capsys, "fc_mnist")
    assert code == 2 and "the following arguments are required: -m/--mode" in err
    assert err.startswith("error: ") and err.count("\n") == 1
    code, _, err = run(capsys, "gpt2", "-m", "train")  # gpt2 has no default params file
    assert code == 2 and "-p/--params" in err
    code, _, err = run(capsys, "fc_mnist", "-m", "fly")
    assert code == 2 and "invalid choice: 'fly'" in err


def test_help(capsys):
    code, out, err = run(capsys, "gpt2", "--help")
    assert code == 0 and err == ""
    for flag in (
        "--mode",
        "--params",
        "--model_dir",
        "--max_steps",
        "--steps",
        "--eval_steps",
        "--checkpoint_path",
        "--cs_ip",
        "--validate_only",
        "--compile_only",
        "--device",
        "--multireplica",
        "--save_summary_steps",
        "--save_checkpoints_steps",
    ):
        assert flag in out


def test_other_device_refused(capsys, tmp_path):
    code, _, err = run(capsys, "fc_mnist", "-m", "train", "--device", "/gpu:0", "-o", str(tmp_path))
    assert code == 2 and "--device /gpu:0 is not available" in err


def test_bad_params_file_is_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "gpt2", "-m", "train", "-p", str(tmp_path / "nope.yaml"))
    assert code == 1
    assert err.startswith("error: params file ") and err.count("\n") == 1
    assert "Traceback" not in out + err


def test_traceback_flag_reraises(capsys, tmp_path):
    from cs2sim.system.errors import ConfigError

    with pytest.raises(ConfigError):
        main("gpt2", ["-m", "train", "-p", str(tmp_path / "nope.yaml"), "--traceback"])


def test_unexpected_error_is_one_line_and_130_on_interrupt(capsys, monkeypatch, tmp_path):
    import cs2sim.runtime.cli.main as cli

    def boom(*a, **k):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(cli, "check_flags", boom)
    code, _, err = run(capsys, "fc_mnist", "-m", "train", "-o", str(tmp_path))
    assert code == 1 and err.startswith("error: internal error (ZeroDivisionError: oops)")

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "check_flags", interrupt)
    code, _, err = run(capsys, "fc_mnist", "-m", "train", "-o", str(tmp_path))
    assert code == 130 and err.startswith("error: interrupted")


def test_file_system_refusals_are_one_line_naming_the_path(capsys, monkeypatch, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = run(capsys, "fc_mnist", "-m", "train", "-p", FC_SMALL, "-o", str(afile))
    assert code == 2 and err == (
        f"error: model_dir {afile} is a file, not a directory; pass "
        "-o/--model_dir with a directory.\n"
    )
    import cs2sim.runtime.cli.main as cli

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "m" / "train"))

    monkeypatch.setattr(cli, "check_flags", disk_full)
    code, _, err = run(capsys, "fc_mnist", "-m", "train", "-o", str(tmp_path / "m"))
    assert code == 1 and err == (
        f"error: No space left on device ({tmp_path / 'm' / 'train'}); "
        "check the path, its permissions and the free disk space.\n"
    )


# -- real runs ------------------------------------------------------------------------------------


def test_fc_mnist_small_trains_to_90_percent_and_leaves_artifacts(capsys, tmp_path):
    md = tmp_path / "m"
    code, out, err = run(
        capsys, "fc_mnist", "--mode", "train_and_eval", "-p", FC_SMALL, "-o", str(md)
    )
    assert code == 0, err
    lines = out.splitlines()
    fmt = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO:   ")
    assert all(fmt.match(line) for line in lines), lines[:3]
    msgs = [fmt.sub("", line) for line in lines]
    assert f'No checkpoints were found in "{md}".' in msgs
    assert any(
        re.fullmatch(
            r"\| Train Device=cpu, Step=300, Loss=\d+\.\d{5}, Rate=\d+\.\d\d "
            r"samples/sec, GlobalRate=\d+\.\d\d samples/sec",
            m,
        )
        for m in msgs
    )
    assert any(m.startswith("global_step = 300, loss = ") for m in msgs)
    assert "Saving checkpoint at global step 300" in msgs
    assert any(
        re.fullmatch(
            r"Training finished with 19200 samples in \d+\.\d{3} seconds, "
            r"\d+\.\d\d samples/second\.",
            m,
        )
        for m in msgs
    )
    assert any(m.startswith("Loss for final step: ") for m in msgs)
    acc = [float(m.split(" = ")[1]) for m in msgs if m.startswith("Metric: accuracy = ")]
    assert acc and acc[0] >= 0.90
    assert "Evaluation completed successfully!" in msgs
    assert any(m.startswith("Avg Eval Loss: ") for m in msgs)
    # the small config asks for the stand-in digits
    assert any(
        m.startswith("Training data: STAND-IN data") and "UCI handwritten digits (1497 of 1797" in m
        for m in msgs
    )
    assert any(
        m.startswith("Evaluation data: STAND-IN data")
        and "UCI handwritten digits (300 of 1797" in m
        for m in msgs
    )
    # artifacts
    assert sorted(p.name for p in md.glob("model-ckpt-*.npz")) == [
        "model-ckpt-100.npz",
        "model-ckpt-200.npz",
        "model-ckpt-300.npz",
    ]
    assert json.loads((md / "checkpoint").read_text())["latest"] == "model-ckpt-300.npz"
    assert list(md.glob("events.out.tfevents.*")) and list((md / "eval").glob("events.*"))
    perf = json.loads((md / "performance" / "performance.json").read_text())
    for key in (
        "compile_time",
        "est_samples_per_sec",
        "programming_time",
        "samples_per_sec",
        "suspected_input_bottleneck",
        "total_samples",
        "total_time",
    ):
        assert key in perf
    assert perf["total_samples"] == 19200
    effective = yaml.safe_load((md / "train" / "params_train.yaml").read_text())
    assert effective["model"]["hidden_sizes"] == [128]
    assert effective["runconfig"]["max_steps"] == 300 and "log_steps" in effective["runconfig"]
    assert (md / "eval" / "params_eval.yaml").exists()
    (log,) = md.glob("run_*.log")
    assert re.fullmatch(r"run_\d{8}_\d{6}\.log", log.name)
    assert "Evaluation completed successfully!" in log.read_text()


def test_cli_overrides_yaml_and_resume_continues(capsys, tmp_path):
    md = tmp_path / "m"
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(md),
        "--max_steps",
        "20",
        "--save_summary_steps",
        "10",
        "--save_checkpoints_steps",
        "10",
    )
    assert code == 0, err
    rc = yaml.safe_load((md / "train" / "params_train.yaml").read_text())["runconfig"]
    assert (rc["max_steps"], rc["log_steps"], rc["checkpoint_steps"]) == (20, 10, 10)
    assert sorted(p.name for p in md.glob("model-ckpt-*")) == [
        "model-ckpt-10.npz",
        "model-ckpt-20.npz",
    ]
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(md),
        "--steps",
        "5",
        "--save_summary_steps",
        "5",
    )
    assert code == 0, err
    assert f'Found latest checkpoint at "{md / "model-ckpt-20.npz"}".' in out
    assert "| Train Device=cpu, Step=25," in out
    rc = yaml.safe_load((md / "train" / "params_train.yaml").read_text())["runconfig"]
    assert rc["steps"] == 5 and rc["max_steps"] is None  # --steps beats the YAML's max_steps


def test_eval_all_over_every_checkpoint(capsys, tmp_path):
    md = tmp_path / "m"
    assert (
        run(
            capsys,
            "fc_mnist",
            "-m",
            "train",
            "-p",
            FC_SMALL,
            "-o",
            str(md),
            "--max_steps",
            "20",
            "--save_checkpoints_steps",
            "10",
        )[0]
        == 0
    )
    code, out, err = run(
        capsys, "fc_mnist", "-m", "eval_all", "-p", FC_SMALL, "-o", str(md), "--eval_steps", "2"
    )
    assert code == 0, err
    assert out.count("Evaluation completed successfully!") == 2
    for step in (10, 20):  # which checkpoint each result belongs to
        assert (
            f'Evaluating checkpoint "{md / f"model-ckpt-{step}.npz"}" (global step {step}).' in out
        )
    assert len(list((md / "eval").glob("events.out.tfevents.*"))) == 1  # one file, two points
    assert (md / "eval" / "params_eval.yaml").exists()


def test_train_and_eval_checks_the_eval_input_before_training(capsys, tmp_path):
    cfg = yaml.safe_load(Path(FC_SMALL).read_text())
    cfg["eval_input"]["batch_size"], cfg["eval_input"]["drop_last_batch"] = 512, True
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    md = tmp_path / "m"
    code, out, err = run(
        capsys, "fc_mnist", "-m", "train_and_eval", "-p", str(tmp_path / "p.yaml"), "-o", str(md)
    )
    assert code == 1 and err.startswith("error: eval_input.batch_size 512 is larger than")
    assert not list(md.glob("model-ckpt-*")) and "Train Device" not in out


def test_a_diverging_run_reports_its_loss_not_library_warnings(capsys, tmp_path, recwarn, caplog):
    cfg = yaml.safe_load(Path(FC_SMALL).read_text())
    # the largest learning rate validation allows, on a linear model: diverges to inf then NaN
    cfg["optimizer"] = {"optimizer_type": "sgd", "learning_rate": 10.0}
    cfg["model"]["activation_fn"] = "linear"
    cfg["runconfig"]["check_loss_values"] = False
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        str(tmp_path / "p.yaml"),
        "-o",
        str(tmp_path / "m"),
        "--max_steps",
        "20",
        "--save_summary_steps",
        "1",
    )
    assert code == 0, err
    assert "Loss=nan" in out
    assert out.count("training continues because runconfig.check_loss_values is false") == 1
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # numpy's
    assert not [r for r in caplog.records if r.name.startswith("tensorboardX")]


def test_gptj_6b_refused_for_host_memory(capsys, tmp_path):
    cfg = model_home("gptj") / "configs" / "params_gptj_6b.yaml"
    md = tmp_path / "md"
    code, out, err = run(capsys, "gptj", "-m", "train", "-p", str(cfg), "-o", str(md))
    assert code == 1
    assert re.fullmatch(
        r"error: Training gptj \(6\.\dB parameters\) on the host needs about \d+ GiB of memory "
        r"but this machine has \d+ GiB; compile it for the CS-2 instead \(--mode compile_only\), "
        r"or run configs/params_continuous_pretraining.yaml or another smaller config on the "
        r"host or on the simulated CS-2 \(--cs_ip\)\.\n",
        err,
    ), err
    assert not md.exists()  # refused before anything was written: no log, no params file
    code, out, err = run(capsys, "gptj", "-m", "eval", "-p", str(cfg), "-o", str(md))
    assert code == 1 and err.startswith("error: Evaluating gptj (6.") and not md.exists()


@pytest.mark.slow
def test_run_py_runs_as_a_script_from_its_directory(tmp_path):
    home = model_home("gptj")
    proc = subprocess.run(
        [
            sys.executable,
            "run.py",
            "--model_dir",
            str(tmp_path / "model_dir"),
            "--params",
            "configs/params_continuous_pretraining.yaml",
            "--mode",
            "train",
            "--max_steps",
            "2",
        ],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "Saving checkpoint at global step 0" in proc.stdout
    assert "global_step = 2, loss = " in proc.stdout
    assert "Training finished with 16 samples in " in proc.stdout
    assert Path(tmp_path / "model_dir" / "model-ckpt-2.npz").exists()


def test_progress_bar_with_eta_on_a_terminal(tmp_path):
    import pexpect

    child = pexpect.spawn(
        sys.executable,
        [
            "run.py",
            "-m",
            "train",
            "-p",
            "configs/params_small.yaml",
            "-o",
            str(tmp_path),
            "--max_steps",
            "30",
            "--save_summary_steps",
            "10",
        ],
        cwd=str(model_home("fc_mnist")),
        encoding="utf-8",
        timeout=120,
        dimensions=(24, 120),
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "TERM": "xterm"},
    )
    child.expect(pexpect.EOF)
    child.close()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", child.before)  # drop the terminal codes
    assert child.exitstatus == 0, text
    assert re.search(r"30/30 steps .*ETA", text)  # the bar, finished
    assert "| Train Device=cpu, Step=30," in text  # log lines still printed above it


def test_progress_bar_only_when_stdout_and_stderr_are_both_terminals():
    """`run.py ... | tee log`: the log lines come back to the terminal through the pipe and would
    collide with a bar drawn on stderr, so a pipe on either side means plain lines."""
    import io

    from cs2sim.runtime.cli.runlog import RunLog

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    class Recorder:
        def __init__(self) -> None:
            self.events: list[str] = []

        def add_callback(self, event: str, fn) -> None:
            self.events.append(event)

    for out, err, bar in (
        (Terminal(), Terminal(), True),
        (io.StringIO(), Terminal(), False),
        (Terminal(), io.StringIO(), False),
    ):
        with RunLog(out, err) as runlog:
            trainer = Recorder()
            runlog.attach(trainer)
            assert ("on_load" in trainer.events) is bar


# -- the real run.py flags, which params/model_dir, eval without checkpoint ---------------


def test_real_model_zoo_flags_are_accepted_and_stored(capsys, tmp_path):
    md = tmp_path / "m"
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(md),
        "--max_steps",
        "2",
        "--logging",
        "warning",
        "--num_csx",
        "2",
        "--num_wgt_servers",
        "4",
        "--execution_strategy",
        "weight_streaming",
        "--mount_dirs",
        "/data",
        "/models",
        "--python_paths",
        "/src",
    )
    assert code == 0, err
    rc = yaml.safe_load((md / "train" / "params_train.yaml").read_text())["runconfig"]
    assert (
        rc["num_csx"],
        rc["num_wgt_servers"],
        rc["execution_strategy"],
        rc["mount_dirs"],
        rc["python_paths"],
        rc["logging"],
    ) == (2, 4, "weight_streaming", ["/data", "/models"], ["/src"], "WARNING")
    assert "| Train Device" not in out  # --logging WARNING: no INFO lines
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(md),
        "--max_steps",
        "3",
        "--num_csx",
        "2",
        "--mount_dirs",
        "/data",
    )
    assert code == 0, err
    notes = [line.split("INFO:   ")[1] for line in out.splitlines() if "note: --" in line]
    assert notes == [
        "note: --num_csx 2 is stored in runconfig.num_csx and has no effect here yet (it sets "
        "the CS-X systems of a weight-streaming run with --cs_ip (python-ws)).",
        "note: --mount_dirs /data is stored in runconfig.mount_dirs and has no effect here yet "
        "(it belongs to the appliance: `python run.py CSX ... --mount_dirs ...`).",
    ]


def test_checkpoint_path_resumes_unless_is_pretrained_checkpoint(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(tmp_path / "a"),
        "--max_steps",
        "4",
    )
    assert code == 0, err
    source = str(tmp_path / "a" / "model-ckpt-4.npz")
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(tmp_path / "b"),
        "--max_steps",
        "6",
        "--checkpoint_path",
        source,
    )
    assert code == 0, err
    assert f'Resuming from checkpoint "{source}" at global step 4' in out
    assert "Training finished with 128 samples" in out  # steps 5 and 6 only
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        FC_SMALL,
        "-o",
        str(tmp_path / "c"),
        "--max_steps",
        "6",
        "--checkpoint_path",
        source,
        "--is_pretrained_checkpoint",
    )
    assert code == 0, err
    assert "training starts at global step 0" in out
    assert "Training finished with 384 samples" in out  # steps 1-6


def test_mode_validate_only_says_its_params_file(capsys, tmp_path):
    code, out, err = run(
        capsys, "fc_mnist", "-m", "validate_only", "-p", FC_SMALL, "-o", str(tmp_path / "m")
    )
    assert code == 0, err
    assert f"Params file: {FC_SMALL}\n" in out


def test_run_says_which_params_file_and_model_dir(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(
        capsys, "fc_mnist", "-m", "eval", "--eval_steps", "1", "--eval_random_weights"
    )
    assert code == 2 and out == ""  # no default params here: never the installation's copy
    assert err == (
        f"error: no -p/--params given and there is no {tmp_path}/configs/params.yaml;"
        " pass -p with your params file.\n"
    )
    (tmp_path / "configs").mkdir()
    default = tmp_path / "configs" / "params.yaml"
    default.write_text((model_home("fc_mnist") / "configs" / "params.yaml").read_text())
    code, out, err = run(
        capsys, "fc_mnist", "-m", "eval", "--eval_steps", "1", "--eval_random_weights"
    )
    assert code == 0, err
    assert (
        f"Params file: {default} (the default in the working directory; choose another with -p)"
    ) in out
    assert (
        f"Model directory: {tmp_path / 'model_dir'} (runconfig.model_dir; choose another with -o)"
    ) in out
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "eval",
        "-p",
        FC_SMALL,
        "-o",
        "m",
        "--eval_steps",
        "1",
        "--eval_random_weights",
    )
    assert f"Params file: {FC_SMALL}\n" in out and f"Model directory: {tmp_path / 'm'}\n" in out


@pytest.mark.slow
def test_a_copied_model_directory_uses_its_own_params(tmp_path):
    """`cp -r fc_mnist mine && cd mine && python run.py` (no -p): the copy's configs/params.yaml,
    so an edit there is a new compile, never the installation's file and its cached compile."""
    import shutil

    work = tmp_path / "mine"
    shutil.copytree(model_home("fc_mnist"), work, ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "CS2_HOME": str(tmp_path / "home"), "OPENBLAS_NUM_THREADS": "1"}

    def compile_only() -> str:
        proc = subprocess.run(
            [sys.executable, "run.py", "--mode=compile_only", "-o", "md"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
        return proc.stdout

    out = compile_only()
    assert (
        f"Params file: {work / 'configs' / 'params.yaml'} (the default next to run.py; "
        "choose another with -p)"
    ) in out
    params = work / "configs" / "params.yaml"
    params.write_text(params.read_text().replace("        - 300\n", "        - 200\n"))
    out = compile_only()
    assert "Reusing existing compilation" not in out
    assert len(list((work / "md").glob("cs_*/compile_report.txt"))) == 2
    assert "Reusing existing compilation" in compile_only()  # unchanged again: reused
    # the copy run by a Python that has no cs2sim (-S: no site-packages): one sentence
    proc = subprocess.run(
        [sys.executable, "-S", "run.py", "--mode=compile_only"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        f"error: run.py needs cs2sim, which {sys.executable} cannot import; "
        "run it with the venv cs2sim is installed in (activate it, or call "
        "its bin/python).\n"
    )


def test_eval_without_a_checkpoint_is_an_error_unless_asked(capsys, tmp_path):
    md = tmp_path / "empty"
    code, out, err = run(capsys, "fc_mnist", "-m", "eval", "-p", FC_SMALL, "-o", str(md))
    assert code == 1
    assert err == (
        f'error: No checkpoint to evaluate in "{md}"; train first, pass '
        "--checkpoint_path, or add --eval_random_weights to evaluate randomly "
        "initialized weights on purpose.\n"
    )
    assert "Evaluation completed successfully!" not in out
    code, out, err = run(
        capsys, "fc_mnist", "-m", "eval", "-p", FC_SMALL, "-o", str(md), "--eval_random_weights"
    )
    assert code == 0 and "evaluating randomly initialized weights" in out


def test_params_train_yaml_holds_resolved_values(capsys, tmp_path):
    cfg = yaml.safe_load(Path(FC_SMALL).read_text())
    cfg["model"]["mixed_precision"] = True
    cfg["optimizer"]["loss_scaling_factor"] = "dynamic"
    cfg["runconfig"].pop("log_steps")
    cfg["runconfig"]["save_summary_steps"] = 10  # TF flow: console every 100 (default)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    code, _, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        str(tmp_path / "p.yaml"),
        "-o",
        str(tmp_path / "m"),
        "--max_steps",
        "1",
    )
    assert code == 0, err
    written = yaml.safe_load((tmp_path / "m" / "train" / "params_train.yaml").read_text())
    opt, rc = written["optimizer"], written["runconfig"]
    assert (
        opt["initial_loss_scale"],
        opt["max_loss_scale"],
        opt["min_loss_scale"],
        opt["overflow_tolerance"],
        opt["steps_per_increase"],
    ) == (2.0**15, 2.0**15, 2.0**-14, 0.05, 2000)
    assert (rc["save_summary_steps"], rc["log_step_count_steps"], rc["log_steps"]) == (10, 100, 100)


def test_unknown_keys_are_not_written_back(capsys, tmp_path):
    """An ignored key (here aliases within the limits) is not re-serialized."""
    text = (
        Path(FC_SMALL)
        .read_text()
        .replace("runconfig:\n", "runconfig:\n    junk: &a [1, 2, 3]\n    junk2: [*a, *a, *a]\n")
    )
    (tmp_path / "p.yaml").write_text(text)
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        str(tmp_path / "p.yaml"),
        "-o",
        str(tmp_path / "m"),
        "--max_steps",
        "1",
    )
    assert code == 0, err
    assert "unknown key runconfig.junk ignored" in out
    written = (tmp_path / "m" / "train" / "params_train.yaml").read_text()
    assert "junk" not in written


def test_yaml_alias_bomb_is_refused_in_one_line_fast(capsys, tmp_path):
    import time

    lines = ["runconfig:", "    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):  # 9**10 nodes once expanded
        lines.append(f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    (tmp_path / "bomb.yaml").write_text(
        Path(FC_SMALL).read_text().replace("runconfig:", "\n".join(lines))
    )
    t0 = time.perf_counter()
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train",
        "-p",
        str(tmp_path / "bomb.yaml"),
        "-o",
        str(tmp_path / "m"),
    )
    assert time.perf_counter() - t0 < 10  # generous for a loaded CI host; it takes ~ms
    assert code == 1 and err.count("\n") == 1
    assert "(limit max_nodes)" in err and not (tmp_path / "m").exists()
