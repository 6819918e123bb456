"""Token embedding (gather; scatter-add gradients), position tables, tied output projection."""

from __future__ import annotations

import numpy as np

from cs2sim.runtime.nn.init import GPT_INIT, Init
from cs2sim.runtime.nn.module import FP32, Module
from cs2sim.runtime.nn.parallel import gemm
from cs2sim.runtime.nn.spec import LayerSpec, make_spec
from cs2sim.runtime.numerics.precision import Policy

__all__ = ["Embedding", "LearnedPositions", "FixedPositions", "TiedProjection", "scatter_add_rows"]

# Up to this many rows the scatter-add is a one-hot matmul (BLAS beats any indexed add);
# above it, sort the ids: ids seen once are added with one fancy-index add, and only the runs of
# repeated ids are summed with np.add.reduceat (whose cost is per run: ~4 us each, measured).
ONE_HOT_MAX_ROWS = 1024


def scatter_add_rows(table: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
    """table[ids[i]] += rows[i] for every i, duplicates summed (np.add.at, but fast)."""
    N, n_rows = ids.size, table.shape[0]
    if n_rows <= ONE_HOT_MAX_ROWS:
        one_hot = np.zeros((N, n_rows), dtype=rows.dtype)  # (N, V)
        one_hot[np.arange(N), ids] = 1
        table += one_hot.T @ rows  # (V, N) @ (N, C) -> (V, C)
        return
    # 1) group equal ids: runs in sorted order
    order = np.argsort(ids, kind="stable")  # (N,) positions grouped by id
    sorted_ids = ids[order]  # (N,)
    new_run = np.r_[True, sorted_ids[1:] != sorted_ids[:-1]]  # (N,) True where an id starts
    starts = np.flatnonzero(new_run)  # (U,) first position of each distinct id
    counts = np.diff(np.r_[starts, N])  # (U,) occurrences of each distinct id
    # 2) ids seen once: distinct, so a plain fancy-index add is safe
    once = counts == 1  # (U,)
    table[sorted_ids[starts[once]]] += rows[order[starts[once]]]  # (U1, C)
    # 3) repeated ids: sum each run, then add (distinct again)
    if not once.all():
        in_repeat = np.repeat(~once, counts)  # (N,) sorted positions inside a repeated run
        rep_counts = counts[~once]  # (U2,)
        rep_starts = np.r_[0, np.cumsum(rep_counts)[:-1]]  # (U2,) run starts within the subset
        sums = np.add.reduceat(rows[order[in_repeat]], rep_starts, axis=0)  # (U2, C)
        table[sorted_ids[starts[~once]]] += sums


class Embedding(Module):
    """ids (B, T) int -> rows of W (B, T, C); W (vocab, C)."""

    def __init__(
        self,
        vocab: int,
        dim: int,
        rng: np.random.Generator,
        init: Init = GPT_INIT,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(policy)
        self.vocab, self.dim = vocab, dim
        self.add_param("weight", init(rng, (vocab, dim)))

    def forward(self, ids: np.ndarray) -> np.ndarray:
        """ids (...) -> (..., C)."""
        w = self.p["weight"]  # (V, C)
        y = np.take(w, ids, axis=0, out=self.buf("y", (*ids.shape, self.dim), w.dtype))  # (..., C)
        self.policy.cast(y, out=y)  # the gathered rows of the 16-bit weights
        self.ids = ids
        return y

    def backward(self, dy: np.ndarray) -> None:
        """Scatter-add dy (..., C) into the rows that were gathered; ids have no gradient."""
        rows = self.policy.cast(dy.reshape(-1, self.dim))  # (N, C)
        scatter_add_rows(self.g["weight"], self.ids.reshape(-1), rows)
        return None

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "embedding" (gather) kernel: ids (B, T) -> (B, T, C)."""
        attrs = (("vocab", self.vocab), ("dim", self.dim))
        return [
            make_spec(
                name, "embedding", (*in_shape, self.dim), 0, (self.p["weight"],), names, attrs
            )
        ]


class LearnedPositions(Embedding):
    """A learned absolute position table P (max_positions, C); forward(T) returns P[:T].

    The same table as an Embedding (one row per position); only the lookup differs: every
    sample reads rows 0..T-1, so no ids are needed.
    """

    def __init__(
        self,
        max_positions: int,
        dim: int,
        rng: np.random.Generator,
        init: Init = GPT_INIT,
        policy: Policy = FP32,
    ) -> None:
        super().__init__(max_positions, dim, rng, init, policy)
        self.max_positions = max_positions

    # positions are looked up by a count, not by ids: the table's first T rows (a narrower
    # signature than Embedding's, hence the override ignore; the graph calls it by kind)
    def forward(self, T: int) -> np.ndarray:  # type: ignore[override]
        """-> (T, C), broadcast over the batch by the caller."""
        return self.half(self.p["weight"][:T], "p")  # (T, C)

    def backward(self, dy: np.ndarray) -> None:
        """dy (B, T, C): every sample used the same rows, so their gradients add up."""
        T = dy.shape[-2]
        d = dy.reshape(-1, T, self.dim).sum(axis=0)  # (T, C)
        self.g["weight"][:T] += self.policy.cast(d, out=d)
        return None


class TiedProjection(Module):
    """logits = h @ E.T (+ b) sharing the embedding's weight E (vocab, C): one array, one grad."""

    def __init__(self, embedding: Embedding, bias: bool = False, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.emb = (
            embedding  # registered as a child: the weight is listed once, under its first owner
        )
        if bias:
            self.add_param("bias", np.zeros(embedding.vocab, dtype=np.float32))

    def forward(self, h: np.ndarray) -> np.ndarray:
        """h (..., C) -> logits (..., V)."""
        V, C = self.emb.p["weight"].shape
        h2 = h.reshape(-1, C)  # (N, C)
        e = self.emb.half(self.emb.p["weight"], "w_out")  # (V, C) as the kernel uses it
        y = gemm(h2, e.T, self.buf("y", (h2.shape[0], V), h2.dtype))  # (N, V)
        if "bias" in self.p:
            y += self.half(self.p["bias"], "b")  # (N, V) + (V,)
        self.policy.cast(y, out=y)
        self.h2, self.e = h2, e
        return y.reshape(*h.shape[:-1], V)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        """dy (..., V) -> dh (..., C); accumulates into the embedding's own gradient."""
        V, C = self.e.shape
        dy2 = dy.reshape(-1, V)  # (N, V)
        de = gemm(dy2.T, self.h2, self.buf("de", (V, C), dy2.dtype))  # (V, C)
        self.emb.accumulate("weight", de)  # the same array the embedding's backward adds into
        if "bias" in self.p:
            self.accumulate("bias", dy2.sum(axis=0))  # (V,)
        dh = gemm(dy2, self.e, self.buf("dh", self.h2.shape, dy2.dtype))  # (N, C)
        self.policy.cast(dh, out=dh)
        return dh.reshape(*dy.shape[:-1], C)

    def backward_dx(self, dy: np.ndarray) -> np.ndarray:
        """`backward` (its input gradient always exists), by the name Dense gives it."""
        return self.backward(dy)

    def specs(self, name: str, in_shape: tuple[int, ...], names: dict[int, str]) -> list[LayerSpec]:
        """One "dense" kernel reading the embedding's weight (same name as the embedding's spec)."""
        V, C = self.emb.p["weight"].shape
        arrays = (self.emb.p["weight"], *self.p.values())
        attrs = (("n_in", C), ("n_out", V), ("bias", "bias" in self.p), ("tied", True))
        return [make_spec(name, "dense", (*in_shape[:-1], V), 2 * V * C, arrays, names, attrs)]


class FixedPositions(Module):
    """Sinusoidal positions ("Attention Is All You Need"), not trained: forward(T) -> (T, C)."""

    def __init__(self, max_positions: int, dim: int, policy: Policy = FP32) -> None:
        super().__init__(policy)
        self.max_positions, self.dim = max_positions, dim
        pos = np.arange(max_positions, dtype=np.float64)[:, None]  # (Tmax, 1)
        inv = 10000.0 ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)  # (ceil(C/2),)
        table = np.zeros((max_positions, dim), dtype=np.float64)  # (Tmax, C)
        table[:, 0::2] = np.sin(pos * inv)
        table[:, 1::2] = np.cos(pos * inv)[:, : dim // 2]
        self.table = policy.cast(table.astype(np.float32))  # (Tmax, C)

    def forward(self, T: int) -> np.ndarray:
        """-> (T, C)."""
        return self.table[:T]

    def backward(self, dy: np.ndarray) -> None:
        """Nothing to learn."""
        return None
