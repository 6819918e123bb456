"""The trainer format is the legacy params in another spelling: every shipped and published
legacy config converted with `cszoo config convert_legacy` has the same effective params, and
the small ones train on the host with the same weights and losses, bit for bit; run.py takes
the converted file too; the trainer sections refuse unknown keys with a did-you-mean and check
ranges with the legacy keys' own checks."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from cs2sim.runtime import registry
from cs2sim.runtime.cli.main import main as run_py
from cs2sim.runtime.numerics.schedules import build_schedule
from cs2sim.runtime.params import load_params, validate_params
from cs2sim.runtime.trainer_format.convert import to_legacy
from cs2sim.runtime.zoo.tables import configs_of
from cs2sim.scripts.cszoo import main as cszoo
from cs2sim.system.errors import ConfigError

PUBLISHED = Path(__file__).parents[1] / "modelzoo" / "configs"
# published file name -> model (GPT-3 is the GPT-2 architecture at another size, as in Model Zoo)
PUBLISHED_MODEL = {
    "fc": "fc_mnist",
    "gpt2": "gpt2",
    "gpt3": "gpt2",
    "gptj": "gptj",
    "bert": "bert",
    "llama": "llama",
}
SHIPPED = [(m, p) for m in registry.names() for p in configs_of(m)]
VARIANT_MODEL = {"classifier": "bert_classifier", "sst2": "bert_classifier", "roberta": "bert",
                 "llama2": "llama", "bert": "bert"}  # fmt: skip


def _variant_model(name: str) -> str:
    return next(m for key, m in VARIANT_MODEL.items() if key in name)


ALL = (
    SHIPPED
    + [(PUBLISHED_MODEL[p.name.split("_")[0]], p) for p in sorted(PUBLISHED.glob("*.yaml"))]
    + [(_variant_model(p.name), p) for p in sorted((PUBLISHED / "variants").glob("*.yaml"))]
)
# spellings the trainer form has one of: the TF aliases become the canonical key
ALIASES = {
    "runconfig.tf_random_seed",
    "runconfig.save_checkpoints_steps",
    "runconfig.log_step_count_steps",
    "runconfig.save_summary_steps",
}
SMALL = [(m, p) for m, p in SHIPPED if "tiny" in p.name or m == "fc_mnist"]


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cszoo(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def convert(capsys, path: Path, model: str, out: Path) -> tuple[Path, str]:
    code, text, err = run(
        capsys, "config", "convert_legacy", str(path), "-o", str(out), "--model", model
    )
    assert code == 0, err
    dest = out / f"{path.stem}_v2.yaml"
    assert f"Saving converted config to {dest}." in text
    return dest, text


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        out.update(
            _flat(v, key + ".") if isinstance(v, dict) and k != "learning_rate" else {key: v}
        )
    return out


@pytest.mark.parametrize(("model", "path"), ALL, ids=[f"{m}-{p.name}" for m, p in ALL])
def test_convert_legacy_keeps_every_effective_value(capsys, tmp_path, model, path):
    dest, text = convert(capsys, path, model, tmp_path)
    raw = yaml.safe_load(dest.read_text())
    assert raw["trainer"]["init"]["device"] == "CSX"  # as Model Zoo's convert_legacy
    assert raw["trainer"]["init"]["model"]["name"] == model
    noted = set(re.findall(r"^note: (\S+) ", text, re.M))
    before, _ = validate_params(load_params(path), model, source=str(path))
    after, _ = validate_params(to_legacy(load_params(dest), model).legacy, model)
    a, b = _flat(before), _flat(after)
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    if "optimizer.learning_rate" in changed:  # Linear -> LinearLR: the same schedule
        lr = "optimizer.learning_rate"
        reset = bool(a.get("optimizer.disable_lr_steps_reset"))
        fa, fb = (build_schedule(x[lr], disable_lr_steps_reset=reset) for x in (a, b))
        top = int(a["runconfig.max_steps"] or 10_000)
        steps = sorted({0, 1, 2, 999, 1000, 1999, 2000, 2001, 10_000, top - 1, top})
        assert [fa(t) for t in steps] == [fb(t) for t in steps]
        changed.remove(lr)
    # the trainer form always names its model (informational in the model section)
    assert changed <= ALIASES | noted | {"runconfig.log_steps", "model.name"}, sorted(changed)
    if "runconfig.log_steps" in changed:  # a TF file's console interval, read as log_steps
        assert {"runconfig.log_step_count_steps", "runconfig.save_summary_steps"} & a.keys()
    assert b["runconfig.max_steps"] == a["runconfig.max_steps"]
    # converting the converted file is refused politely
    code, out, _ = run(capsys, "config", "convert_legacy", str(dest), "-o", str(tmp_path))
    assert code == 0 and "is not a legacy config" in out


def final(model_dir: Path) -> tuple[int, dict[str, np.ndarray]]:
    ckpts = sorted(model_dir.glob("model-ckpt-*.npz"), key=lambda p: int(p.stem.split("-")[-1]))
    with np.load(ckpts[-1]) as f:
        return int(ckpts[-1].stem.split("-")[-1]), {
            k: f[k] for k in f.files if k.startswith("model/")
        }


LOSS = re.compile(r"(\| Train Device=\S+ Step=\d+, Loss=\S+|Loss for final step: \S+)")


@pytest.mark.slow
@pytest.mark.parametrize(("model", "path"), SMALL, ids=[f"{m}-{p.name}" for m, p in SMALL])
def test_converted_config_trains_bit_identically_on_the_host(
    capsys, tmp_path, monkeypatch, model, path
):
    monkeypatch.chdir(tmp_path)
    assert run_py(model, ["-p", str(path), "-m", "train", "-o", "legacy", "--max_steps", "3"]) == 0
    legacy_out = capsys.readouterr().out
    dest, _ = convert(capsys, path, model, tmp_path)
    raw = yaml.safe_load(dest.read_text())
    raw["trainer"]["init"]["loop"]["max_steps"] = 3
    raw["trainer"]["fit"].pop("val_dataloader", None)  # fit without validation: train only
    dest.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, out, err = run(capsys, "fit", str(dest), "--target_device", "CPU", "-o", "trainer")
    assert code == 0, out + err
    a, b = final(tmp_path / "legacy"), final(tmp_path / "trainer")
    assert a[0] == b[0] == 3
    assert a[1].keys() == b[1].keys()
    assert all(np.array_equal(a[1][k], b[1][k]) for k in a[1])
    assert LOSS.findall(legacy_out) == LOSS.findall(out) != []
    # run.py takes the trainer file as it is (today's: "unknown section 'trainer'")
    assert run_py(model, ["-p", str(dest), "-m", "train", "-o", "runpy"]) == 0
    capsys.readouterr()
    c = final(tmp_path / "runpy")
    assert all(np.array_equal(a[1][k], c[1][k]) for k in a[1])


def trainer_file(tmp_path: Path, init: dict) -> Path:
    base = yaml.safe_load(
        (configs_of("gpt2")[-1]).read_text()  # params_tiny.yaml, in the trainer form below
    )
    assert base["model"]["hidden_size"] == 64
    params = {
        "trainer": {
            "init": {"model": {"name": "gpt2", **base["model"]}, **init},
            "fit": {"train_dataloader": base["train_input"]},
        }
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_unknown_key_in_trainer_init_is_refused_with_did_you_mean(capsys, tmp_path):
    path = trainer_file(
        tmp_path,
        {
            "optimizer": {"SGD": {}},
            "schedulers": [{"ConstantLR": {"learning_rate": 0.1}}],
            "loop": {"max_step": 3},
        },
    )
    code, out, err = run(
        capsys, "fit", str(path), "--target_device", "CPU", "-o", str(tmp_path / "m")
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert "unknown key trainer.init.loop.max_step (did you mean max_steps?)" in err
    path = trainer_file(tmp_path, {"chekpoint": {"steps": 1}})
    with pytest.raises(
        ConfigError, match=r"trainer\.init\.chekpoint \(did you mean checkpoint\?\)"
    ):
        to_legacy(load_params(path), "gpt2")
    assert not (tmp_path / "m").exists()


def test_trainer_values_are_checked_with_the_legacy_keys_checks(tmp_path):
    path = trainer_file(tmp_path, {"loop": {"max_steps": -2}})
    with pytest.raises(ConfigError, match=r"trainer\.init\.loop\.max_steps must be >= 0, not -2"):
        to_legacy(load_params(path), "gpt2")
    path = trainer_file(tmp_path, {"callbacks": [{"KeepNCheckpoints": {"n": -1}}]})
    with pytest.raises(ConfigError, match=r"trainer\.init\.callbacks\.KeepNCheckpoints\.n must be"):
        to_legacy(load_params(path), "gpt2")
    path = trainer_file(tmp_path, {"callbacks": [{"KeepNCheckpoint": {"n": 1}}]})
    with pytest.raises(ConfigError, match=r"did you mean KeepNCheckpoints\?"):
        to_legacy(load_params(path), "gpt2")
    with pytest.raises(ConfigError, match=r"is 'gpt2', but this is the run.py of 'llama'"):
        to_legacy(load_params(trainer_file(tmp_path, {})), "llama")


def test_the_docs_table_is_the_table():
    from cs2sim.runtime.trainer_format.rows import ROWS, SECTIONS

    doc = (Path(__file__).parents[2] / "docs" / "modelzoo-today.md").read_text()
    rows = re.findall(r"^\| `trainer\.([^`]+)` \|", doc, re.M)
    assert rows == [".".join(r.trainer) for r in ROWS] + [".".join(t) for t, _ in SECTIONS]


def test_a_validate_only_file_needs_no_optimizer_and_fit_needs_schedulers(tmp_path):
    base = yaml.safe_load(configs_of("gpt2")[-1].read_text())
    model = {"name": "gpt2", **base["model"]}
    only = {
        "trainer": {"init": {"model": model}, "validate": {"val_dataloader": base["eval_input"]}}
    }
    legacy = to_legacy(only, "gpt2", method="validate").legacy
    params, _ = validate_params(legacy, "gpt2")
    assert params["eval_input"]["batch_size"] == base["eval_input"]["batch_size"]
    fit = {"trainer": {"init": {"model": model}, "fit": {"train_dataloader": base["train_input"]}}}
    with pytest.raises(ConfigError, match=r"trainer\.init\.schedulers is required to train"):
        to_legacy(fit, "gpt2")
