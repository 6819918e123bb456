"""MNIST from its original IDX files (`train-images-idx3-ubyte[.gz]` and friends).

IDX (LeCun's format): a 4-byte big-endian magic `0x00 0x00 <type> <ndim>` with type 0x08 =
unsigned byte, then `ndim` big-endian uint32 sizes, then the data in C order. Images are
`0x00000803` (N, 28, 28), labels `0x00000801` (N,). Files are looked up in `data_dir`, then in
`data_dir/MNIST/raw` (torchvision's layout) and `data_dir/raw`, gzipped or not, with the
official hyphenated names or the common `train-images.idx3-ubyte` variant.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs2sim.runtime.numerics.precision import round_to
from cs2sim.system.errors import ConfigError

__all__ = ["IDX_NAMES", "IMAGE_SIDE", "find_idx_files", "read_idx", "ImageArrays", "MnistFiles"]

IMAGE_SIDE = 28
IDX_NAMES = {  # split -> (images, labels), official names without .gz
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "eval": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
MAGIC_IMAGES, MAGIC_LABELS = 0x00000803, 0x00000801
_SUBDIRS = (".", "MNIST/raw", "raw")


def _candidates(base: str) -> tuple[str, ...]:
    dotted = base.replace("-idx", ".idx")  # train-images.idx3-ubyte (Kaggle, some mirrors)
    return (base, base + ".gz", dotted, dotted + ".gz")


def _find(data_dir: Path, base: str) -> Path | None:
    for sub in _SUBDIRS:
        for name in _candidates(base):
            p = data_dir / sub / name
            if p.is_file():
                return p
    return None


def find_idx_files(data_dir: str | Path | None, split: str) -> tuple[Path, Path] | None:
    """(images, labels) for `split`, or None when `data_dir` holds no MNIST IDX file at all."""
    if not data_dir or not Path(data_dir).is_dir():
        return None
    d = Path(data_dir)
    found = {s: tuple(_find(d, b) for b in IDX_NAMES[s]) for s in IDX_NAMES}
    if not any(p for pair in found.values() for p in pair):
        return None
    images, labels = found[split]
    img_name, lbl_name = IDX_NAMES[split]
    if images is None and labels is None:
        raise ConfigError(
            f"{d} has MNIST files of another split but no {img_name}[.gz] for "
            f"{split}; add {img_name} and {lbl_name} or point data_dir elsewhere."
        )
    if images is None or labels is None:
        have, need = (images, lbl_name) if labels is None else (labels, img_name)
        assert have is not None  # not both: that case was answered above
        raise ConfigError(
            f"{d} has {have.name} but no {need}[.gz]; add it, or remove the MNIST "
            f"files to train on the built-in digits."
        )
    return images, labels


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The array stored in an IDX file (uint8), checked against its magic number and its sizes."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise ConfigError(
            f"MNIST file {path} is truncated or corrupt ({e}); download it again."
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot read MNIST file {path} ({e.strerror}); check it.") from None
    if len(raw) < 4 or struct.unpack(">I", raw[:4])[0] != magic:
        found = f"0x{struct.unpack('>I', raw[:4])[0]:08x}" if len(raw) >= 4 else "nothing"
        kind = "image" if magic == MAGIC_IMAGES else "label"
        raise ConfigError(
            f"MNIST file {path} is not an IDX {kind} file (magic {found}, "
            f"expected 0x{magic:08x}); check the file name."
        )
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ConfigError(f"MNIST file {path} is truncated inside its header; download it again.")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    need = int(np.prod(dims))
    have = len(raw) - header
    if have != need:
        state = "truncated" if have < need else "longer than its header says"
        raise ConfigError(
            f"MNIST file {path} is {state}: it holds {have} of the {need} data bytes "
            f"its header announces; download it again."
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


class ImageArrays:
    """Images (N, 784) uint8 and labels (N,) in memory; batches as the model wants them."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, to_float16: bool = False) -> None:
        self.images = images  # (N, 784) uint8
        self.labels = labels.astype(np.int32, copy=False)  # (N,)
        self.to_float16 = to_float16

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """{"x": float32 (B, 784) in [0, 1], "y": int32 (B,)} for sample indices `idx`."""
        x = self.images[idx].astype(np.float32)  # (B, 784)
        x /= np.float32(255.0)  # pixel/255 exactly (TF convert_image_dtype)
        if self.to_float16:  # what TF's convert_image_dtype(float16) would hand the model
            round_to(x, "float16", out=x)
        return {"x": x, "y": self.labels[idx]}  # y (B,)


@dataclass(frozen=True)
class MnistFiles:
    """Recipe: load one split from its IDX files (also run inside every input worker)."""

    images: str
    labels: str
    to_float16: bool = False

    def load(self) -> ImageArrays:
        """Read and check both files."""
        images = read_idx(Path(self.images), MAGIC_IMAGES)
        labels = read_idx(Path(self.labels), MAGIC_LABELS)
        if images.ndim != 3 or images.shape[1:] != (IMAGE_SIDE, IMAGE_SIDE):
            raise ConfigError(
                f"MNIST file {self.images} holds images of shape "
                f"{images.shape[1:]}; the model needs 28x28."
            )
        if labels.ndim != 1 or len(labels) != len(images):
            raise ConfigError(
                f"MNIST files {Path(self.images).name} and {Path(self.labels).name} "
                f"disagree ({len(images)} images, {labels.shape[0]} labels); "
                f"use files of the same split."
            )
        if len(labels) and labels.max() > 9:
            raise ConfigError(
                f"MNIST file {self.labels} has label {labels.max()} (allowed 0-9); check the file."
            )
        return ImageArrays(images.reshape(len(images), -1), labels, self.to_float16)
