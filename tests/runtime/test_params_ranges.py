"""Params with a physical range are refused with one sentence naming the key
(without the range checks, each of these would start training or fail with an internal error)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from cs2sim.runtime.cli.main import model_home

FC = model_home("fc_mnist")


def _run(
    tmp_path, section: str, key: str, value: object, *extra: str
) -> subprocess.CompletedProcess[str]:
    doc = yaml.safe_load((FC / "configs" / "params_small.yaml").read_text())
    doc[section][key] = value
    doc["runconfig"]["max_steps"] = 2
    cfg = tmp_path / "params.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    return subprocess.run(
        [
            sys.executable,
            str(FC / "run.py"),
            "-p",
            str(cfg),
            "-m",
            "train",
            "-o",
            str(tmp_path / "md"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.parametrize(
    ("section", "key", "value", "names"),
    [
        ("runconfig", "seed", -1, "runconfig.seed"),
        ("optimizer", "weight_decay_rate", 1e30, "optimizer.weight_decay_rate"),
        ("optimizer", "epsilon", 0, "optimizer.epsilon"),
        ("optimizer", "min_loss_scale", 2.0**40, "optimizer.min_loss_scale"),
        ("optimizer", "steps_per_increase", 1e15, "optimizer.steps_per_increase"),
        ("runconfig", "cs_ip", "a b", "runconfig.cs_ip"),
    ],
)
def test_out_of_range_params_are_refused_naming_the_key(tmp_path, section, key, value, names):
    res = _run(tmp_path, section, key, value)
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and names in errors[0], res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    assert not list((tmp_path / "md").glob("model-ckpt-*"))  # nothing trained


@pytest.mark.slow
def test_runconfig_cs_ip_in_the_yaml_is_honoured_like_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    res = _run(tmp_path, "runconfig", "cs_ip", "abc")  # no such system: refused, as --cs_ip abc
    assert res.returncode != 0 and "names no CS-2 system" in res.stderr, res.stderr
    res = _run(tmp_path, "runconfig", "cs_ip", "127.0.1.1")  # the default cluster's system
    assert res.returncode == 0, res.stderr
    assert "runconfig.cs_ip of the params file" in res.stdout + res.stderr
    assert "Programming CS-2 fabric" in res.stdout + res.stderr  # it ran on the CS-2
