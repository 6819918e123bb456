"""The Model Zoo compatibility suite: Cerebras' published params files, unchanged.

Every file in tests/modelzoo/configs/ (see PROVENANCE.md there) is loaded as published, through
the same run.py entry point a user runs; overrides are given on the command line only. Small
ones train a few steps; the ones sized for a CS-2 are refused on the host, before anything is
written, with the memory message, and the CS-2 compiler validates them and compiles them for
weight streaming (pipelined, the billion-parameter ones do not fit the wafer and say so).
No file may draw an "unknown key" warning: each key a published config uses is implemented or
accepted and documented (runtime/params.py).
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from cs2sim.runtime.cli.main import main
from cs2sim.runtime.params import load_params, validate_params

CONFIGS = Path(__file__).parent / "configs"
# file -> cs2sim model (GPT-3 is the GPT-2 architecture at another size, as in Model Zoo)
MODEL = {
    "fc_mnist_tf.yaml": "fc_mnist",
    "fc_mnist_pt.yaml": "fc_mnist",
    "gpt2_small_tf.yaml": "gpt2",
    "gpt2_small_pt.yaml": "gpt2",
    "gpt2_small_ws_tf.yaml": "gpt2",
    "gpt3_xl_tf.yaml": "gpt2",
    "gpt3_xl_pt.yaml": "gpt2",
    "gptj_6B_tf.yaml": "gptj",
    "gptj_6B_pt.yaml": "gptj",
    "bert_large_msl128_tf.yaml": "bert",
    "bert_base_msl128_pt.yaml": "bert",
    "llama_7b_pt.yaml": "llama",
}
SMALL = ("fc_mnist_tf.yaml", "fc_mnist_pt.yaml")
LARGE = tuple(f for f in MODEL if f not in SMALL)
# keys real Model Zoo files use that a schema could miss; they must be known
ISSUE_KEYS = (
    "model.allow_multireplica",
    "train_input.add_special_tokens",
    "eval_input.add_special_tokens",
    "train_input.use_multiple_workers",
)


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def run(capsys, model: str, *argv: str) -> tuple[int, str, str]:
    code = main(model, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_published_file_is_here_with_its_provenance():
    files = sorted(p.name for p in CONFIGS.glob("*.yaml"))
    assert files == sorted(MODEL)
    provenance = (CONFIGS / "PROVENANCE.md").read_text()
    for name in files:
        row = next(line for line in provenance.splitlines() if line.startswith(f"| {name} |"))
        assert re.search(
            r"\| (R|Release)_1\.\d+\.\d+ \([0-9a-f]{7}\) \| modelzoo/\S+\.yaml \|$", row
        ), row
    # the licence header is kept where the file was published with one
    licensed = [
        n for n in files if "Licensed under the Apache License" in (CONFIGS / n).read_text()
    ]
    assert len(licensed) == 7


@pytest.mark.parametrize("name", sorted(MODEL))
def test_loads_unchanged_without_unknown_key_warnings(name):
    params, warnings = validate_params(load_params(CONFIGS / name), MODEL[name], source=name)
    assert not [w for w in warnings if "unknown key" in w], warnings
    raw = yaml.safe_load((CONFIGS / name).read_text())
    for path in ISSUE_KEYS:
        section, key = path.split(".")
        if key in (raw.get(section) or {}):
            assert params[section][key] == raw[section][key]  # kept, typed, documented


@pytest.mark.parametrize("name", LARGE)
def test_large_configs_reach_the_memory_check_and_are_refused(capsys, tmp_path, name):
    md = tmp_path / "md"
    code, out, err = run(
        capsys, MODEL[name], "-m", "train", "-p", str(CONFIGS / name), "-o", str(md)
    )
    assert code == 1, (out, err)
    assert re.fullmatch(
        rf"error: Training {MODEL[name]} \([\d.]+[MB] parameters\) on the host needs about "
        r"\d+ GiB of memory but this machine has \d+ GiB; compile it for the CS-2 instead "
        r"\(--mode compile_only\), or run configs/\S+ or another smaller config on the host or "
        r"on the simulated CS-2 \(--cs_ip\)\.\n",
        err,
    ), err
    assert "must be a string" not in err and "unknown key" not in out
    assert f"Params file: {CONFIGS / name}" in out
    assert not md.exists()  # refused before anything was written


def _mnist_where_it_points(work: Path, name: str) -> None:
    """MNIST IDX files (random 28x28 images) in the directories the config names, under
    `work` (the published paths are placeholders: without data there they are an error)."""
    raw = yaml.safe_load((CONFIGS / name).read_text())
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(1200, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=1200, dtype=np.uint8)
    for section in ("train_input", "eval_input"):
        if not (raw.get(section) or {}).get("data_dir"):
            continue
        d = work / raw[section]["data_dir"]
        d.mkdir(parents=True, exist_ok=True)
        for stem, arr, magic in (
            ("train-images-idx3-ubyte", images, 0x803),
            ("train-labels-idx1-ubyte", labels, 0x801),
            ("t10k-images-idx3-ubyte", images[:600], 0x803),
            ("t10k-labels-idx1-ubyte", labels[:600], 0x801),
        ):
            head = struct.pack(">I", magic) + struct.pack(f">{arr.ndim}I", *arr.shape)
            (d / stem).write_bytes(head + arr.tobytes())


@pytest.mark.parametrize("name", SMALL)
def test_small_configs_refuse_their_placeholder_data_dir(capsys, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)  # the published relative data_dir does not exist here
    code, out, err = run(
        capsys, "fc_mnist", "-m", "train", "-p", str(CONFIGS / name), "-o", str(tmp_path / "md")
    )
    assert code == 1 and err.count("\n") == 1, err
    assert "does not exist; point train_input.data_dir at your data" in err
    assert "or add `stand_in_data: True` to train_input" in err


@pytest.mark.parametrize("name", SMALL)
def test_small_configs_train_a_few_steps(capsys, tmp_path, monkeypatch, name):
    md = tmp_path / "md"
    monkeypatch.chdir(tmp_path)
    _mnist_where_it_points(tmp_path, name)
    code, out, err = run(
        capsys,
        "fc_mnist",
        "-m",
        "train_and_eval",
        "-p",
        str(CONFIGS / name),
        "-o",
        str(md),
        "--max_steps",
        "3",
        "--eval_steps",
        "1",
    )
    assert code == 0, err
    assert "unknown key" not in out and "Evaluation completed successfully!" in out
    assert re.search(r"Training finished with \d+ samples", out)
    written = yaml.safe_load((md / "train" / "params_train.yaml").read_text())
    opt, rc = written["optimizer"], written["runconfig"]
    assert None not in (opt["initial_loss_scale"], opt["min_loss_scale"], opt["max_loss_scale"])
    assert (md / "model-ckpt-3.npz").is_file()
    if name == "fc_mnist_tf.yaml":
        # TF flow: summaries every 500 (save_summary_steps), console lines every 100
        assert (rc["save_summary_steps"], rc["log_steps"]) == (500, 100)
        # num_parallel_calls: 0 means AUTOTUNE (the file's own comment), not in-process
        assert "train_input.num_parallel_calls 0 is AUTOTUNE" in out
    else:
        assert (rc["save_summary_steps"], rc["log_steps"]) == (50, 50)


# -- the compiler validates and compiles them, unchanged ---------------------------------


@pytest.mark.parametrize("name", LARGE)
def test_large_configs_validate(capsys, tmp_path, name):
    code, out, err = run(
        capsys,
        MODEL[name],
        "-m",
        "validate_only",
        "-p",
        str(CONFIGS / name),
        "-o",
        str(tmp_path / "md"),
    )
    assert code == 0, err
    assert "unknown key" not in out


@pytest.mark.parametrize("name", LARGE)
@pytest.mark.slow
def test_large_configs_compile_for_weight_streaming(capsys, tmp_path, monkeypatch, name):
    monkeypatch.setenv("CS2SIM_FLOW", "ws")  # as `python-ws run.py ...`
    code, out, err = run(
        capsys,
        MODEL[name],
        "-m",
        "compile_only",
        "-p",
        str(CONFIGS / name),
        "-o",
        str(tmp_path / "md"),
    )
    assert code == 0, err
    assert list((tmp_path / "md").glob("cs_*/plan.json"))


@pytest.mark.parametrize("name", ["gpt3_xl_tf.yaml", "gptj_6B_pt.yaml"])
def test_pipelined_compile_of_billion_parameter_configs_says_use_weight_streaming(
    capsys, tmp_path, monkeypatch, name
):
    monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    code, out, err = run(
        capsys,
        MODEL[name],
        "-m",
        "compile_only",
        "-p",
        str(CONFIGS / name),
        "-o",
        str(tmp_path / "md"),
    )
    assert code != 0 and err.count("\n") == 1
    assert "of on-wafer memory in pipelined mode" in err and "python-ws" in err, err
