"""`Model`: what every model in runtime/modelzoo shares: blocks in order, loss, rng state, graph.

A model is a list of blocks (`self.blocks`). Every block but the last maps `forward(x) -> y` and
`backward(dy) -> dx` (the first block may return None: token ids have no gradient). The last
block is the loss head: `forward(x, labels) -> float` and `backward(loss_scale) -> dx`. So an
executor can run the blocks one at a time (weight streaming) exactly as `forward_loss` and
`backward` do here.

Two generators, both seeded from the run's seed: one draws the initial weights (in a fixed
order, so the same seed gives bit-identical weights), the other draws dropout masks; its state
is what `rng_state()` returns for checkpoints.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from cs2sim.runtime.nn.malloc import tune_allocator
from cs2sim.runtime.nn.module import Module
from cs2sim.runtime.nn.spec import LayerSpec
from cs2sim.runtime.numerics.precision import Policy
from cs2sim.runtime.schema import Schema
from cs2sim.runtime.threads import configure as configure_threads
from cs2sim.system.errors import ConfigError

__all__ = ["Arrays", "Model", "training_bytes"]

# a model's input or labels: one array (B, ...), or named arrays (BERT's ids, segments, mask)
Arrays = np.ndarray | dict[str, np.ndarray]

# Host bytes per parameter while training: the fp32 master (4), its gradient (4), Adam's two
# moments (8) and the reused dW scratch of the layer (4); in mixed precision also the rounded
# copy of the weight as the kernel uses it (4, kept as float32).
BYTES_PER_PARAM = 20
BYTES_PER_PARAM_MIXED = 24


def training_bytes(n_params: int, activation_bytes: int, mixed_precision: bool) -> int:
    """Host bytes needed to train: per-parameter state plus one step's activations."""
    per = BYTES_PER_PARAM_MIXED if mixed_precision else BYTES_PER_PARAM
    return int(per * n_params + activation_bytes)


def _generator(seed: int | None, stream: int) -> np.random.Generator:
    """An independent PCG64 stream per use from one seed; None draws fresh OS entropy."""
    return np.random.default_rng(None if seed is None else [seed, stream])


