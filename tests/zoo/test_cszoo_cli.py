"""`cszoo` as a user types it: a trainer-format config written here from the Model Zoo's
published schema (the layout of its params_gpt2_*.yaml: backend, AdamW, SequentialLR of LinearLR
and CosineDecayLR, precision, loop, checkpoint, logging, GptHDF5DataProcessor dataloaders)
trains through `cszoo fit` on data made by `cszoo data_preprocess run`, and `cszoo validate`
resumes from its checkpoint; the table-driven subcommands; usage errors exit 2."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cs2sim.runtime import registry
from cs2sim.runtime.data.processors import PROCESSORS
from cs2sim.runtime.zoo.tables import configs_of
from cs2sim.scripts.cszoo import main as cszoo

TEXT = (
    "The wafer-scale engine trains a model on one chip. Its weights stream from memory.\n\n"
    "A cluster of systems shares one management server, which schedules the jobs in order.\n\n"
)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cszoo(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def published_gpt2(tmp_path: Path, data: Path) -> Path:
    """The Model Zoo's gpt2 trainer config, at toy size (written here, key by key)."""
    loader = {
        "data_processor": "GptHDF5DataProcessor",
        "data_dir": str(data),
        "shuffle": False,
        "shuffle_seed": 1,
        "batch_size": 4,
        "num_workers": 0,
        "prefetch_factor": 10,
        "persistent_workers": True,
    }
    params = {
        "trainer": {
            "init": {
                "backend": {"backend_type": "CPU"},
                "model_dir": "./model_dir",
                "seed": 1,
                "model": {
                    "name": "gpt2",
                    "vocab_size": 50257,
                    "hidden_size": 32,
                    "position_embedding_type": "learned",
                    "share_embedding_weights": True,
                    "max_position_embeddings": 64,
                    "num_hidden_layers": 2,
                    "dropout_rate": 0.0,
                    "layer_norm_epsilon": 1.0e-5,
                    "num_heads": 2,
                    "attention_type": "scaled_dot_product",
                    "attention_dropout_rate": 0.0,
                    "use_projection_bias_in_attention": True,
                    "use_ffn_bias_in_attention": True,
                    "filter_size": 128,
                    "nonlinearity": "gelu",
                    "use_ffn_bias": True,
                    "use_bias_in_output": False,
                    "loss_scaling": "num_tokens",
                    "loss_weight": 1.0,
                },
                "optimizer": {
                    "AdamW": {
                        "betas": [0.9, 0.999],
                        "eps": 1.0e-8,
                        "correct_bias": True,
                        "weight_decay": 0.01,
                    }
                },
                "schedulers": [
                    {
                        "SequentialLR": {
                            "schedulers": [
                                {
                                    "LinearLR": {
                                        "initial_learning_rate": 0.0,
                                        "end_learning_rate": 1.0e-3,
                                        "total_iters": 2,
                                    }
                                },
                                {
                                    "CosineDecayLR": {
                                        "initial_learning_rate": 1.0e-3,
                                        "end_learning_rate": 1.0e-4,
                                        "total_iters": 4,
                                    }
                                },
                            ]
                        }
                    }
                ],
                "precision": {"enabled": False, "max_gradient_norm": 1.0},
                "loop": {"max_steps": 4, "eval_frequency": 2, "eval_steps": 2},
                "checkpoint": {"steps": 2},
                "logging": {"log_steps": 1},
            },
            "fit": {"train_dataloader": loader, "val_dataloader": loader},
            "validate": {"val_dataloader": loader},
            "validate_all": {"val_dataloaders": loader},
        }
    }
    path = tmp_path / "params_gpt2_toy.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.mark.slow
