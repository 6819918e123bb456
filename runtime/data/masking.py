"""BERT's dynamic masked-LM masks for a whole batch at once, each sample's drawn from
(seed, sample, epoch) alone.

The rule is the Model Zoo's `create_masked_lm_predictions`: min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob))) of the maskable positions, chosen uniformly
without replacement, each replaced by [MASK] 80% of the time, a random word piece 10%, kept
10%. Drawing them per sample from a seeded generator costs ~20 us a sample in generator set-up
alone; here every random number is a hash of (seed, sample, epoch, stream, column)
(splitmix64's finalizer: Steele, Lea and Flood, "Fast Splittable Pseudorandom Number
Generators", OOPSLA 2014), computed for the batch as one array, so a sample's masks are the
same in whatever batch or worker it falls, and a resumed run sees exactly the masks the
uninterrupted one would. The positions are the n smallest of one uniform key per maskable
position: a uniformly drawn n-subset.
"""

from __future__ import annotations

import numpy as np

__all__ = ["hashes", "uniforms", "draw_masks"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31, _S11 = (np.uint64(k) for k in (30, 27, 31, 11))
_LAST = np.uint64(2**64 - 1)


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    out: np.ndarray = z ^ (z >> _S31)
    return out


def hashes(seed: int, idx: np.ndarray, epoch: int, stream: int, width: int) -> np.ndarray:
    """(B, width) uint64: entry (b, t) a hash of (seed, idx[b], epoch, stream, t) alone."""
    head = np.array([seed % 2**64, epoch % 2**64, stream % 2**64], np.uint64)  # (3,)
    head = _mix(head + _GOLDEN)
    z = _mix(np.asarray(idx).astype(np.uint64) * _GOLDEN ^ head[0])  # (B,)
    z = _mix(z ^ head[1]) ^ head[2]
    cols = np.arange(1, width + 1, dtype=np.uint64) * _GOLDEN  # (width,)
    return _mix(z[:, None] + cols)  # (B, width)


def uniforms(seed: int, idx: np.ndarray, epoch: int, stream: int, width: int) -> np.ndarray:
    """(B, width) float64 in [0, 1) from `hashes` (its top 53 bits)."""
    return (hashes(seed, idx, epoch, stream, width) >> _S11).astype(np.float64) * 2.0**-53


def draw_masks(
    ids: np.ndarray,
    maskable: np.ndarray,
    lens: np.ndarray,
    predictions: int,
    prob: float,
    mask_id: int,
    pool: tuple[int, int],
    seed: int,
    idx: np.ndarray,
    epoch: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask the batch `ids` (B, T) in place (samples `idx` (B,) of `epoch`), `maskable` (B, T)
    the positions that may be masked, `lens` (B,) the tokens per sample; -> masked_lm_positions
    (B, P) int32 ascending then 0, masked_lm_ids (B, P) int32 (the original ids there, then 0),
    masked_lm_weights (B, P) float32 (1 on a prediction, 0 on padding)."""
    B, T = ids.shape
    P = predictions
    want = np.maximum(1, np.rint(lens * prob).astype(np.int64))  # round half to even, as round()
    n = np.minimum(np.minimum(P, want), maskable.sum(axis=1))  # (B,)
    key = hashes(seed, idx, epoch, 0, T)  # (B, T) uniform keys, compared as integers
    key[~maskable] = _LAST  # never chosen
    pick = np.argsort(key, axis=1)[:, :P]  # (B, <=P) candidates in random order
    if pick.shape[1] < P:  # fewer positions than predictions
        pick = np.pad(pick, ((0, 0), (0, P - pick.shape[1])), constant_values=T)
    chosen = np.arange(P) < n[:, None]  # (B, P)
    pos = np.sort(np.where(chosen, pick, T), axis=1)  # (B, P) chosen ascending, then T
    valid = pos < T  # (B, P): the first n of each row
    pos = np.where(valid, pos, 0)
    b, k = np.nonzero(valid)  # (m,) each: the predictions
    at = pos[b, k]  # (m,) their positions
    labels = np.zeros((B, P), np.int32)
    labels[b, k] = ids[b, at]
    z = hashes(seed, idx, epoch, 1, P)[b, k]  # (m,): two uniforms from its two halves
    u = (z >> np.uint64(40)).astype(np.float64) * 2.0**-24  # 80% [MASK], 10% random, 10% kept
    r = (z & np.uint64(0xFFFFFFFF)).astype(np.float64) * 2.0**-32
    lo, hi = pool
    swapped = np.minimum(lo + (r * (hi - lo)).astype(np.int64), hi - 1)
    ids[b, at] = np.where(u < 0.8, mask_id, np.where(u < 0.9, swapped, ids[b, at]))
    return pos.astype(np.int32), labels, valid.astype(np.float32)
