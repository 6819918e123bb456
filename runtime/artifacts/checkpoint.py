"""Checkpoints in <model_dir>: `model-ckpt-<step>.npz` files and a `checkpoint` index.

Format (portable: numpy's `.npz`, a zip of `.npy` arrays readable without cs2sim):

* every array of the training state is one member named by its path, e.g. `model/fc1.weight`,
  `optimizer/m/fc1.weight`; everything else (step, loss-scale state, data position, RNG states,
  scalars of the optimizer state) is one JSON string member `__meta__`, in which each array
  appears as a reference ``{"__array__": "<member>"}``;
* `__digest__` is the sha256 of the payload (every array's name, dtype, shape and bytes, then the
  meta JSON), so a checkpoint verifies itself wherever it is copied to (`--checkpoint_path`);
* the index `<model_dir>/checkpoint` (JSON) lists the checkpoints in the order they were saved,
  each with its step and the sha256 of the whole file; the last one is the latest.

Writing is crash-safe: a checkpoint is written to a hidden temp name, fsync'ed and `os.replace`d
into place, then the index is replaced the same way, so a temp file is never listed as a
checkpoint and a half-written file never carries the final name (the temp files of a writer that
was killed are deleted at the next save). Loading verifies the file hash
(when indexed) and the payload digest; a corrupted or truncated checkpoint is never loaded:
`load_latest` warns and falls back to the previous valid one.

Nothing read back is trusted: the index and the metadata are read with bounded JSON
(runtime/artifacts/safejson.py: size, depth), a step must be a non-negative integer no larger
than MAX_STEP and equal the step in the file's name, and a symlink in model_dir with a
checkpoint's name is not followed (it is not a checkpoint of this run).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import numpy as np

from cs2sim.runtime.artifacts import safejson
from cs2sim.runtime.artifacts.atomic import (
    atomic_write,
    atomic_writer,
    open_regular,
    remove_stale_temps,
)
from cs2sim.runtime.artifacts.npz_read import npy_header, read_members
from cs2sim.system.errors import RuntimeFailure

__all__ = [
    "INDEX_NAME",
    "TrainState",
    "checkpoint_file",
    "save_checkpoint",
    "load_checkpoint",
    "model_budget",
    "load_latest",
    "list_checkpoints",
    "step_of",
    "resolve_checkpoint_path",
    "CorruptCheckpoint",
]

log = logging.getLogger("cs2sim.checkpoint")

INDEX_NAME = "checkpoint"
FORMAT = "cs2sim-checkpoint-1"
_NAME_RE = re.compile(r"^model-ckpt-(\d{1,16})\.npz$")
MAX_STEP = 2**53  # runtime/sections.py MAX_INT: the largest step count a run can ask for
# the files save_checkpoint writes (whose temp files a killed run may leave behind)
MAX_MEMBERS = 1 << 16  # arrays in one checkpoint (a GPT-3 XL state has a few hundred)
MAX_EXPANSION = 16  # members' declared bytes per byte of file (np.savez stores: 1x)
_WRITTEN_RE = re.compile(rf"^(?:model-ckpt-\d+\.npz|{INDEX_NAME})$")


class CorruptCheckpoint(RuntimeFailure):
    """A checkpoint file is truncated, corrupted or not a cs2sim checkpoint."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class TrainState:
    """Everything needed to continue training exactly where a run stopped."""

    step: int
    model: dict[str, np.ndarray]
    optimizer: dict[str, Any] = field(default_factory=dict)
    loss_scaler: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    rng: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # model name, half format, ...
    path: Path | None = None


def checkpoint_file(model_dir: Path, step: int) -> Path:
    """The file name of the checkpoint of global step `step`."""
    return Path(model_dir) / f"model-ckpt-{step}.npz"


# 1) state <-> (arrays, JSON) with types preserved ------------------------------------------