def test_published_schema_fits_then_validate_resumes_from_its_checkpoint(capsys, tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_text(TEXT * 40)
    code, out, _ = run(capsys, "data_preprocess", "pull", "gpt2_tiny_hdf5", "-o", str(tmp_path))
    assert code == 0
    pre = yaml.safe_load((tmp_path / "gpt2_tiny_hdf5.yaml").read_text())
    pre["setup"] |= {"input_dir": str(tmp_path / "raw"), "output_dir": str(tmp_path / "h5")}
    (tmp_path / "gpt2_tiny_hdf5.yaml").write_text(yaml.safe_dump(pre))
    code, out, err = run(
        capsys, "data_preprocess", "run", "--config", str(tmp_path / "gpt2_tiny_hdf5.yaml")
    )
    assert code == 0, err
    assert re.search(r"Wrote \d+ samples", out)
    params = published_gpt2(tmp_path, tmp_path / "h5")
    md = tmp_path / "md"
    code, out, err = run(capsys, "fit", str(params), "-o", str(md))
    assert code == 0, out + err
    steps = [int(s) for s in re.findall(r"\| Train Device=cpu, Step=(\d+)", out)]
    assert steps == [1, 2, 3, 4]
    evals = re.findall(r"Avg Eval Loss: (\S+)", out)
    assert len(evals) == 2  # at eval_frequency (step 2) and at the end (step 4)
    assert sorted(p.name for p in md.glob("model-ckpt-*.npz")) == [
        "model-ckpt-2.npz",
        "model-ckpt-4.npz",
    ]
    code, out, err = run(capsys, "validate", str(params), "-o", str(md))
    assert code == 0, out + err
    assert "Train Device" not in out
    assert re.findall(r"Avg Eval Loss: (\S+)", out) == evals[-1:]  # the step-4 weights
    code, out, err = run(capsys, "validate_all", str(params), "-o", str(md))
    assert code == 0, out + err
    assert re.findall(r"Avg Eval Loss: (\S+)", out) == evals  # every checkpoint, in order


def test_model_and_data_processor_lists_are_the_tables(capsys):
    code, out, _ = run(capsys, "model", "list")
    assert code == 0
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert listed == registry.names()
    code, out, _ = run(capsys, "data_processor", "list")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == list(PROCESSORS)
    code, out, _ = run(capsys, "model", "info", "llama")
    assert code == 0 and "llama_tiny" in out and "num_heads" in out
    code, out, _ = run(capsys, "data_processor", "info", "GptHDF5DataProcessor")
    assert code == 0 and "HDF5" in out and "gpt2" in out
    code, out, err = run(capsys, "model", "info", "lama")
    assert code == 1 and out == "" and "did you mean llama?" in err


def test_config_pull_diff_and_stats(capsys, tmp_path):
    code, out, _ = run(capsys, "config", "pull", "gpt2_tiny", "-o", str(tmp_path))
    assert code == 0
    pulled = tmp_path / "params_tiny.yaml"
    shipped = next(p for p in configs_of("gpt2") if p.name == "params_tiny.yaml")
    assert pulled.read_bytes() == shipped.read_bytes()
    code, out, err = run(capsys, "config", "pull", "tiny")  # in several models
    assert code == 1 and "gpt2_tiny" not in out and "<model>_<variant>" in err
    code, out, _ = run(capsys, "config", "diff", str(pulled), str(shipped))
    assert code == 0 and out.strip() == "Configs are identical."
    changed = tmp_path / "changed.yaml"
    raw = yaml.safe_load(pulled.read_text())
    raw["model"]["num_heads"] = 4
    raw["runconfig"]["max_steps"] = 7
    del raw["runconfig"]["seed"]
    changed.write_text(yaml.safe_dump(raw))
    code, out, _ = run(capsys, "config", "diff", str(pulled), str(changed))
    assert code == 0
    assert "Removed:\n  runconfig.seed: 1" in out
    assert "  model.num_heads: 2 -> 4" in out and "  runconfig.max_steps: 300 -> 7" in out
    code, out, _ = run(capsys, "config", "stats", str(pulled))
    assert code == 0
    total = int(re.search(r"^Total\s+([\d,]+)", out, re.M).group(1).replace(",", ""))
    from cs2sim.runtime.compiler.graph import build_meta_model
    from cs2sim.runtime.zoo.configs import effective

    _, params, _, _ = effective(pulled)
    assert total == build_meta_model("gpt2", params, "float32").num_params()
    assert re.search(r"^h1\.mlp\.fc\s+dense\s+16,640", out, re.M)  # 64 x 256 + 256


def test_usage_errors_exit_2_and_the_command_is_installed(tmp_path):
    exe = Path(sys.executable).with_name("cszoo")
    res = subprocess.run([str(exe), "fit"], capture_output=True, text=True)
    assert res.returncode == 2 and "usage: cszoo fit" in res.stderr
    res = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    for sub in (
        "fit",
        "validate",
        "validate_all",
        "model",
        "data_processor",
        "config",
        "data_preprocess",
        "checkpoint",
    ):
        assert sub in res.stdout
    res = subprocess.run(
        [str(exe), "fit", str(tmp_path / "none.yaml")], capture_output=True, text=True
    )
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "not found" in res.stderr
