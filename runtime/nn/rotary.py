"""Rotary position embedding (RoFormer, Su et al. 2021) in GPT-J's and in LLaMA's form.

The first `rotary_dim` features of each head are taken as pairs, and pair i at position t is
rotated by the angle t * base^(-2i / rotary_dim); the other features pass through. The pairs:
  interleaved (GPT-J's `rotate_every_two`): (x0, x1), (x2, x3), ...
  halves (GPT-NeoX / LLaMA's `rotate_half`): (x0, x_{rd/2}), (x1, x_{rd/2+1}), ...
A rotation is orthogonal, so the backward pass is the rotation by the opposite angle.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Rotary"]


class Rotary:
    """sin/cos tables for positions 0..max_positions-1 and the (inverse) rotation of q or k."""

    def __init__(self, rotary_dim: int, max_positions: int, base: float = 10000.0,
                 interleaved: bool = True) -> None:
        if rotary_dim <= 0 or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be a positive even number, not {rotary_dim}")
        self.dim = rotary_dim
        self.interleaved = interleaved
        inv_freq = base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)  # (rd/2,)
        angle = np.arange(max_positions, dtype=np.float64)[:, None] * inv_freq  # (Tmax, rd/2)
        self.cos = np.cos(angle).astype(np.float32)  # (Tmax, rd/2)
        self.sin = np.sin(angle).astype(np.float32)  # (Tmax, rd/2)

    def rotate(self, x: np.ndarray, out: np.ndarray, inverse: bool = False) -> np.ndarray:
        """out = R(x) (or R^T(x)); x, out (..., T, hs); the pairs as `interleaved` says."""
        T, rd = x.shape[-2], self.dim
        c, s = self.cos[:T], self.sin[:T]  # (T, rd/2), broadcast over (B, nh)
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
