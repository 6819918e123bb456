"""A user's own model: a residual MLP for MNIST with a layer of its own, and an op of its own.

Everything a model needs to go through validate_only, compile_only, a host run and a csrun_wse
run as the Model Zoo's do (docs/own-model.md):
  * layers from cs2sim.runtime.nn (Dense, LayerNorm, Activation, SoftmaxCrossEntropy), or of
    one's own: a Module with forward (caching what backward needs), backward (returning dx and
    ADDING into self.g) and specs (the ops the CS-2 compiler sees, runtime/nn/spec.py);
  * the model: a runtime.nn.Model naming itself with NAME, SCHEMA (its `model:` section, one
    runtime.schema.Key a key) and family (the input pipeline: "mnist" gives {"x", "y"}).

ResidualBlock is this user's own layer: x + proj(act(fc(norm(x)))), its forward and backward
written here, its ops all ones the CS-2 kernel library runs. Snake is an op of this user's own:
snake(x) = x + sin(x)^2 (Ziyin et al. 2020). It trains on the host like any layer, but no kernel
of the CS-2 library runs "snake", so `--mode=validate_only` stops at kernel matching and writes
the kernel-matching report to model_dir (configs/params_snake.yaml).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cs2sim.runtime.nn import Activation, Dense, LayerNorm, Model, Module, SoftmaxCrossEntropy
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.schema import Key, Schema, positive

INPUTS, CLASSES = 784, 10


class Snake(Module):
    """snake(x) = x + sin(x)^2, elementwise; d/dx = 1 + sin(2x)."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x  # (..., n)
        return x + np.sin(x) ** 2

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy * (1.0 + np.sin(2.0 * self.x))

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        return [make_spec(name, "snake", in_shape, 4 * in_shape[-1])]  # an op of its own


class ResidualBlock(Module):
    """x (B, d) -> x + proj(act(fc(norm(x)))) (B, d)."""

    def __init__(
        self, dim: int, hidden: int, act: str, rng: np.random.Generator, policy: Any
    ) -> None:
        super().__init__(policy)
        self.norm = LayerNorm(dim, 1e-5, policy)
        self.fc = Dense(dim, hidden, rng, policy=policy)
        self.act = Snake(policy) if act == "snake" else Activation(act, policy)
        self.proj = Dense(hidden, dim, rng, policy=policy)

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.proj.forward(self.act.forward(self.fc.forward(self.norm.forward(x))))
        return x + h  # (B, d) the residual

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dh = self.fc.backward(self.act.backward(self.proj.backward(dy)))  # (B, d)
        return dy + self.norm.backward(dh)  # both paths of the residual

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        s = self.norm.specs(f"{name}.norm", in_shape, names)
        s += self.fc.specs(f"{name}.fc", in_shape, names)
        s += self.act.specs(f"{name}.act", s[-1].out_shape, names)
        s += self.proj.specs(f"{name}.proj", s[-1].out_shape, names)
        return s + [make_spec(f"{name}.add", "add", in_shape, in_shape[-1])]


class ResidualMLP(Model):
    """784 -> Dense(width) -> blocks x ResidualBlock -> Dense(10) -> softmax cross-entropy."""

    NAME = "residual_mlp"
    family = "mnist"  # batches {"x": (B, 784) float32, "y": (B,) int32}
    input_key, label_key = "x", "y"
    SCHEMA: Schema = {
        "width": Key(int, 128, "Width of the residual stream.", check=positive),
        "hidden": Key(int, 256, "Width inside each block.", check=positive),
        "blocks": Key(int, 2, "Residual blocks.", check=positive),
        "activation": Key(
            str,
            "gelu",
            "Inside each block; snake is this model's own op.",
            choices=("gelu", "relu", "tanh", "snake"),
        ),
        "mixed_precision": Key(
            bool, False, "16-bit activations (read by numerics/mixed_precision.py)."
        ),
        "fp16_type": Key(str, None, "16-bit format.", choices=("float16", "bfloat16", "cbfloat16")),
    }

    def __init__(self, model_params: dict[str, Any], policy: Any, seed: int) -> None:
        super().__init__(policy, seed)
        mp = {k: key.default for k, key in self.SCHEMA.items()} | model_params
        rng, width = self.init_rng, int(mp["width"])
        self.add_block("embed", Dense(INPUTS, width, rng, policy=policy, needs_dx=False))
        for i in range(int(mp["blocks"])):
            self.add_block(
                f"block{i}", ResidualBlock(width, int(mp["hidden"]), mp["activation"], rng, policy)
            )
        self.add_block("logits", Dense(width, CLASSES, rng, policy=policy))
        self.add_block("loss", SoftmaxCrossEntropy(policy))

    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        sums = super().eval_metrics(batch)  # loss_sum, count
        sums["correct"] = float(self.loss_head.num_correct())  # -> accuracy
        return sums

    def input_shape(self, batch_size: int) -> tuple[int, ...]:
        return (batch_size, INPUTS)
