"""FC-MNIST: 784 -> hidden Dense layers (activation, dropout) -> 10 logits; mean cross-entropy.

Both Model Zoo forms of the model section are accepted (Model Zoo's params files, docs/sources.md):
  TF       hidden_sizes: [500, 300]          one Dense per entry
  PyTorch  depth: 10, hidden_size: 50        depth Dense layers of hidden_size units
hidden_sizes overrides depth/hidden_size; with neither, the TF model's [500, 300] is built.
Weights start glorot-uniform (the Keras Dense default), biases at zero.

Keys with no effect on this numpy model (accepted so Model Zoo files load): mixed_precision,
fp16_type and use_bfloat16 choose the Policy the model is given (numerics/mixed_precision.py);
to_float16, precision_opt_level, boundary_casting, tf_summary and compute_eval_metrics (accuracy
is always computed in eval) change nothing here.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from cs2sim.runtime.modelzoo import fill_defaults
from cs2sim.runtime.nn.activations import Activation
from cs2sim.runtime.nn.dense import Dense
from cs2sim.runtime.nn.dropout import Dropout
from cs2sim.runtime.nn.loss import SoftmaxCrossEntropy
from cs2sim.runtime.nn.model import Model, training_bytes
from cs2sim.runtime.numerics.precision import HALF_FORMATS, Policy
from cs2sim.runtime.schema import Key, Schema, positive, unit_interval
from cs2sim.system.errors import ConfigError

log = logging.getLogger("cs2sim.run")

__all__ = ["FcMnistModel", "MODEL_SCHEMA", "NUM_INPUTS", "NUM_CLASSES"]

NUM_INPUTS = 784  # 28 x 28 pixels, flattened
NUM_CLASSES = 10
DEFAULT_HIDDEN = [500, 300]  # the TF config and docs/training.md model


def _sizes_ok(v: Any) -> str | None:
    ok = (
        isinstance(v, list)
        and v
        and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in v)
    )
    return None if ok else "must be a non-empty list of positive integers"


MODEL_SCHEMA: Schema = {
    "name": Key(str, "fc_mnist", "Model name (informational)."),
    "hidden_sizes": Key(
        list,
        None,
        "TF form: units of each hidden Dense layer; overrides depth/hidden_size.",
        check=_sizes_ok,
    ),
    "depth": Key(
        int, None, "PyTorch form: number of hidden Dense layers (with hidden_size).", check=positive
    ),
    "hidden_size": Key(
        int, None, "PyTorch form: units of every hidden layer (with depth).", check=positive
    ),
    "dropout": Key(
        (int, float),
        0.0,
        "Dropout rate after each hidden activation (training only).",
        check=unit_interval,
    ),
    "activation_fn": Key(
        str, "relu", "Hidden activation.", choices=("relu", "tanh", "elu", "selu", "linear")
    ),
    "mixed_precision": Key(
        bool,
        None,
        "16-bit activations/weights/gradients (read by numerics.mixed_precision); "
        "absent: float16 in the TF flow (`python run.py`, as the Model Zoo's TF fc_mnist ran "
        "Keras mixed_float16), float32 in the PyTorch flow (`python-pt`)",
    ),
    "fp16_type": Key(str, None, "16-bit format when mixed_precision is on.", choices=HALF_FORMATS),
    "use_bfloat16": Key(
        bool, False, "Older form of fp16_type: bfloat16 (read by numerics.mixed_precision)."
    ),
    "to_float16": Key(bool, False, "PyTorch R1.x flag; no effect here."),
    "precision_opt_level": Key(int, None, "Deprecated in model (runconfig key); no effect here."),
    "boundary_casting": Key(bool, False, "TF Cerebras flag; no effect here."),
    "tf_summary": Key(bool, False, "TF Cerebras flag; no effect here."),
    "compute_eval_metrics": Key(bool, True, "Accuracy in eval; always computed here."),
}


def hidden_layers(mp: dict[str, Any]) -> list[int]:
    """The hidden layer widths the model section asks for."""
    if mp.get("hidden_sizes") is not None:
        return [int(h) for h in mp["hidden_sizes"]]
    depth, size = mp.get("depth"), mp.get("hidden_size")
    if depth is None and size is None:
        return list(DEFAULT_HIDDEN)
    if depth is None or size is None:
        raise ConfigError(
            "model.depth and model.hidden_size go together (PyTorch form); "
            "set both, or set hidden_sizes."
        )
    return [int(size)] * int(depth)


class FcMnistModel(Model):
    """784 -> [Dense -> activation -> dropout] x len(hidden) -> Dense(10) -> softmax CE."""

    NAME = "fc_mnist"
    SCHEMA = MODEL_SCHEMA
    family = "mnist"
    input_key = "x"
    label_key = "y"

    @classmethod
    def complete_params(cls, params: dict[str, Any], source: str, warnings: list[str]) -> None:
        """model.mixed_precision when the file leaves it out: the Model Zoo's TF fc_mnist set
        the Keras policy mixed_float16 (no loss scaling) whatever its config said, its PyTorch
        one trained in float32 unless asked."""
        from cs2sim.runtime.job.flow import FLOWS, flow

        model = params["model"]
        if model.get("mixed_precision") is None:
            tf = FLOWS[flow()][2] == "tf"
            model["mixed_precision"] = tf
            if tf:
                log.info(
                    "%s: model.mixed_precision is not set, so fc_mnist trains in float16 "
                    "as the Model Zoo's TF fc_mnist (Keras mixed_float16) did; set it to "
                    "false for float32.",
                    source,
                )

    def __init__(self, model_params: dict[str, Any], policy: Policy, seed: int) -> None:
        super().__init__(policy, seed)
        mp = fill_defaults(MODEL_SCHEMA, model_params)
        sizes = [NUM_INPUTS, *hidden_layers(mp)]
        rate = float(mp["dropout"])
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
            # the first layer's input is the data: no gradient needed (saves a third of its work)
            self.add_block(
                f"fc{i}", Dense(n_in, n_out, self.init_rng, policy=policy, needs_dx=i > 0)
            )
            self.add_block(f"act{i}", Activation(mp["activation_fn"], policy))
            if rate > 0:
                self.add_block(f"drop{i}", Dropout(rate, self.drop_rng, policy))
        self.add_block(
            "logits", Dense(sizes[-1], NUM_CLASSES, self.init_rng, policy=policy, needs_dx=True)
        )
        self.add_block("loss", SoftmaxCrossEntropy(policy))
        self.hidden = sizes[1:]

    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(x (B, 784) in 16 bits as the CS-2 receives it, y (B,))."""
        x = batch[self.input_key]  # (B, 784) float32 in [0, 1]
        return (self.policy.cast(x) if self.policy.enabled else x), batch[self.label_key]

    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """{"loss_sum", "count", "correct"} over one batch (samples)."""
        sums = super().eval_metrics(batch)
        sums["correct"] = float(self.loss_head.num_correct())
        return sums

    def input_shape(self, batch_size: int) -> tuple[int, ...]:
        """(B, 784)."""
        return (batch_size, NUM_INPUTS)

    @staticmethod
    def param_count(model_params: dict[str, Any]) -> int:
        """Trainable scalars, from the shapes."""
        sizes = [NUM_INPUTS, *hidden_layers(fill_defaults(MODEL_SCHEMA, model_params)), NUM_CLASSES]
        return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:], strict=True))

    @staticmethod
    def param_bytes_estimate(model_params: dict[str, Any], batch_size: int = 1) -> int:
        """Host bytes to train (weights, grads, Adam state, scratch, activations); no allocation."""
        mp = fill_defaults(MODEL_SCHEMA, model_params)
        widths = [NUM_INPUTS, *hidden_layers(mp), NUM_CLASSES]
        activations = 4 * batch_size * 4 * sum(widths)  # outputs, caches, masks, gradients (fp32)
        return training_bytes(
            FcMnistModel.param_count(mp), activations, bool(mp.get("mixed_precision"))
        )
