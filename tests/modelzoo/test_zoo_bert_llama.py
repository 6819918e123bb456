"""BERT's and LLaMA's published Model Zoo configs: unchanged, no unknown key, compiled in the
mode they belong to (BERT and its fine-tuning classifiers pipelined, as every site ran them in
the csrun_wse era; the weight-streaming BERT variants and LLaMA for weight streaming), and the
vocab_file fallback.

The three files of tests/modelzoo/configs/ and the further published variants in
configs/variants/ (weight-streaming BERT, RoBERTa, the fine-tuning classifiers' BERT encoder,
LLaMA-2 with grouped-query attention) are byte-for-byte copies from Cerebras/modelzoo:
VARIANTS names each with its release and path (PROVENANCE.md has the commits).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cs2sim.runtime.cli.main import main
from cs2sim.runtime.params import load_params, validate_params

HERE = Path(__file__).parent / "configs"
VARIANT_DIR = HERE / "variants"
# file in configs/variants -> (model, mode it belongs to, release:path in Cerebras/modelzoo)
VARIANTS = {
    "bert_large_msl128_pt.yaml": (
        "bert",
        "pipelined",
        "R_1.7.1:modelzoo/transformers/pytorch/bert/configs/bert_large_MSL128.yaml",
    ),
    "bert_large_msl128_ws_pt.yaml": (
        "bert",
        "ws",
        "Release_1.8.0:modelzoo/transformers/pytorch/bert/configs/bert_large_MSL128_ws.yaml",
    ),
    "bert_base_msl128_tf.yaml": (
        "bert",
        "pipelined",
        "R_1.7.1:modelzoo/transformers/tf/bert/configs/params_bert_base_msl128.yaml",
    ),
    "roberta_base_pt.yaml": (
        "bert",
        "pipelined",
        "R_1.7.1:modelzoo/transformers/pytorch/bert/configs/roberta_base.yaml",
    ),
    "roberta_base_msl512_tf.yaml": (
        "bert",
        "pipelined",
        "R_1.7.1:modelzoo/transformers/tf/bert/configs/params_roberta_base_msl512.yaml",
    ),
    "bert_base_classifier_sst2_pt.yaml": (
        "bert_classifier",
        "pipelined",
        "R_1.7.1:modelzoo/"
        "transformers/pytorch/bert/fine_tuning/classifier/"
        "configs/bert_base_classifier_sst2.yaml",
    ),
    "bert_base_classifier_mnli_pt.yaml": (
        "bert_classifier",
        "pipelined",
        "R_1.7.1:modelzoo/"
        "transformers/pytorch/bert/fine_tuning/classifier/"
        "configs/bert_base_classifier_mnli.yaml",
    ),
    "bert_base_sst2_tf.yaml": (
        "bert_classifier",
        "pipelined",
        "R_1.7.1:modelzoo/transformers/"
        "tf/bert/fine_tuning/classifier/configs/"
        "params_bert_base_sst2.yaml",
    ),
    "llama2_7b_pt.yaml": (
        "llama",
        "ws",
        "Release_2.0.2:modelzoo/transformers/pytorch/llama/configs/params_llama2_7b.yaml",
    ),
    "llama2_70b_pt.yaml": (
        "llama",
        "ws",
        "Release_2.0.2:modelzoo/transformers/pytorch/llama/configs/params_llama2_70b.yaml",
    ),
}
OURS = {
    "bert_large_msl128_tf.yaml": ("bert", "pipelined"),
    "bert_base_msl128_pt.yaml": ("bert", "pipelined"),
    "llama_7b_pt.yaml": ("llama", "ws"),
}


CASES = [(HERE / n, m, mode) for n, (m, mode) in OURS.items()]
CASES += [(VARIANT_DIR / n, m, mode) for n, (m, mode, _) in VARIANTS.items()]

pytestmark = pytest.mark.slow  # every published BERT/Llama config validated and compiled


@pytest.fixture(autouse=True)
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        yield


@pytest.mark.parametrize(("path", "model", "mode"), CASES, ids=[c[0].name for c in CASES])
def test_loads_unchanged_without_unknown_keys(path, model, mode):
    _, warnings = validate_params(load_params(path), model, source=path.name)
    assert not [w for w in warnings if "unknown key" in w], warnings


@pytest.mark.parametrize(("path", "model", "mode"), CASES, ids=[c[0].name for c in CASES])
def test_validates_and_compiles_in_its_mode(capsys, tmp_path, monkeypatch, path, model, mode):
    if mode == "ws":
        monkeypatch.setenv("CS2SIM_FLOW", "ws")  # as `python-ws run.py ...`
    else:
        monkeypatch.delenv("CS2SIM_FLOW", raising=False)
    md = tmp_path / "md"
    for stop in ("validate_only", "compile_only"):
        code = main(model, ["-m", stop, "-p", str(path), "-o", str(md)])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert "unknown key" not in out + err
    report = next(md.glob("cs_*/compile_report.txt")).read_text()
    assert ("Layer Name" in report) == (mode == "ws")  # the per-layer table of weight streaming


def test_llama_7b_compiles_for_weight_streaming_in_micro_batches(capsys, tmp_path, monkeypatch):
    """use_cs_grad_accum: the 2048-sample batch does not fit one wafer's activations; the
    compiler runs it as micro-batches and says so."""
    monkeypatch.setenv("CS2SIM_FLOW", "ws")
    assert (
        main(
            "llama",
            ["-m", "compile_only", "-p", str(HERE / "llama_7b_pt.yaml"), "-o", str(tmp_path)],
        )
        == 0
    )
    capsys.readouterr()
    log = next(tmp_path.glob("cs_*/compile.log")).read_text()
    found = re.search(r"2048 samples per system in (\d+) micro-batch\(es\) of (\d+)", log)
    assert found and int(found[1]) > 1 and int(found[1]) * int(found[2]) >= 2048, log
    assert "Micro-batches: " in next(tmp_path.glob("cs_*/compile_report.txt")).read_text()


def test_missing_vocab_file_is_one_line_and_the_fallback(capsys, tmp_path):
    """The TF config names a vocab_file and no vocab_size: one line says the file is not there
    and which vocabulary is used instead; validation goes on (no traceback)."""
    code = main(
        "bert",
        ["-m", "validate_only", "-p", str(HERE / "bert_large_msl128_tf.yaml"), "-o", str(tmp_path)],
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [ln for ln in (out + err).splitlines() if "vocab_file ../" in ln]
    assert len(lines) == 1, lines
    assert "is not there" in lines[0] and "fallback vocabulary" in lines[0]
    assert "30522 rows" in lines[0] and "Traceback" not in out + err


def test_every_variant_is_here_with_its_provenance():
    assert sorted(p.name for p in VARIANT_DIR.glob("*.yaml")) == sorted(VARIANTS)
    provenance = (HERE / "PROVENANCE.md").read_text()
    for name, (_, _, where) in VARIANTS.items():
        release, path = where.split(":")
        assert re.search(
            rf"^\| {re.escape(name)} \| {release} \([0-9a-f]{{7}}\) \| "
            rf"{re.escape(path)} \|$",
            provenance,
            re.M,
        ), name


def test_tf_sst2_config_loads_as_published(tmp_path):
    """predict_input is accepted and said to be unused; cls_dropout_rate and num_cls_classes
    are honoured; pretrain_params_path is said to name a shape (and no weights), taken from the
    file when it is there."""
    import yaml

    path = VARIANT_DIR / "bert_base_sst2_tf.yaml"
    params, warnings = validate_params(load_params(path), "bert_classifier", source=str(path))
    said = "\n".join(warnings)
    assert "predict_input is ignored: cs2sim has no predict mode" in said
    assert "pretrain_params_path ../../configs/params_bert_base_msl128.yaml is not there" in said
    assert "pretrained weights come from --checkpoint_path" in said
    assert params["model"]["task_dropout"] == 0.1 and params["model"]["num_labels"] == 2
    doc = yaml.safe_load(path.read_text())
    doc["model"].update(cls_dropout_rate=0.3, num_cls_classes=3)
    pre = tmp_path / "configs" / "params_pre.yaml"
    pre.parent.mkdir()
    pre.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "hidden_size": 256,
                    "num_hidden_layers": 4,
                    "num_heads": 4,
                    "filter_size": 1024,
                }
            }
        )
    )
    doc["model"]["pretrain_params_path"] = "configs/params_pre.yaml"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(doc))
    params, warnings = validate_params(
        load_params(tmp_path / "p.yaml"), "bert_classifier", source=str(tmp_path / "p.yaml")
    )
    m = params["model"]
    assert (m["task_dropout"], m["num_labels"]) == (0.3, 3)
    assert (m["hidden_size"], m["num_hidden_layers"], m["num_heads"]) == (256, 4, 4)
    from cs2sim.runtime import registry
    from cs2sim.runtime.numerics.precision import Policy

    model = registry.get("bert_classifier")(m, Policy(), 0)
    assert model.loss_head.drop.rate == 0.3  # the classifier's dropout is cls_dropout_rate
    assert model.loss_head.cls.n_out == 3  # num_cls_classes classes
