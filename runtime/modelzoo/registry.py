"""MODELS: every model this runtime trains, by its Model Zoo name."""

from __future__ import annotations

from dataclasses import dataclass

from cs2sim.runtime.modelzoo.fc_mnist.model import MODEL_SCHEMA as FC_MNIST_SCHEMA
from cs2sim.runtime.modelzoo.fc_mnist.model import FcMnistModel
from cs2sim.runtime.modelzoo.gpt2.model import MODEL_SCHEMA as GPT2_SCHEMA
from cs2sim.runtime.modelzoo.gpt2.model import GPT2Model
from cs2sim.runtime.modelzoo.gptj.model import MODEL_SCHEMA as GPTJ_SCHEMA
from cs2sim.runtime.modelzoo.gptj.model import GPTJModel
from cs2sim.runtime.nn.model import Model
from cs2sim.runtime.schema import Schema

__all__ = ["ModelEntry", "MODELS"]


@dataclass(frozen=True)
class ModelEntry:
    """A model class, the schema of its `model:` section, and its data family."""

    cls: type[Model]
    schema: Schema
    family: str  # "mnist" (x, y batches) | "lm" (input_ids, labels batches)


MODELS: dict[str, ModelEntry] = {
    "fc_mnist": ModelEntry(FcMnistModel, FC_MNIST_SCHEMA, "mnist"),
    "gpt2": ModelEntry(GPT2Model, GPT2_SCHEMA, "lm"),
    "gptj": ModelEntry(GPTJModel, GPTJ_SCHEMA, "lm"),
}