def _encode(obj: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able form of `obj`; arrays go to `arrays` under their path."""
    if isinstance(obj, np.ndarray):
        arrays[path] = obj
        return {"__array__": path}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__dict__": {k: _encode(v, f"{path}/{k}", arrays) for k, v in obj.items()}}
        items = [
            [_encode(k, f"{path}/k{i}", arrays), _encode(v, f"{path}/{i}", arrays)]
            for i, (k, v) in enumerate(obj.items())
        ]
        return {"__items__": items}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v, f"{path}/{i}", arrays) for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [_encode(v, f"{path}/{i}", arrays) for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store a {type(obj).__name__} at {path} in a checkpoint")


def _decode(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """Inverse of `_encode`."""
    if isinstance(obj, list):
        return [_decode(v, arrays) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__array__" in obj:
        return arrays[obj["__array__"]]
    if "__dict__" in obj:
        return {k: _decode(v, arrays) for k, v in obj["__dict__"].items()}
    if "__items__" in obj:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in obj["__items__"]}
    if "__tuple__" in obj:
        return tuple(_decode(v, arrays) for v in obj["__tuple__"])
    raise ValueError(f"unknown tagged value {sorted(obj)}")


def _digest(arrays: dict[str, np.ndarray], meta_json: str) -> str:
    """sha256 over every array (name, dtype, shape, bytes) in name order, then the meta JSON."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    h.update(meta_json.encode())
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    with open_regular(path) as f:
        return _sha256_of(f)


def _sha256_of(f: BinaryIO) -> str:
    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 22), b""):
        h.update(chunk)
    return h.hexdigest()


def model_budget(num_params: int) -> int:
    """The most array bytes a checkpoint of a model of `num_params` scalars can hold: float32
    weights and at most four optimizer slots of the same shape (Adam's two moments are the
    most any optimizer here keeps), plus 64 MiB for the loss scale, data position (an epoch's
    sample order) and RNG states."""
    return 4 * 5 * int(num_params) + (64 << 20)


def _check_archive(f: BinaryIO, size: int, budget: int | None = None) -> None:
    """ValueError unless every member's declared size fits the file, checked BEFORE any array is
    allocated: the members' uncompressed sizes together at most MAX_EXPANSION times the file
    (ours are stored, 1x; a zip bomb declares thousands of times), and each .npy header's
    shape and dtype at most the bytes its member holds (a 282-byte file declaring 2^40 floats
    is refused here, not by a MemoryError)."""
    f.seek(0)
    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            raise ValueError(f"it has {len(infos):,} members (at most {MAX_MEMBERS:,})")
        total = sum(i.file_size for i in infos)
        if total > MAX_EXPANSION * size + (1 << 20):
            raise ValueError(
                f"its members declare {total:,} bytes, more than a file of {size:,} bytes can hold"
            )
        if budget is not None and total > budget:
            raise ValueError(
                f"its members declare {total:,} bytes, more than a checkpoint of "
                f"this model holds (at most {budget:,})"
            )
        for info in infos:
            with zf.open(info) as m:
                shape, _, dtype = npy_header(m, info.filename)
                need = dtype.itemsize * math.prod(shape)
                if need > info.file_size:
                    raise ValueError(
                        f"member {info.filename[:60]!r} declares {need:,} bytes of "
                        f"array in {info.file_size:,} bytes"
                    )
    f.seek(0)


# 2) the index ------------------------------------------------------------------------------


def _read_index(model_dir: Path) -> list[dict[str, Any]] | None:
    """Index entries in save order; None when the index is missing or unreadable."""
    path = Path(model_dir) / INDEX_NAME
    if not path.exists():
        return None
    try:
        if path.is_symlink():
            raise ValueError("it is a symlink")
        entries = safejson.read(path)["checkpoints"]
        if not isinstance(entries, list):
            raise TypeError("its checkpoints are not a list")
        out = []
        for e in entries:
            m = (
                _NAME_RE.match(e["file"])
                if isinstance(e, dict) and isinstance(e.get("file"), str)
                else None
            )
            if m is None:
                continue
            if (
                not _valid_step(e.get("step"))
                or e["step"] != int(m.group(1))
                or not isinstance(e.get("sha256"), str)
            ):
                raise ValueError(f"its entry for {e['file']} has the step {e.get('step')!r}")
            out.append(e)
        return out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning(f'The checkpoint index "{path}" is unreadable ({exc}); scanning {model_dir}.')
        return None


