"""Rotary position embedding (RoFormer, Su et al. 2021) in GPT-J's and in LLaMA's form.

The first `rotary_dim` features of each head are taken as pairs, and pair i at position t is
rotated by the angle t * base^(-2i / rotary_dim); the other features pass through. The pairs:
  interleaved (GPT-J's `rotate_every_two`): (x0, x1), (x2, x3), ...
  halves (GPT-NeoX / LLaMA's `rotate_half`): (x0, x_{rd/2}), (x1, x_{rd/2+1}), ...
A rotation is orthogonal, so the backward pass is the rotation by the opposite angle.

The sin/cos tables cover the positions the run has actually used (grown in powers of two on
the first longer sequence), not all of max_positions: max_position_embeddings is a bound a
config may set far above any sequence it trains on (1,000,000,000 would be 7.45 GiB of angles
per layer, allocated before any check), while the tables of the longest sequence are KiB.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Rotary"]


class Rotary:
    """sin/cos tables for positions up to max_positions-1 (made as far as sequences reach) and
    the (inverse) rotation of q or k."""

    def __init__(
        self, rotary_dim: int, max_positions: int, base: float = 10000.0, interleaved: bool = True
    ) -> None:
        if rotary_dim <= 0 or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be a positive even number, not {rotary_dim}")
        self.dim = rotary_dim
        self.interleaved = interleaved
        self.max_positions = int(max_positions)
        self._inv_freq = base ** (
            -np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
        )  # (rd/2,)
        self._tables = self._make(min(self.max_positions, 128))

    def _make(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        angle = np.arange(n, dtype=np.float64)[:, None] * self._inv_freq  # (n, rd/2)
        return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)  # (n, rd/2)

    def tables(self, T: int) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin), each (T, rd/2), for positions 0..T-1 (grown once past what exists)."""
        tables = self._tables  # one read: another thread may swap in longer tables meanwhile
        if T > len(tables[0]):
            if T > self.max_positions:
                raise ValueError(f"sequence length {T} exceeds max_positions {self.max_positions}")
            tables = self._tables = self._make(min(self.max_positions, 1 << (T - 1).bit_length()))
        return tables[0][:T], tables[1][:T]

    def rotate(self, x: np.ndarray, out: np.ndarray, inverse: bool = False) -> np.ndarray:
        """out = R(x) (or R^T(x)); x, out (..., T, hs); the pairs as `interleaved` says."""
        T, rd = x.shape[-2], self.dim
        c, s = self.tables(T)  # (T, rd/2), broadcast over (B, nh)
        if inverse:
            s = -s
        if self.interleaved:  # even and odd features
            first, second = slice(0, rd, 2), slice(1, rd, 2)
        else:  # first and second half of the rotated features
            first, second = slice(0, rd // 2), slice(rd // 2, rd)
        x0, x1 = x[..., first], x[..., second]  # (..., T, rd/2)
        y0 = x0 * c - x1 * s  # (..., T, rd/2) both halves first: out may be x itself
        y1 = x1 * c + x0 * s  # (..., T, rd/2)
        out[..., first] = y0
        out[..., second] = y1
        if out is not x:
            out[..., rd:] = x[..., rd:]  # (..., T, hs - rd) the unrotated features
        return out
