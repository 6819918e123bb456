"""The shipped BERT tiny config learns on a user's CSV, not only on its stand-in data.

The data: 8 topics of 4 cased words; a row's first segment is words of one topic, its second the
same topic (is_random_next 0) or another (1), rows of 20-61 tokens padded to 64. A masked word's
topic is in its context, so a model that reads the context gets the masked-LM loss from ln 32
(the unigram) towards ln 4 and the next-sentence loss from ln 2 towards 0; one that does not
stays at ln 32 + ln 2 = 4.16, where the config's former learning rate of 2e-3 left it.
"""

from __future__ import annotations

import csv
import math
import random
import re
from pathlib import Path

import pytest
import yaml

from cs2sim.runtime.cli.main import main

TINY = Path(__file__).parents[2] / "runtime" / "modelzoo" / "bert" / "configs" / "params_tiny.yaml"
WORDS = [f"W{i}" for i in range(32)]


def write_topic_csv(d: Path, rows: int = 1000) -> None:
    d.mkdir()
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    rng = random.Random(0)
    with open(d / "part0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens", "segment_ids", "is_random_next"])
        for _ in range(rows):
            n, topic = rng.randint(20, 61), rng.randrange(8)
            a = rng.randint(5, n - 5)
            rnd = rng.random() < 0.5
            other = (topic + rng.randrange(1, 8)) % 8 if rnd else topic
            first = [WORDS[4 * topic + rng.randrange(4)] for _ in range(a)]
            second = [WORDS[4 * other + rng.randrange(4)] for _ in range(n - a)]
            toks = ["[CLS]", *first, "[SEP]", *second, "[SEP]"]
            w.writerow([repr(toks), repr([0] * (a + 2) + [1] * (n - a + 1)), int(rnd)])
    (d / "meta.dat").write_text(f"part0.csv {rows}\n")


@pytest.mark.slow
def test_tiny_config_learns_on_a_user_csv(tmp_path, capsys):
    data = tmp_path / "csv"
    write_topic_csv(data)
    params = yaml.safe_load(TINY.read_text())
    for section in ("train_input", "eval_input"):
        params[section].pop("stand_in_data", None)
        params[section].update(
            data_processor="BertCSVDynamicMaskDataProcessor",
            data_dir=str(data),
            vocab_file=str(data / "vocab.txt"),
        )
    # 250 steps: the loss leaves the plateau at ~100 and is 2.0 at 200, 1.6 at 250 (1.4 at 400;
    # the run is deterministic); at the former learning rate it stays at 4.16 to step 600
    params["runconfig"].update(max_steps=250, log_steps=25, checkpoint_steps=250)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    model_dir = tmp_path / "model_dir"
    code = main("bert", ["-m", "train", "-p", str(path), "-o", str(model_dir)])
    out, err = capsys.readouterr()
    assert code == 0, err
    log = next(model_dir.glob("run_*.log")).read_text()
    losses = [float(x) for x in re.findall(r"Step=\d+, Loss=([0-9.]+)", log)]
    assert len(losses) == 10, log
    stuck = math.log(32) + math.log(2)  # 4.16: the unigram and a coin
    assert losses[0] > stuck - 0.5  # it starts there ...
    assert max(losses[-2:]) < 3.0, losses  # ... and leaves it (2.0 and 1.6 seen at 225, 250)
