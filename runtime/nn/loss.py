"""Softmax cross-entropy: the loss head of every model."""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import for_rows
from cs2sim.runtime.nn.spec import LayerSpec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["IGNORE", "SoftmaxCrossEntropy"]

IGNORE = -1  # the label of a position the loss skips (padding)


class SoftmaxCrossEntropy(Module):
    """logits (..., V), int labels (...) -> scale * sum of -log softmax(logits)[label] (fp32).

    `scale` defaults to 1 / number of rows (the mean). With `weights` (one per row) the loss is
    scale * sum of weight * CE (BERT's masked-LM loss: 0 for padded predictions). A label
    IGNORE (-1) marks a padded position (the data's attention mask 0, as the Model Zoo's GPT-2
    loss multiplies the token losses by the attention mask): its CE and gradient are 0, it is
    not counted in `count` or `num_correct`, and `scale` is unchanged; without such labels
    nothing is computed differently. forward caches
    the probabilities; backward turns them into the gradient IN PLACE, so call it at most once
    per forward.
    """

    def __init__(self, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.probs: np.ndarray | None = None
        self.skip: np.ndarray | None = None  # (n_pad,) rows labelled IGNORE

    def forward(
        self,
        logits: np.ndarray,
        labels: np.ndarray,
        scale: float | None = None,
        weights: np.ndarray | None = None,
    ) -> float:
        """The scaled loss; also sets ce_sum (sum over rows), count (rows) and row_ce (N,)."""
        V = logits.shape[-1]
        z = logits.reshape(-1, V)  # (N, V)
        y = labels.reshape(-1)  # (N,)
        N = z.shape[0]
        skip = np.flatnonzero(y == IGNORE) if y.size and y.min() < 0 else None  # (n_pad,)
        if skip is not None and len(skip):
            y = np.where(y == IGNORE, 0, y)  # (N,) any class: the row is zeroed below
        else:
            skip = None
        probs = self.buf("probs", z.shape, z.dtype)  # (N, V)
        ce = self.buf("ce", (N,), z.dtype)  # (N,)

        def rows(r0: int, r1: int) -> None:
            # 1) shift by the row max so exp never overflows, then log-sum-exp
            p = probs[r0:r1]  # (r, V)
            np.subtract(z[r0:r1], z[r0:r1].max(axis=1, keepdims=True), out=p)
            picked = p[np.arange(r1 - r0), y[r0:r1]]  # (r,) shifted logit of the right class
            np.exp(p, out=p)
            sums = p.sum(axis=1)  # (r,)
            c = np.log(sums, out=ce[r0:r1])  # (r,) log-sum-exp of the shifted logits
            c -= picked  # (r,) -log p(label)
            p *= (1.0 / sums)[:, None]  # (r, V) softmax, in place

        for_rows(rows, N, V * z.itemsize)  # row blocks over the worker threads
        if skip is not None:
            ce[skip] = 0.0  # padded positions add nothing
        self.skip = skip
        # 2) the scaled sum
        self.scale = 1.0 / N if scale is None else scale
        self.ce_sum, self.count = float(ce.sum()), N - (0 if skip is None else len(skip))
        self.probs, self.labels, self.shape, self.row_ce = probs, y, logits.shape, ce
        self.weights = None if weights is None else weights.reshape(-1).astype(z.dtype, copy=False)
        total = self.ce_sum if self.weights is None else float(ce @ self.weights)
        loss = z.dtype.type(total * self.scale)  # an fp32 value (float64 in gradient checks)
        return float(loss)

    def num_correct(self) -> int:
        """Rows whose largest probability is the label's (accuracy's numerator)."""
        assert self.probs is not None, "num_correct needs a forward first"
        hit = self.probs.argmax(axis=1) == self.labels  # (N,)
        if self.skip is not None:
            hit[self.skip] = False
        return int(hit.sum())

    def backward(self, loss_scale: float = 1.0) -> np.ndarray:
        """d(loss_scale * loss)/dlogits = loss_scale * scale * (softmax - onehot), logits-shaped."""
        assert self.probs is not None, "backward needs a forward first (and runs once per forward)"
        d = self.probs  # (N, V) reused in place
        d[np.arange(d.shape[0]), self.labels] -= 1.0
        if self.skip is not None:
            d[self.skip] = 0.0  # (n_pad, V) no gradient from padding
        factor = self.scale * loss_scale
        w = self.weights

        def rows(r0: int, r1: int) -> None:
            d[r0:r1] *= factor
            if w is not None:
                d[r0:r1] *= w[r0:r1, None]  # (r, V) * (r, 1)
            self.policy.cast(d[r0:r1], out=d[r0:r1])

        for_rows(rows, d.shape[0], d.shape[1] * d.itemsize)
        self.probs = None
        return d.reshape(self.shape)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "softmax_ce" kernel; its output is one loss value per sample."""
        V = in_shape[-1]
        positions = int(np.prod(in_shape[1:-1], dtype=np.int64)) if len(in_shape) > 2 else 1
        return [
            LayerSpec(
                name, "softmax_ce", 0, 5.0 * V * positions, 1, (), (in_shape[0],), (("classes", V),)
            )
        ]
