"""The Model Zoo's TF fc_mnist ran Keras mixed_float16 whatever its config said; its published
config (no mixed_precision key) trains in float16 in the TF flow, float32 under python-pt, and
an explicit key wins."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cs2sim.runtime.cli.main import main
from cs2sim.runtime.numerics.mixed_precision import resolve_precision
from cs2sim.runtime.params import load_params, validate_params

TF = Path(__file__).resolve().parents[1] / "modelzoo" / "configs" / "fc_mnist_tf.yaml"


@pytest.mark.parametrize(("flow", "half"), [("", "float16"), ("pt", "float32")])
def test_published_tf_config_precision_follows_the_flow(monkeypatch, flow, half):
    monkeypatch.setenv("CS2SIM_FLOW", flow)
    params, _ = validate_params(load_params(TF), "fc_mnist", source=str(TF))
    assert resolve_precision(params)[0] == half


def test_explicit_key_wins_and_a_run_uses_float16(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    doc = yaml.safe_load(TF.read_text())
    doc["model"]["mixed_precision"] = False
    (tmp_path / "f32.yaml").write_text(yaml.safe_dump(doc))
    params, _ = validate_params(load_params(tmp_path / "f32.yaml"), "fc_mnist")
    assert resolve_precision(params)[0] == "float32"
    md = tmp_path / "md"
    doc = yaml.safe_load(TF.read_text())  # as published, asking for stand-in data: its
    doc["train_input"]["stand_in_data"] = True  # ./tfds is a placeholder (an error otherwise)
    (tmp_path / "tf.yaml").write_text(yaml.safe_dump(doc))
    args = ["-m", "train", "-p", str(tmp_path / "tf.yaml"), "-o", str(md), "--max_steps", "2"]
    assert main("fc_mnist", args) == 0
    out = capsys.readouterr().out
    assert "trains in float16 as the Model Zoo's TF fc_mnist (Keras mixed_float16) did" in out
    written = yaml.safe_load((md / "train" / "params_train.yaml").read_text())
    assert written["model"]["mixed_precision"] is True