def _valid_step(step: object) -> TypeGuard[int]:
    """A global step as a checkpoint may hold it: an int (not a bool), 0 <= step <= MAX_STEP."""
    return type(step) is int and 0 <= step <= MAX_STEP


def _write_index(model_dir: Path, entries: list[dict[str, Any]]) -> None:
    doc = {
        "format": FORMAT,
        "latest": entries[-1]["file"] if entries else None,
        "checkpoints": entries,
    }
    atomic_write(
        Path(model_dir) / INDEX_NAME, (json.dumps(doc, indent=2) + "\n").encode(), within=model_dir
    )


def list_checkpoints(model_dir: Path) -> list[Path]:
    """Checkpoint files in save order, oldest first (not verified; missing files left out).

    Files on disk the index does not list (the run stopped between the two renames) count as
    newer than every indexed one, until the next save indexes them.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        return []
    on_disk = {
        p.name: p for p in model_dir.iterdir() if _NAME_RE.match(p.name) and not p.is_symlink()
    }
    entries = _read_index(model_dir) or []
    ordered = [on_disk.pop(e["file"]) for e in entries if e["file"] in on_disk]
    orphans = sorted(on_disk.values(), key=lambda p: (p.stat().st_mtime, _step_of(p)))
    return ordered + orphans


def _step_of(path: Path) -> int:
    m = _NAME_RE.match(path.name)
    return int(m.group(1)) if m else -1


def step_of(path: Path) -> int | None:
    """The global step in a checkpoint's name (`model-ckpt-40.npz` -> 40), None if not ours."""
    step = _step_of(Path(path))
    return None if step < 0 else step


# 3) save and load --------------------------------------------------------------------------


def save_checkpoint(model_dir: Path, state: TrainState, keep_max: int | None = None) -> Path:
    """Write `state` as `model-ckpt-<step>.npz` atomically, index it, keep the newest `keep_max`."""
    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for stale in remove_stale_temps(model_dir, _WRITTEN_RE):
        log.info(f'Removed "{stale.name}", left half-written by a run that was killed.')
    arrays: dict[str, np.ndarray] = {}
    tree = {
        "format": FORMAT,
        "step": int(state.step),
        "model": _encode(state.model, "model", arrays),
        "optimizer": _encode(state.optimizer, "optimizer", arrays),
        "loss_scaler": _encode(state.loss_scaler, "loss_scaler", arrays),
        "data": _encode(state.data, "data", arrays),
        "rng": _encode(state.rng, "rng", arrays),
        "meta": _encode(state.meta, "meta", arrays),
    }
    meta_json = json.dumps(tree, sort_keys=True)
    members = dict(arrays)
    members["__meta__"] = np.array(meta_json)
    members["__digest__"] = np.array(_digest(arrays, meta_json))
    # write to a hidden temp name (never matches model-ckpt-<step>.npz), then rename
    final = checkpoint_file(model_dir, state.step)
    with atomic_writer(final, within=model_dir) as f:
        # numpy's stubs read a member named like savez's keyword (allow_pickle, numpy >= 2.1) into
        # the keyword; ours are layer names and __meta__/__digest__, never that
        np.savez(f, **members)  # type: ignore[arg-type]
    # index: the checkpoints there are, in save order, including any a killed run renamed but
    # never indexed (adopted here: left out, one would count as newer than this one forever);
    # an older file of this name (a warm-started run re-saving a step) gives way; then this one
    known = {e["file"]: e for e in _read_index(model_dir) or []}
    entries = [
        known.get(p.name) or {"file": p.name, "step": _step_of(p), "sha256": _file_sha256(p)}
        for p in list_checkpoints(model_dir)
        if p.name != final.name and p.is_file()
    ]  # a FIFO of that name is no checkpoint
    entries.append({"file": final.name, "step": int(state.step), "sha256": _file_sha256(final)})
    if keep_max:
        for old in entries[:-keep_max]:
            (model_dir / old["file"]).unlink(missing_ok=True)
        entries = entries[-keep_max:]
    _write_index(model_dir, entries)
    return final


