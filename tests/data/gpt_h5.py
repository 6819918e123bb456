"""GPT samples in the Model Zoo's HDF5 layout for the data tests: rows, files and params."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np

T, VOCAB = 32, 300


def rows(n: int, seed: int = 0) -> np.ndarray:
    """n samples of random ids, no padding: (n, 3, T) input ids, attention mask, labels."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, VOCAB, (n, T + 1)).astype(np.int32)
    return np.stack([ids[:, :-1], np.ones((n, T), np.int32), ids[:, 1:]], axis=1)  # (n, 3, T)


def write(path: Path, data: np.ndarray, gz: bool = True, chunk: int = 1, **file_kw: Any) -> Path:
    """`data` as an .h5 file: gzip chunks of `chunk` samples (the Model Zoo's layout with 1),
    or contiguous and uncompressed; `file_kw` goes to h5py.File (libver, ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w", **file_kw) as f:
        f.attrs["n_examples"] = len(data)
        kw = {"chunks": (chunk, 3, T), "compression": "gzip"} if gz else {}
        f.create_dataset("data", data=data, dtype="i4", **kw)
    return path


def params(d: Path, **kw: Any) -> dict[str, Any]:
    """Params reading the .h5 files in `d` with GptHDF5DataProcessor (shuffled unless `kw`
    says otherwise)."""
    sec = {
        "data_processor": "GptHDF5DataProcessor",
        "data_dir": str(d),
        "batch_size": 4,
        "max_sequence_length": T,
        "vocab_size": VOCAB,
        "shuffle": True,
        **kw,
    }
    return {"train_input": sec, "model": {"vocab_size": VOCAB, "max_position_embeddings": T}}
