"""The fallback when no MNIST files are present: real handwritten digits shipped with cs2sim.

`digits.csv.gz` beside this module holds 1797 8x8 images (values 0-16) of digits written by 43
people: the test set of the UCI "Optical Recognition of Handwritten Digits" data set (CC BY 4.0;
source, citation and license in digits.LICENSE.md), the same file scikit-learn's `load_digits`
reads. No download. We bring them to MNIST's form:
1. bilinear upscale 8x8 -> 20x20 (pixel centres aligned, edges clamped), since MNIST digits are
   size-normalised into a 20x20 box;
2. 4 px of zero padding on every side -> 28x28, MNIST's framing of that box;
3. values 0-16 -> 0-255 uint8, so batches are pixel/255 exactly as with the IDX files.
The split is fixed (not the run's seed): 300 eval images drawn per class in proportion
(stratified, largest remainder) with a seeded permutation, 1497 train, disjoint. The arrays are
cached as an .npz in the data cache so input workers never parse the text table.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs2sim.runtime.data.cache import cached_entry
from cs2sim.runtime.data.mnist import ImageArrays

__all__ = [
    "TABLE",
    "DIGITS_TOTAL",
    "load_table",
    "EVAL_SIZE",
    "SPLIT_SEED",
    "bilinear_matrix",
    "upscale_to_mnist",
    "stratified_split",
    "digits_cache",
    "DigitsArrays",
]

TABLE = Path(__file__).with_name("digits.csv.gz")  # (1797, 65): 64 pixels 0..16, then the digit
DIGITS_TOTAL = 1797  # images in the table
EVAL_SIZE = 300
SPLIT_SEED = 0
BOX, PAD = 20, 4  # MNIST: a 20x20 digit box centred in 28x28
CACHE_VERSION = 1


def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of 1-D bilinear resampling with aligned pixel centres."""
    w = np.zeros((n_out, n_in), dtype=np.float64)
    c = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5  # (n_out,) source coordinate
    c = np.clip(c, 0, n_in - 1)
    i0 = np.floor(c).astype(int)
    i1 = np.minimum(i0 + 1, n_in - 1)
    frac = c - i0
    np.add.at(w, (np.arange(n_out), i0), 1 - frac)
    np.add.at(w, (np.arange(n_out), i1), frac)
    return w


def upscale_to_mnist(images: np.ndarray, max_value: float = 16.0) -> np.ndarray:
    """(N, 8, 8) digits in [0, max_value] -> (N, 784) uint8 in MNIST's 28x28 framing."""
    n, h, w = images.shape
    wy, wx = bilinear_matrix(h, BOX), bilinear_matrix(w, BOX)  # (20, 8) each
    big = np.einsum("yi,nij,xj->nyx", wy, images.astype(np.float64), wx)  # (N, 20, 20)
    big = np.clip(np.rint(big * (255.0 / max_value)), 0, 255).astype(np.uint8)
    out = np.zeros((n, BOX + 2 * PAD, BOX + 2 * PAD), dtype=np.uint8)  # (N, 28, 28)
    out[:, PAD : PAD + BOX, PAD : PAD + BOX] = big
    return out.reshape(n, -1)  # (N, 784)


def stratified_split(labels: np.ndarray, n_eval: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, eval indices), sorted; eval takes each class in proportion."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    share = counts * n_eval / len(labels)  # (C,) ideal eval count per class
    take = np.floor(share).astype(int)
    order = np.argsort(-(share - take), kind="stable")  # largest remainders get the leftovers
    take[order[: n_eval - take.sum()]] += 1
    eval_idx = []
    for c, k in zip(classes, take, strict=True):
        members = np.flatnonzero(labels == c)
        eval_idx.append(rng.permutation(members)[:k])
    ev = np.sort(np.concatenate(eval_idx))
    train = np.setdiff1d(np.arange(len(labels)), ev)
    return train, ev


def load_table(path: Path = TABLE) -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 8, 8) float64 in 0..16, digits (1797,) int32) from the shipped table."""
    with gzip.open(path, "rt", encoding="ascii") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)  # (1797, 65)
    if table.shape != (DIGITS_TOTAL, 65):
        raise ValueError(f"{path} holds a {table.shape} table, not ({DIGITS_TOTAL}, 65)")
    return table[:, :64].reshape(-1, 8, 8).astype(np.float64), table[:, 64].astype(np.int32)


def _build(tmp: Path) -> None:
    images, y = load_table()  # (1797, 8, 8), (1797,)
    x = upscale_to_mnist(images)  # (1797, 784) uint8
    train, ev = stratified_split(y, EVAL_SIZE, SPLIT_SEED)
    np.savez(tmp / "digits.npz", train_x=x[train], train_y=y[train], eval_x=x[ev], eval_y=y[ev])


def digits_cache(root: Path | None = None) -> Path:
    """Path of the cached .npz (built on first use)."""
    return cached_entry(f"optdigits-28x28-v{CACHE_VERSION}", _build, root) / "digits.npz"


@dataclass(frozen=True)
class DigitsArrays:
    """Recipe: one split of the cached 28x28 digits."""

    path: str
    split: str
    to_float16: bool = False

    def load(self) -> ImageArrays:
        """Read the split from the .npz."""
        with np.load(self.path) as z:
            return ImageArrays(z[f"{self.split}_x"], z[f"{self.split}_y"], self.to_float16)
