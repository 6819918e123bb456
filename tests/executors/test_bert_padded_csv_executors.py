"""BERT on a padded CSV (rows of 20-61 tokens in sequences of 64) on every executor: the
replicas each CS-2 executor makes of the model carry the batch's attention_mask to their own
encoder, so the losses equal the host's (test_bert_llama_accumulation.py's tolerance)."""

from __future__ import annotations

import csv
import random
from pathlib import Path

import numpy as np
import pytest
from exec_helpers import trainer

from cs2sim.runtime.executors.pipelined import PipelinedExecutor
from cs2sim.runtime.executors.weight_streaming import WeightStreamingExecutor


def write_csv(d: Path, rows: int) -> None:
    """Rows [CLS] A [SEP] B [SEP] of 20-61 random words of 16, with meta.dat."""
    d.mkdir()
    words = [f"w{i}" for i in range(16)]
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
    rng = random.Random(0)
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens", "segment_ids", "is_random_next"])
        for i in range(rows):
            n = rng.randint(20, 61)
            a = rng.randint(5, n - 5)
            toks = ["[CLS]", *rng.choices(words, k=a), "[SEP]", *rng.choices(words, k=n - a)]
            w.writerow([repr([*toks, "[SEP]"]), repr([0] * (a + 2) + [1] * (n - a + 1)), i % 2])
    (d / "meta.dat").write_text(f"part0.csv {rows}\n")


EXECUTORS = {"pipelined": PipelinedExecutor, "ws2": lambda: WeightStreamingExecutor(2)}


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_padded_bert_csv_matches_the_host_on_every_executor(tmp_path, name):
    data = tmp_path / "csv"
    write_csv(data, rows=64)
    run = {
        "runconfig__max_steps": 3,
        "runconfig__log_steps": 1,
        "runconfig__checkpoint_steps": 0,
        "train_input__batch_size": 8,
        "train_input__stand_in_data": False,
        "train_input__data_processor": "BertCSVDynamicMaskDataProcessor",
        "train_input__data_dir": str(data),
        "train_input__vocab_file": str(data / "vocab.txt"),
        "model__dropout_rate": 0.1,
    }
    losses = {}
    for who, ex in (("cpu", None), (name, EXECUTORS[name]())):
        result = trainer("bert", tmp_path / who, ex, **run).train()
        losses[who] = [result.losses[s] for s in sorted(result.losses)]
    assert len(losses["cpu"]) == 3 and losses["cpu"][0] != losses["cpu"][1]
    np.testing.assert_allclose(losses[name], losses["cpu"], rtol=1e-5, atol=0)
