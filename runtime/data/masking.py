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

import functools

import numpy as np

__all__ = ["hashes", "uniforms", "predictions_per_sample", "draw_masks"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_S30, _S27, _S31, _S11 = (np.uint64(k) for k in (30, 27, 31, 11))
_LAST = np.uint64(2**64 - 1)
_P80, _P90 = np.uint64(round(0.8 * 2**24)), np.uint64(round(0.9 * 2**24))


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on uint64 (wrapping arithmetic)."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    out: np.ndarray = z ^ (z >> _S31)
    return out


@functools.lru_cache(maxsize=64)
def _head(seed: int, epoch: int, stream: int) -> np.uint64:
    """One hash of (seed, epoch, stream), made once (a batch's ops on tiny arrays cost as
    much as on its whole)."""
    h = _mix(np.array([seed % 2**64, epoch % 2**64, stream % 2**64], np.uint64) + _GOLDEN)
    return np.uint64(int(_mix(_mix(h[0:1] ^ h[1:2]) ^ h[2:3])[0]))


@functools.lru_cache(maxsize=16)
def _columns(width: int) -> np.ndarray:
    """(width,) uint64: each column's offset in the hash."""
    cols = np.arange(1, width + 1, dtype=np.uint64) * _GOLDEN
    cols.flags.writeable = False
    return cols


def hashes(seed: int, idx: np.ndarray, epoch: int, stream: int, width: int) -> np.ndarray:
    """(B, width) uint64: entry (b, t) a hash of (seed, idx[b], epoch, stream, t) alone."""
    z = _mix(np.asarray(idx).astype(np.uint64) * _GOLDEN + _head(seed, epoch, stream))  # (B,)
    return _mix(z[:, None] + _columns(width))  # (B, width)


def uniforms(seed: int, idx: np.ndarray, epoch: int, stream: int, width: int) -> np.ndarray:
    """(B, width) float64 in [0, 1) from `hashes` (its top 53 bits)."""
    return (hashes(seed, idx, epoch, stream, width) >> _S11).astype(np.float64) * 2.0**-53


def predictions_per_sample(
    maskable: np.ndarray, lens: np.ndarray, predictions: int, prob: float
) -> np.ndarray:
    """(N,) int64: min(predictions, max(1, round(len * prob)), the maskable positions) for
    `maskable` (N, T), `lens` (N,): fixed per sample, so computable once."""
    want = np.maximum(1, np.rint(lens * prob).astype(np.int64))  # round half to even, as round()
    n: np.ndarray = np.minimum(np.minimum(predictions, want), maskable.sum(axis=1))
    return n


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
    n: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mask the batch `ids` (B, T) in place (samples `idx` (B,) of `epoch`), `maskable` (B, T)
    the positions that may be masked, `lens` (B,) the tokens per sample; -> masked_lm_positions
    (B, P) int32 ascending then 0, masked_lm_ids (B, P) int32 (the original ids there, then 0),
    masked_lm_weights (B, P) float32 (1 on a prediction, 0 on padding). `n` (B,): the
    predictions per sample when the caller has them (`predictions_per_sample`)."""
    B, T = ids.shape
    P = predictions
    if n is None:
        n = predictions_per_sample(maskable, lens, P, prob)
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
    z = _mix(key[b, at] ^ _GOLDEN)  # (m,) a second hash of each chosen key: two uniforms
    u = z >> np.uint64(40)  # (m,) uniform in [0, 2^24): 80% [MASK], 10% random, 10% kept
    lo, hi = pool  # a random word piece from the low 32 bits: lo + floor(r * (hi - lo))
    r = ((z & np.uint64(0xFFFFFFFF)) * np.uint64(hi - lo)) >> np.uint64(32)
    swapped = lo + r.astype(np.int64)
    ids[b, at] = np.where(u < _P80, mask_id, np.where(u < _P90, swapped, ids[b, at]))
    return pos.astype(np.int32), labels, valid.astype(np.float32)
