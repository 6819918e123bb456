"""BERT and LLaMA under csrun_wse, as the other models: input streamers feed the chief their
batches (BERT's masked-LM arrays included), the run trains on the CS-2 in the system's mode."""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.slow

NODES = ("--total-nodes", "3", "--tasks-per-node", "2", "--cpus-per-task", "16")


def test_bert_trains_pipelined_under_csrun_wse(cs2_system):
    work = cs2_system.model_copy("bert")
    result = cs2_system.csrun_wse(
        *NODES,
        "python",
        "run.py",
        "--mode",
        "train",
        "-p",
        "configs/params_tiny.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--max_steps",
        "6",
        "--save_checkpoints_steps",
        "3",
        cwd=work,
    )
    assert result.exit_code == 0, result.output[-3000:] + result.errors[-2000:]
    assert result.job.state == "COMPLETED"
    assert "Streamers are ready" in result.output
    assert re.search(r"Train Device=CSX, Step=\d+, Loss=", result.output)
    assert (result.model_dir / "model-ckpt-6.npz").is_file()


def test_llama_trains_in_weight_streaming_under_csrun_wse(cs2_system):
    cs2_system.put_in("ACTIVE", "WEIGHT_STREAMING")
    work = cs2_system.model_copy("llama")
    result = cs2_system.csrun_wse(
        *NODES,
        "--single-task-nodes",
        "2",
        "python-ws",
        "run.py",
        "--mode",
        "train",
        "-p",
        "configs/params_tiny.yaml",
        "-o",
        "model_dir",
        "--cs_ip",
        cs2_system.ip,
        "--max_steps",
        "4",
        cwd=work,
    )
    assert result.exit_code == 0, result.output[-3000:] + result.errors[-2000:]
    assert result.job.state == "COMPLETED"
    assert "Loading CPU pre-initialized weights took" in result.output
    assert (result.model_dir / "model-ckpt-4.npz").is_file()
