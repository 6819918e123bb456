"""BERT for sequence classification (Model Zoo's BertForSequenceClassification fine-tuning).

BERT's embedding and encoder (bert/model.py), then the classifier head: the [CLS] row through
the pooler (dense + tanh), dropout `task_dropout`, a dense layer to `num_labels`, mean
cross-entropy (runtime/nn/encoder.py ClassifierHead); accuracy in eval. The keys are those of
Model Zoo's PyTorch classifier configs (bert_{base,large}_classifier_{sst2,mnli}.yaml) on top of
BERT's. Their data (GLUE's SST-2, MNLI) is not on this machine: the input is the stand-in task
of runtime/data/classify.py, labelled segment pairs of real text (2 or 3 classes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cs2sim.runtime.modelzoo.bert.model import MODEL_SCHEMA as BERT_SCHEMA
from cs2sim.runtime.modelzoo.bert.model import BertConfig, BertModel
from cs2sim.runtime.nn.encoder import ClassifierHead
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.runtime.schema import Key, Schema, positive, unit_interval

__all__ = ["BertClassifierModel", "MODEL_SCHEMA"]

MODEL_SCHEMA: Schema = {
    **BERT_SCHEMA,
    "num_labels": Key(int, 2, "Classes of the classifier.", check=positive),
    "task_dropout": Key((int, float), 0.1, "Dropout before the classifier.",
                        check=unit_interval),
    "problem_type": Key(str, "single_label_classification", "Only single-label "
                        "classification (softmax cross-entropy) is implemented.",
                        choices=("single_label_classification",)),
}


class BertClassifierModel(BertModel):
    """BERT + classifier over {"input_ids", "token_type_ids": (B, T), "labels": (B,)}."""

    NAME = "bert_classifier"
    SCHEMA: Schema = MODEL_SCHEMA
    family = "pairs"
    LABEL_KEYS = ("labels",)

    def make_head(self, mp: dict[str, Any], cfg: BertConfig, init: Any, policy: Policy) -> Any:
        """The classifier head."""
        return ClassifierHead(cfg.hidden_size, int(mp["num_labels"]), self.init_rng,
                              self.drop_rng, init=init, dropout=float(mp["task_dropout"]),
                              policy=policy)

    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[Any, np.ndarray]:
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