class Model(Module):
    """Base class of every model (the Model Zoo's and a user's own).

    A model names itself for the model table (runtime/registry.py) with NAME, SCHEMA and family.
    """

    NAME: str = ""  # the Model Zoo name run.py passes to main (e.g. "gpt2")
    SCHEMA: Schema = {}  # the params file's `model:` section (runtime/schema.py)
    family: str = ""  # the input pipeline: "mnist" | "lm" (runtime/data)
    input_key: str = ""  # batch key of the model input
    label_key: str = "labels"

    def __init__(
        self,
        policy: Policy,
        seed: int | None,
        init_seed: int | None = None,
        dropout_seed: int | None = None,
    ) -> None:
        super().__init__(policy)
        tune_allocator()  # big per-step temporaries stay in the heap (see malloc.py)
        configure_threads()  # BLAS 1 thread a call, our workers split the work (threads.py)
        self.seed = seed
        self.init_rng = _generator(seed if init_seed is None else init_seed, stream=0)
        self.drop_rng = _generator(seed if dropout_seed is None else dropout_seed, stream=1)
        # Duck-typed: the body's forward(x)/backward(dy) and the loss head's
        # forward(x, labels)/backward(loss_scale) differ (see the module docstring).
        self.blocks: list[Any] = []
        self.block_names: list[str] = []

    def add_block(self, name: str, block: Module) -> Module:
        """Register a block (an attribute: its parameters are named `name.*`), run in order."""
        setattr(self, name, block)
        self.blocks.append(block)
        self.block_names.append(name)
        return block

    # -- training -----------------------------------------------------------------------------
    def inputs(self, batch: dict[str, np.ndarray]) -> tuple[Arrays, Arrays]:
        """(model input, labels) from a batch."""
        return batch[self.input_key], batch[self.label_key]

    def forward_loss(self, batch: dict[str, np.ndarray]) -> float:
        """The fp32 loss of one batch; caches what backward needs."""
        x, labels = self.inputs(batch)
        for block in self.blocks[:-1]:
            x = block.forward(x)
        loss: float = self.blocks[-1].forward(x, labels)
        return loss

    def backward(self, loss_scale: float = 1.0) -> None:
        """Accumulate the gradients of loss_scale * loss into grads()."""
        d = self.blocks[-1].backward(loss_scale)
        for block in reversed(self.blocks[:-1]):
            d = block.backward(d)

    @property
    def loss_head(self) -> Any:
        """The last block."""
        return self.blocks[-1]

    def eval_metrics(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        """Sums over one batch in eval mode (no dropout): loss_sum (per-row CE summed), count."""
        was_training = self.training
        self.eval()
        try:
            self.forward_loss(batch)
        finally:
            self.train(was_training)
        ce = self._ce()
        return {"loss_sum": ce.ce_sum, "count": float(ce.count)}

    def _ce(self) -> Any:
        return self.loss_head.ce if hasattr(self.loss_head, "ce") else self.loss_head

    @staticmethod
    def summarize_metrics(sums: dict[str, float]) -> dict[str, float]:
        """Final metrics from eval_metrics sums added over batches: loss (mean CE), and the rest."""
        n = max(sums.get("count", 0.0), 1.0)
        out = {"loss": sums.get("loss_sum", 0.0) / n}
        if "correct" in sums:
            out["accuracy"] = sums["correct"] / n
        return out

    # -- checkpoints --------------------------------------------------------------------------
    def rng_state(self) -> dict[str, Any]:
        """The dropout generator's state (plain dicts and ints; JSON-able)."""
        return {"dropout": copy.deepcopy(self.drop_rng.bit_generator.state)}

    def set_rng_state(self, state: dict[str, Any]) -> None:
        """Restore what rng_state() returned."""
        self.drop_rng.bit_generator.state = copy.deepcopy(state["dropout"])

    # -- for the compiler and the rate figures ------------------------------------------------
    def sequence_length(self) -> int | None:
        """A sequence model's longest sequence (its max_position_embeddings), else None."""
        return None

    def input_shape(self, batch_size: int) -> tuple[int, ...]:
        """Shape of the model input at `batch_size`: (B, T) for a sequence model, with T its
        longest sequence; any other model says its own."""
        seq = self.sequence_length()
        if seq is None:
            raise NotImplementedError(f"{type(self).__name__} must define input_shape")
        return (batch_size, seq)

    def layer_graph(self, batch_size: int, seq_len: int | None = None) -> list[LayerSpec]:
        """Every kernel in execution order (figures per sample; out_shape at batch_size), for
        sequences of `seq_len` tokens when given (a sequence model), else the input_shape's."""
        shape = self.input_shape(batch_size) if seq_len is None else (batch_size, seq_len)
        return self.graph_for(shape)

    def graph_for(self, shape: tuple[int, ...]) -> list[LayerSpec]:
        """Every kernel in execution order for a model input of `shape` (batch first)."""
        if shape[0] < 1:
            raise ValueError(f"batch_size must be >= 1, not {shape[0]}")
        names = {id(a): n for n, a in self.parameters().items()}
        specs: list[LayerSpec] = []
        for name, block in zip(self.block_names, self.blocks, strict=True):
            try:
                s = block.specs(name, shape, names)
            except AttributeError as e:
                if e.name != "specs":
                    raise
                layer = type(e.obj).__name__ if e.obj is not None else type(block).__name__
                raise ConfigError(
                    f"layer {layer} in block {name!r} of {type(self).__name__} has no "
                    f"specs(name, in_shape, names); define it to list the layer's ops for the "
                    f"CS-2 compiler (docs/own-model.md), or build the block from runtime/nn's "
                    f"layers."
                ) from None
            specs += s
            if s:
                shape = s[-1].out_shape
        return specs

    def flops_per_sample(self, seq_len: int | None = None) -> float:
        """Training FLOPs per sample (per sequence of `seq_len` tokens when given): forward +
        backward, taken as 3x the forward."""
        return 3.0 * math.fsum(s.fwd_flops for s in self.layer_graph(1, seq_len))
