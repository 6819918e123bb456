"""A user's layer without specs() stops a compile with one sentence naming the layer, its block
and what it must define: no internal error."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.nn.module import Module
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.system.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "own_model"))
residual_mlp = pytest.importorskip("residual_mlp")


class Softsign(Module):
    """softsign(x) = x / (1 + |x|): forward and backward, but no specs()."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x
        return x / (1.0 + np.abs(x))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy / (1.0 + np.abs(self.x)) ** 2


def test_a_layer_without_specs_is_named_with_its_block():
    model = residual_mlp.ResidualMLP({"width": 8, "hidden": 16, "blocks": 2}, Policy(), 0)
    assert model.block_names[2] == "block1"
    model.blocks[2].act = Softsign()  # block1's activation: the user's own layer
    with pytest.raises(ConfigError) as e:
        model.layer_graph(4)
    assert str(e.value) == (
        "layer Softsign in block 'block1' of ResidualMLP has no specs(name, in_shape, names); "
        "define it to list the layer's ops for the CS-2 compiler (docs/own-model.md), or build "
        "the block from runtime/nn's layers."
    )


def test_a_block_without_specs_is_named_too():
    model = residual_mlp.ResidualMLP({"width": 8, "hidden": 16, "blocks": 1}, Policy(), 0)
    model.blocks[1] = Softsign()
    with pytest.raises(ConfigError, match=r"^layer Softsign in block 'block0' of ResidualMLP"):
        model.layer_graph(4)
