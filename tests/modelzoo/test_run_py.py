"""Every Model Zoo model's run.py is the one template of runtime/job/bootstrap.py with its name,
so the bootstrap cannot drift between the models (and a new model's run.py is that template)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cs2sim.runtime.job.bootstrap import RUN_PY, run_py_text

ZOO = Path(__file__).resolve().parents[2] / "runtime" / "modelzoo"
MODELS = sorted(p.parent.name for p in ZOO.glob("*/run.py"))


def test_the_zoo_has_its_six_models() -> None:
    assert MODELS == ["bert", "bert_classifier", "fc_mnist", "gpt2", "gptj", "llama"]


@pytest.mark.parametrize("model", MODELS)
def test_each_run_py_is_the_template_with_its_name(model: str) -> None:
    text = (ZOO / model / "run.py").read_text()
    assert text == run_py_text(model), (
        f"runtime/modelzoo/{model}/run.py differs from bootstrap.RUN_PY; write "
        f"run_py_text({model!r}) to it"
    )
    assert f'main("{model}")' in text


def test_the_template_names_the_model_only_through_its_placeholder() -> None:
    assert RUN_PY.template.count("${model}") == 2
    assert "fc_mnist" not in RUN_PY.template
