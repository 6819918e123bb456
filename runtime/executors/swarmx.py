"""SwarmX: the broadcast/reduce fabric between MemoryX and the CS-X systems.

Cerebras' Glossary and Weight Streaming Execution page (docs/sources.md): SwarmX "broadcasts weights
from MemoryX to all CS-2s, reduces (sums) gradients back". One broadcast per layer copies the
layer's weights out of MemoryX into the systems' weight buffer; one reduce per layer and system adds
that system's gradient of the layer into MemoryX's accumulator and clears the system's buffer for
the next contribution.

The N simulated systems of one host process share one receive buffer per weight: a broadcast
delivers identical bytes to every system, so N copies would cost N times the host memory for the
same numbers. Their gradient buffers are shared the same way and reduced after each system's
backward of a layer (a reduction tree adds contributions as they arrive); the sum, taken in
system order, is deterministic.
"""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.executors.memoryx import MemoryX

__all__ = ["SwarmX"]


class SwarmX:
    """Broadcast a layer's weights to N systems; sum their gradients into MemoryX."""

    def __init__(self, memoryx: MemoryX, num_systems: int, layers: list[list[str]]) -> None:
        self.memoryx = memoryx
        self.num_systems = num_systems
        self.layers = layers  # layer index -> model-level names of the weights it uses
        # the systems' weight buffer and gradient buffer, one array per weight (see above)
        self.weights = {n: np.empty_like(w) for n, w in memoryx.weights.items()}
        self.grads = {n: np.zeros_like(w) for n, w in memoryx.weights.items()}
        self.broadcasts = 0
        self.reductions = 0
        self._fresh: set[str] = set()  # weights with no contribution yet this step

    def begin_step(self) -> None:
        """A new step: the first contribution to each weight replaces MemoryX's accumulator (no
        separate zeroing pass), later ones add to it."""
        self._fresh = set(self.memoryx.grads)

    def end_step(self) -> None:
        """Zero the accumulator of any weight no layer contributed to this step."""
        for name in self._fresh:
            self.memoryx.grads[name].fill(0)
        self._fresh.clear()

    def broadcast(self, layer: int) -> int:
        """Send layer `layer`'s weights from MemoryX to every system; returns the bytes sent."""
        sent = 0
        for name in self.layers[layer]:
            np.copyto(self.weights[name], self.memoryx.weights[name])
            sent += self.weights[name].nbytes
        self.broadcasts += 1
        return sent

    def reduce(self, layer: int) -> None:
        """Add one system's gradients of layer `layer` into MemoryX and clear its buffer."""
        acc = self.memoryx.grads
        for name in self.layers[layer]:
            g = self.grads[name]
            if name in self._fresh:
                np.copyto(acc[name], g)
                self._fresh.discard(name)
            else:
                acc[name] += g
            g.fill(0)
        self.reductions += 1
