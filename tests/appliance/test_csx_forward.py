"""What the job says reaches the user: its WARNING and ERROR lines are forwarded to the client's
terminal in order, and a failed job's own one-sentence reason is the client's last line."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server


def _params(model: Path, name: str, edit) -> str:
    import yaml

    raw = yaml.safe_load((model / "configs" / "params_small.yaml").read_text())
    edit(raw)
    (model / "configs" / name).write_text(yaml.safe_dump(raw))
    return f"configs/{name}"


def test_a_stand_in_data_warning_reaches_the_client_in_order(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")

    def no_data(raw):  # no data_dir at all (a misspelt one is an error: test_data_dir_missing)
        raw["train_input"].pop("data_dir", None)
        raw["train_input"].pop("stand_in_data")

    params = _params(model, "no_data.yaml", no_data)
    res = cs2_appliance.run_csx(
        model, "-p", params, "--mode", "train", "-o", "md", "--max_steps", "20"
    )
    assert res.exit_code == 0, res.combined
    lines = res.output.splitlines()
    warned = [
        i
        for i, line in enumerate(lines)
        if " WARNING:" in line and "train_input has no data_dir" in line and "STAND-IN data" in line
    ]
    assert len(warned) == 1, res.output  # once, though the job's log is every task's
    # where the job said it: after the execute job began, before its first step
    first_step = next(i for i, line in enumerate(lines) if "| Train Device=CSX" in line)
    execute = next(i for i, line in enumerate(lines) if "execute job id:" in line)
    assert execute < warned[0] < first_step


def test_a_data_errors_sentence_is_the_clients_last_line(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    (model / "notmnist").mkdir()
    (model / "notmnist" / "notes.txt").write_text("not MNIST\n")

    def wrong(raw):
        raw["train_input"]["data_dir"] = "./notmnist"

    params = _params(model, "wrong.yaml", wrong)
    res = cs2_appliance.run_csx(
        model, "-p", params, "--mode", "train", "-o", "md", "--max_steps", "20"
    )
    assert res.exit_code == 1, res.combined
    last = res.combined.strip().splitlines()[-1]
    assert "FAILED: train_input.data_dir ./notmnist holds no MNIST IDX files" in last, last
    assert "point data_dir at MNIST IDX files" in last
    assert "exited with code" not in last
    # forwarded as the job said it, too (an ERROR line before the last)
    assert any(
        " ERROR:" in line and "holds no MNIST IDX files" in line
        for line in res.combined.splitlines()[:-1]
    ), res.combined
