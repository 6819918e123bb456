"""Token files for the language models: nanoGPT-style uint16 `.bin` or numpy `.npy`.

A `.bin` is a flat little-endian uint16 array of token ids (what nanoGPT's prepare.py writes); a
`.npy` holds any integer array, flattened. Files are memory-mapped, never read whole.
Sample i of a file is the window tokens[i*T : i*T + T + 1] with T = max_sequence_length:
input_ids = window[:-1], labels = window[1:] (the next token). Windows do not cross files.

Which files: `data_dir` may be one token file; a directory gives the split's own file
(train: train.*; eval: val.*, validation.*, eval.*, test.*) when there is one, else every token
file in it, in name order.

Token ids must be < vocab_size: files up to CHECK_ALL_TOKENS tokens are checked whole when
loaded; larger ones batch by batch (a full scan of a 10 GB file would stall the start).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cs2sim.system.errors import ConfigError

__all__ = ["TOKEN_SUFFIXES", "SPLIT_STEMS", "find_token_files", "TokenWindows", "TokenFiles"]

TOKEN_SUFFIXES = (".bin", ".npy")
SPLIT_STEMS = {"train": ("train",), "eval": ("val", "validation", "eval", "test")}
CHECK_ALL_TOKENS = 2**28
_CHUNK = 2**24


def find_token_files(data_dir: str | Path | None, split: str) -> list[Path]:
    """The token files for `split` ([] when there are none: the caller falls back)."""
    if not data_dir:
        return []
    d = Path(data_dir)
    if d.is_file():
        return [d] if d.suffix in TOKEN_SUFFIXES else []
    if not d.is_dir():
        return []
    files = sorted(p for p in d.iterdir() if p.suffix in TOKEN_SUFFIXES and p.is_file())
    own = [p for p in files if p.stem in SPLIT_STEMS[split]]
    if own:
        return own[:1]
    others = [p for s, stems in SPLIT_STEMS.items() if s != split for p in files if p.stem in stems]
    if others and len(others) == len(files):
        names = "/".join(f"{s}.bin" for s in SPLIT_STEMS[split])
        raise ConfigError(
            f"{d} has token files for another split ({others[0].name}) but no "
            f"{names} for {split}; add one or point data_dir elsewhere."
        )
    return files


def _open(path: Path) -> np.ndarray:
    """A read-only memory map of the file's tokens, flat."""
    try:
        if path.suffix == ".bin":
            if path.stat().st_size % 2:
                raise ConfigError(
                    f"token file {path} has an odd size, so it is not uint16 tokens; "
                    f"write it with np.uint16 (nanoGPT's prepare.py format)."
                )
            return np.memmap(path, dtype="<u2", mode="r")
        arr: np.ndarray = np.load(path, mmap_mode="r")  # a .npy file: one array
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read token file {path} ({e}); check it.") from None
    if not np.issubdtype(arr.dtype, np.integer):
        raise ConfigError(
            f"token file {path} holds {arr.dtype} values; token ids must be integers."
        )
    return arr.reshape(-1)


def _max_token(tokens: np.ndarray) -> int:
    return max(
        (int(tokens[i : i + _CHUNK].max()) for i in range(0, len(tokens), _CHUNK)), default=0
    )


class TokenWindows:
    """Windows of T+1 tokens over one or more memory-mapped files."""

    def __init__(
        self,
        arrays: list[np.ndarray],
        names: list[str],
        seq_len: int,
        vocab_size: int,
        verify: bool = True,
    ) -> None:
        self.arrays, self.names, self.T, self.vocab_size = arrays, names, seq_len, vocab_size
        counts = [max((len(a) - 1) // seq_len, 0) for a in arrays]
        self.starts = np.concatenate([[0], np.cumsum(counts)])  # (F+1,) first sample of each file
        self.check_each_batch = sum(len(a) for a in arrays) > CHECK_ALL_TOKENS
        if verify and not self.check_each_batch:
            for a, name in zip(arrays, names, strict=True):
                self._check(_max_token(a), name)

    def _check(self, top: int, name: str) -> None:
        if top >= self.vocab_size:
            raise ConfigError(
                f"token file {name} has token id {top} but vocab_size is "
                f"{self.vocab_size}; raise vocab_size or re-tokenise the data."
            )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def batch(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """{"input_ids": int32 (B, T), "labels": int32 (B, T)} for sample indices `idx`."""
        T = self.T
        files = np.searchsorted(self.starts, idx, side="right") - 1  # (B,)
        w = np.empty((len(idx), T + 1), dtype=np.int32)  # (B, T+1)
        for row, (f, i) in enumerate(zip(files, idx, strict=True)):
            s = (int(i) - int(self.starts[f])) * T
            w[row] = self.arrays[f][s : s + T + 1]
        if self.check_each_batch and len(idx):
            top = int(w.max())
            if top >= self.vocab_size:
                self._check(top, self.names[int(files[np.argmax(w.max(axis=1))])])
        return {
            "input_ids": np.ascontiguousarray(w[:, :-1]),  # (B, T)
            "labels": np.ascontiguousarray(w[:, 1:]),
        }  # (B, T) the next tokens


@dataclass(frozen=True)
class TokenFiles:
    """Recipe: windows over token files (also run inside every input worker)."""

    paths: tuple[str, ...]
    seq_len: int
    vocab_size: int
    verify: bool = True  # scan for ids >= vocab_size (workers skip it: the consumer did it)

    def load(self) -> TokenWindows:
        """Memory-map the files and check them."""
        arrays = [_open(Path(p)) for p in self.paths]
        data = TokenWindows(arrays, list(self.paths), self.seq_len, self.vocab_size, self.verify)
        if len(data) == 0:
            total = sum(len(a) for a in arrays)
            raise ConfigError(
                f"token files {', '.join(self.paths)} hold {total} tokens, too few "
                f"for one sample of max_sequence_length {self.seq_len} + 1; "
                f"lower max_sequence_length or add data."
            )
        return data
