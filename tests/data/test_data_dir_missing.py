"""A data_dir that does not exist (a typo, or a published config's placeholder) stops the run in
one sentence naming it and both ways out, on the host, under csrun_wse and through run.py CSX;
`stand_in_data: True` (the shipped small configs) trains on the stand-in data as asked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from cs2sim.runtime.cli.main import main, model_home

FIX = "or add `stand_in_data: True` to train_input to train on stand-in data."


def misspelt(work: Path, typo: str) -> Path:
    """configs/params_tiny.yaml of a model copy, its data_dir misspelt and stand_in_data gone."""
    with open(work / "configs" / "params_tiny.yaml") as f:
        doc = yaml.safe_load(f)
    for section in ("train_input", "eval_input"):
        doc[section].pop("stand_in_data", None)
        doc[section]["data_dir"] = typo
    path = work / "configs" / "typo.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def said(text: str, typo: str) -> bool:
    return f"train_input.data_dir {typo} does not exist; point train_input.data_dir" in text and (
        FIX in text
    )


def test_on_the_host_a_misspelt_data_dir_is_one_sentence(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    (tmp_path / "gpt2" / "configs").mkdir(parents=True)
    (tmp_path / "gpt2" / "configs" / "params_tiny.yaml").write_text(
        (model_home("gpt2") / "configs" / "params_tiny.yaml").read_text()
    )
    typo = str(tmp_path / "inptu" / "tiny")
    cfg = misspelt(tmp_path / "gpt2", typo)
    code = main("gpt2", ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md")])
    out, err = capsys.readouterr()
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert said(err, typo), err
    assert not (tmp_path / "md" / "model-ckpt-0.npz").exists()
    # the same config asking for stand-in data trains on it
    cfg.write_text(cfg.read_text().replace("data_dir:", "stand_in_data: true\n  data_dir:"))
    code = main(
        "gpt2", ["-m", "train", "-p", str(cfg), "-o", str(tmp_path / "md2"), "--max_steps", "1"]
    )
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    assert "Training data: STAND-IN data" in out + err


@pytest.mark.slow  # a csrun_wse job on the embedded cluster
def test_under_csrun_wse_the_job_fails_with_the_sentence(cs2_system):
    work = cs2_system.model_copy("gpt2")
    typo = str(work / "inptu" / "tiny")
    cfg = misspelt(work, typo)
    result = cs2_system.csrun_wse(
        "python", "run.py", "--mode", "train", "-p", str(cfg), "-o", "md",
        "--cs_ip", cs2_system.ip, "--max_steps", "2", cwd=work,
    )  # fmt: skip
    text = result.output + result.errors
    assert result.exit_code != 0, text[-3000:]
    assert said(text, typo), text[-3000:]
    assert "Traceback" not in text and "STAND-IN" not in text


@pytest.mark.slow  # a wsjob on the appliance
def test_through_run_py_csx_the_job_fails_with_the_sentence(cs2_appliance):
    work = cs2_appliance.system.model_copy("gpt2")
    typo = str(work / "inptu" / "tiny")
    cfg = misspelt(work, typo)
    res = cs2_appliance.run_csx(work, "-p", str(cfg), "--mode", "train", "-o", "md")
    assert res.exit_code != 0, res.combined[-3000:]
    dirs = re.findall(r"remote log path: (\S+)", res.combined)  # compile, then execute job
    assert len(dirs) == 2, res.combined[-3000:]
    logs = "".join(p.read_text(errors="replace") for p in Path(dirs[1]).rglob("*") if p.is_file())
    assert said(res.combined + logs, typo), (res.combined + logs)[-4000:]
    assert "Traceback" not in res.combined
