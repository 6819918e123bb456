"""BERT for sequence classification (Model Zoo's BertForSequenceClassification fine-tuning).

BERT's embedding and encoder (bert/model.py), then the classifier head: the [CLS] row through
the pooler (dense + tanh), dropout `task_dropout`, a dense layer to `num_labels`, mean
cross-entropy (runtime/nn/encoder.py ClassifierHead); accuracy in eval. The keys are those of
Model Zoo's PyTorch classifier configs (bert_{base,large}_classifier_{sst2,mnli}.yaml) on top of
BERT's. Their data (GLUE's SST-2, MNLI) is not on this machine: the input is the stand-in task
of runtime/data/classify.py, labelled segment pairs of real text (2 or 3 classes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from cs2sim.runtime.modelzoo.bert.model import MODEL_SCHEMA as BERT_SCHEMA
from cs2sim.runtime.modelzoo.bert.model import BertConfig, BertModel
from cs2sim.runtime.nn.encoder import ClassifierHead
from cs2sim.runtime.nn.init import Init
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.runtime.schema import Key, Schema, positive, unit_interval
from cs2sim.system.errors import ConfigError

__all__ = ["BertClassifierModel", "MODEL_SCHEMA"]

MODEL_SCHEMA: Schema = {
    **BERT_SCHEMA,
    "num_labels": Key(int, 2, "Classes of the classifier.", check=positive),
    "task_dropout": Key((int, float), 0.1, "Dropout before the classifier.", check=unit_interval),
    "problem_type": Key(
        str,
        "single_label_classification",
        "Only single-label classification (softmax cross-entropy) is implemented.",
        choices=("single_label_classification",),
    ),
    # the TF classifier configs' spellings (params_bert_{base,large}_{sst2,mnli}.yaml)
    "cls_dropout_rate": Key(
        (int, float), None, "TF spelling of task_dropout (wins when set).", check=unit_interval
    ),
    "num_cls_classes": Key(
        int,
        2,
        "TF classifier configs' classes: num_labels takes it when num_labels is left at 2",
        check=positive,
    ),
    "pretrain_params_path": Key(
        str,
        None,
        "TF: the pretraining params file whose model "
        "section gives the encoder's shape (keys this config leaves "
        "at their defaults); no weights come from it",
    ),
}
# encoder keys pretrain_params_path may supply
ENCODER_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_heads",
    "filter_size",
    "max_position_embeddings",
    "vocab_size",
    "encoder_nonlinearity",
    "layer_norm_epsilon",
    "use_segment_embedding",
    "position_embedding_type",
)


class BertClassifierModel(BertModel):
    """BERT + classifier over {"input_ids", "token_type_ids": (B, T), "labels": (B,)}."""

    NAME = "bert_classifier"
    SCHEMA: Schema = MODEL_SCHEMA
    family = "pairs"
    LABEL_KEYS: tuple[str, ...] = ("labels",)

    @classmethod
    def complete_params(cls, params: dict[str, Any], source: str, warnings: list[str]) -> None:
        """The TF spellings folded in (cls_dropout_rate, num_cls_classes), the encoder's shape
        from pretrain_params_path, then BERT's own completion (vocab_size)."""
        model = params["model"]
        if model.get("cls_dropout_rate") is not None:
            model["task_dropout"] = model["cls_dropout_rate"]
        if model["num_cls_classes"] != 2 and model["num_labels"] == 2:
            # the TF configs give the classes as num_cls_classes (default 2, as BERT's own
            # next-sentence classes), the PyTorch ones as num_labels
            model["num_labels"] = model["num_cls_classes"]
        path = model.get("pretrain_params_path")
        if path:
            _pretrain_shape(model, str(path), source, warnings)
        super().complete_params(params, source, warnings)

    def make_head(
        self, mp: dict[str, Any], cfg: BertConfig, init: Init, policy: Policy
    ) -> ClassifierHead:
        """The classifier head."""
        return ClassifierHead(
            cfg.hidden_size,
            int(mp["num_labels"]),
            self.init_rng,
            self.drop_rng,
            init=init,
            dropout=float(mp["task_dropout"]),
            policy=policy,
        )

    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """({"input_ids", "token_type_ids"}, labels (B,))."""
        x, _ = super().inputs(batch)
        return x, batch["labels"]

    def set_input(self, section: dict[str, Any]) -> None:
        """Nothing of the input changes the classifier's graph."""

    def input_bytes_per_sample(self, seq_len: int) -> int:
        """ids and segments (T each) and the label, 4 bytes each."""
        return 4 * (2 * seq_len + 1)

    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """loss_sum, count, correct."""
        sums = Model.eval_metrics(self, batch)
        sums["correct"] = float(self.loss_head.ce.num_correct())
        return sums

    summarize_metrics = staticmethod(Model.summarize_metrics)  # loss, accuracy

    @classmethod
    def param_count(cls, model_params: dict[str, Any]) -> int:
        """BERT's encoder and the classifier (no MLM or NSP head)."""
        from cs2sim.runtime.modelzoo import fill_defaults
        from cs2sim.runtime.modelzoo.bert.model import bert_config

        mp = fill_defaults(cls.SCHEMA, model_params)
        cfg = bert_config(mp)
        C, V, n = cfg.hidden_size, cfg.vocab_size, int(mp["num_labels"])
        mlm = C * C + C + 2 * C + (0 if cfg.tied else V * C) + V
        nsp = C * C + C + cfg.nsp_classes * C + cfg.nsp_classes if cfg.nsp else 0
        return cfg.param_count() - mlm - nsp + C * C + C + n * C + n


def _pretrain_shape(model: dict[str, Any], path: str, source: str, warnings: list[str]) -> None:
    """Encoder keys still at their defaults from the pretraining params file's model section,
    looked up beside the params file, then in the working directory; said either way."""
    import yaml

    here = Path(source).parent if source and Path(source).is_file() else Path.cwd()
    found = next((p for p in (here / path, Path(path)) if p.is_file()), None)
    if found is None:
        warnings.append(
            f"{source}: model.pretrain_params_path {path} is not there (looked beside the params "
            f"file and in the working directory); the encoder keeps this config's model keys "
            f"(BERT-base where absent). It names a shape only: pretrained weights come from "
            f"--checkpoint_path."
        )
        return
    try:
        other = (yaml.safe_load(found.read_text()) or {}).get("model") or {}
    except (OSError, yaml.YAMLError, AttributeError) as e:
        raise ConfigError(
            f"{source}: model.pretrain_params_path {found} cannot be read ({e}); "
            f"fix it or remove the key."
        ) from None
    taken = []
    for key in ENCODER_KEYS:
        if key in other and key in MODEL_SCHEMA and model.get(key) == MODEL_SCHEMA[key].default:
            model[key] = other[key]
            taken.append(f"{key} {other[key]}")
    warnings.append(
        f"{source}: model.pretrain_params_path {found}: the encoder's "
        f"{', '.join(taken) or 'shape is already this config’s'} from it; no weights "
        f"(give --checkpoint_path for pretrained ones)."
    )