def _indexed_sha(path: Path) -> str | None:
    for e in _read_index(path.parent) or []:
        if e["file"] == path.name:
            return str(e["sha256"])
    return None


def load_checkpoint(path: Path, budget: int | None = None) -> TrainState:
    """Load and verify one checkpoint; CorruptCheckpoint if it is damaged. `budget`: the most
    array bytes the model's checkpoint can hold (`model_budget`), checked before reading."""
    path = Path(path)
    expected = _indexed_sha(path) if _NAME_RE.match(path.name) else None
    try:
        with open_regular(path) as f:  # a FIFO or a device: refused, never waited on
            if expected is not None and _sha256_of(f) != expected:
                raise ValueError("its sha256 does not match the index")
            _check_archive(f, os.fstat(f.fileno()).st_size, budget)
            members = read_members(f)  # one copy per array (npz_read.py), not np.load's
            arrays = {name: a for name, a in members.items() if not name.startswith("__")}
            meta_json = str(members["__meta__"])
            digest = str(members["__digest__"])
        if _digest(arrays, meta_json) != digest:
            raise ValueError("its payload digest does not match")
        tree = safejson.loads(meta_json)
        if not isinstance(tree, dict) or tree.get("format") != FORMAT:
            raise ValueError(f"it is not a {FORMAT} file")
        step = tree.get("step")
        named = _NAME_RE.match(path.name)
        if not _valid_step(step) or (named is not None and step != int(named.group(1))):
            raise ValueError(
                f"its global step {str(step)[:40]} is not a step of this run "
                f"(an integer from 0 to {MAX_STEP}"
                + (f", {named.group(1)} as its name says)" if named else ")")
            )
        return TrainState(
            step=step,
            model=_decode(tree["model"], arrays),
            optimizer=_decode(tree["optimizer"], arrays),
            loss_scaler=_decode(tree["loss_scaler"], arrays),
            data=_decode(tree["data"], arrays),
            rng=_decode(tree["rng"], arrays),
            meta=_decode(tree["meta"], arrays),
            path=path,
        )
    except FileNotFoundError:
        raise CorruptCheckpoint(
            f'Checkpoint "{path}" does not exist; check the path.', "it does not exist"
        ) from None
    except MemoryError:
        raise CorruptCheckpoint(
            f'Checkpoint "{path}" is too large for this host\'s memory; use another checkpoint.',
            "it is too large for this host's memory",
        ) from None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        EOFError,
        RecursionError,
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
    ) as exc:
        raise CorruptCheckpoint(
            f'Checkpoint "{path}" cannot be loaded ({exc}); use another checkpoint.', str(exc)
        ) from None


def load_latest(model_dir: Path, budget: int | None = None) -> TrainState | None:
    """The newest checkpoint in `model_dir` that verifies (damaged ones: warning, skipped)."""
    for path in reversed(list_checkpoints(model_dir)):
        try:
            return load_checkpoint(path, budget)
        except CorruptCheckpoint as exc:
            log.warning(
                f'Checkpoint "{path}" is damaged ({exc.reason}); skipping it and '
                "trying the previous one."
            )
    return None


def resolve_checkpoint_path(path: str | Path) -> Path:
    """Accept `model-ckpt-<step>.npz` or the TF-style prefix `model-ckpt-<step>`."""
    p = Path(path)
    if not p.exists() and p.with_name(p.name + ".npz").exists():
        return p.with_name(p.name + ".npz")
    return p
