"""`cszoo checkpoint convert` between Hugging Face and cs2sim, and `cszoo checkpoint info`.

A Hugging Face checkpoint is a directory with `config.json` and `model.safetensors` (or the
shards a `model.safetensors.index.json` names), read and written with the `safetensors`
package's numpy API; ours is runtime/artifacts/checkpoint.py's `model-ckpt-<step>.npz`. The
names, layouts and config keys are the one table of runtime/zoo/hf_names.py. Every tensor is
checked against the model the config describes (built shape-only): a checkpoint of another
model, a missing or extra tensor, or a tensor of another shape is refused in one sentence
before anything is written. Conversion only moves, transposes, splits and concatenates float32
arrays (16-bit tensors are widened exactly), so a round trip gives the same bytes.

hf -> cs writes `<out>/model-ckpt-0.npz` (step 0, the weights only: train from it with
`--checkpoint_path ... --load_checkpoint_states model`) and `<out>/params_from_hf.yaml` (the
trainer form's `init.model`); cs -> hf writes `<out>/config.json` and `<out>/model.safetensors`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.artifacts.atomic import atomic_write
from cs2sim.runtime.zoo.hf_names import MODELS, HFModel, Tensor
from cs2sim.system.errors import ConfigError

__all__ = ["convert", "info", "hf_to_cs", "cs_to_hf", "read_hf", "write_hf"]

FMT_RE = re.compile(r"^(hf|cs-(?:auto|\d+\.\d+))$")
SHARDS = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 1 << 20
MAX_HEADER_BYTES = 100 << 20  # safetensors' own limit on a header


def _spec(model: str) -> HFModel:
    if model not in MODELS:
        raise ConfigError(
            f"--model {model} has no Hugging Face converter here; use one of {', '.join(MODELS)}."
        )
    return MODELS[model]


# -- Hugging Face files ------------------------------------------------------------------------


def _load_file(path: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    try:
        return dict(load_file(str(path)))
    except (TypeError, ValueError) as e:  # numpy has no bfloat16: widen it here, exactly
        if "bf16" not in str(e).lower() and "bfloat16" not in str(e).lower():
            raise
        return _load_bf16(path)


def _load_bf16(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file with BF16 tensors (an 8-byte header length, the JSON header, then the
    data; mapped, not read into memory): each BF16 tensor widened to float32 exactly (its 16 bits
    become the high half of the float32's)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= min(MAX_HEADER_BYTES, size - 8):
            raise ConfigError(f"{path} is not a safetensors file (header of {n} bytes).")
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out: dict[str, np.ndarray] = {}
    kinds = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t.get("dtype") not in kinds:
            raise ConfigError(f"{path}: tensor {name} is {t.get('dtype')}, not a float; refused.")
        a, b = (int(x) for x in t["data_offsets"])
        shape = tuple(int(x) for x in t["shape"])
        kind = np.dtype(kinds[t["dtype"]]).newbyteorder("<")
        if not 0 <= a <= b <= data.size or b - a != int(np.prod(shape)) * kind.itemsize:
            raise ConfigError(f"{path}: tensor {name}'s offsets do not fit the file; refused.")
        raw = np.frombuffer(data[a:b], dtype=kind).reshape(shape)
        if t["dtype"] == "BF16":
            out[name] = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            out[name] = raw.astype(np.float32)
    return out


def _json(path: Path) -> dict[str, Any]:
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path} is over {MAX_CONFIG_BYTES} bytes; it is not a config.json.")
    try:
        value = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path} is not valid JSON ({e}); give the checkpoint's own.") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} must be a JSON object; give the checkpoint's config.json.")
    return value


def read_hf(
    path: str | Path, config: str | Path | None = None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(tensors as float32 arrays, config.json) of a Hugging Face checkpoint: a directory, its
    model.safetensors, or its model.safetensors.index.json (shards)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p} does not exist; give a checkpoint file or its directory.")
    folder = p if p.is_dir() else p.parent
    cfg_path = Path(config) if config is not None else folder / "config.json"
    if cfg_path.suffix != ".json" or not cfg_path.is_file():
        cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise ConfigError(f"no config.json beside {p}; pass the Hugging Face config with --config.")
    if p.is_dir():
        p = folder / SHARDS if (folder / SHARDS).is_file() else folder / "model.safetensors"
    if not p.is_file():
        raise ConfigError(f"{p} does not exist; give a model.safetensors file or its directory.")
    if p.name.endswith(".index.json"):
        weight_map = _json(p).get("weight_map") or {}
        tensors: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            if "/" in shard or shard.startswith("."):
                raise ConfigError(f"{p} names shard {shard!r} outside its directory; refused.")
            tensors.update(_load_file(folder / shard))
    else:
        tensors = _load_file(p)
    return {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}, _json(cfg_path)


def write_hf(out: Path, tensors: dict[str, np.ndarray], config: dict[str, Any]) -> None:
    """config.json and model.safetensors, each written to a temp name, fsync'ed and renamed
    (safetensors' save_file streams the tensors: no second copy of them in memory)."""
    import os

    from safetensors.numpy import save_file

    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".model.safetensors.{os.getpid()}.tmp"
    try:
        save_file(
            {k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(tmp), {"format": "np"}
        )
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, out / "model.safetensors")
    finally:
        tmp.unlink(missing_ok=True)
    atomic_write(out / "config.json", json.dumps(config, indent=2) + "\n")


# -- the mapping -------------------------------------------------------------------------------


def _expected(model: str, mp: dict[str, Any]) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    """(validated model params, our weight name -> shape) of the model mp describes."""
    from cs2sim.runtime.compiler.graph import build_meta_model
    from cs2sim.runtime.params import validate_params

    raw = {"train_input": {"batch_size": 1}, "model": mp, "optimizer": {"learning_rate": 0.0}}
    params, _ = validate_params(raw, model, source="the checkpoint's config")
    built = build_meta_model(model, params, "float32")
    return params["model"], {k: tuple(v.shape) for k, v in built.parameters().items()}


def _layers(t: Tensor, n: int) -> range:
    return range(n) if "{i}" in t.cs else range(1)


def _config_to_cs(spec: HFModel, config: dict[str, Any], model: str) -> dict[str, Any]:
    kind = config.get("model_type")
    if kind != spec.model_type:
        raise ConfigError(
            f"the checkpoint's config.json is a {kind!r} model, not {spec.model_type}; pass "
            f"--model {kind} or the {spec.model_type} checkpoint."
        )
    for key, (allowed, why) in (spec.requires or {}).items():
        value = config.get(key, allowed)
        if value != allowed:
            raise ConfigError(
                f"the checkpoint's config.json has {key}: {value!r}; only {allowed!r} can be "
                f"converted ({why})."
            )
    mp: dict[str, Any] = {"name": model, **spec.fixed}
    for ck in spec.config:
        value = config.get(ck.hf, ck.default)
        value = ck.to_cs(value, config) if ck.to_cs else value
        if value is not None:
            mp[ck.cs] = value
    groups = (mp.get("extra_attention_params") or {}).get("num_kv_groups")
    if groups is not None:
        if groups == mp.get("num_heads"):
            mp.pop("extra_attention_params")
        else:
            mp["attention_module"] = "multiquery_attention"
    return mp


def hf_to_cs(
    model: str, tensors: dict[str, np.ndarray], config: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(model params, our weights) of a Hugging Face checkpoint; ConfigError if it does not fit."""
    spec = _spec(model)
    given = _config_to_cs(spec, config, model)
    mp, shapes = _expected(model, given)
    if spec.prefix:
        tensors = {k.removeprefix(spec.prefix): v for k, v in tensors.items()}
    n = int(mp["num_hidden_layers"])
    used: set[str] = set()
    out: dict[str, np.ndarray] = {}
    for t in spec.tensors:
        for i in _layers(t, n):
            name = t.cs.format(i=i)
            if name not in shapes:
                continue  # a tensor this configuration has not (tied output, no biases)
            names = [h.format(i=i) for h in t.hf]
            missing = [h for h in names if h not in tensors]
            if missing:
                raise ConfigError(
                    f"the Hugging Face checkpoint lacks {missing[0]}, which {model} with this "
                    "config.json needs; give the checkpoint that config.json describes."
                )
            want = shapes[name]
            sizes = t.sizes(mp) if t.sizes else [want[-1]]
            for h, size in zip(names, sizes, strict=True):
                piece = (*want[:-1], size)
                piece = piece[::-1] if t.transpose else piece
                if tensors[h].shape != piece:
                    raise ConfigError(
                        f"the Hugging Face tensor {h} has shape {tensors[h].shape}, but the "
                        f"model config.json describes needs {piece}; give the checkpoint and "
                        "config.json of one model."
                    )
            pieces = [tensors[h].T if t.transpose else tensors[h] for h in names]
            value = np.concatenate(pieces, axis=-1) if len(pieces) > 1 else pieces[0]
            out[name] = np.ascontiguousarray(value, dtype=np.float32)
            used.update(names)
    ignored = [re.compile(re.escape(p).replace(r"\{i\}", r"\d+") + "$") for p in spec.ignored]
    extra = [k for k in tensors if k not in used and not any(r.match(k) for r in ignored)]
    if extra:
        raise ConfigError(
            f"the Hugging Face checkpoint has {len(extra)} tensors {model} does not have (e.g. "
            f"{extra[0]}); it is another architecture or config: pass the right --model."
        )
    absent = sorted(set(shapes) - set(out))
    if absent:
        raise ConfigError(f"no Hugging Face tensor maps to {absent[0]}; report it.")
    return given, out


def cs_to_hf(
    model: str, weights: dict[str, np.ndarray], mp: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(Hugging Face tensors, config.json) of our weights of `model` with model params mp."""
    spec = _spec(model)
    mp, shapes = _expected(model, mp)
    for name, shape in shapes.items():
        if name not in weights:
            raise ConfigError(
                f"the checkpoint lacks {name} of {model}; it was written for another model "
                "or config: give the params file it was trained with."
            )
        if tuple(weights[name].shape) != shape:
            raise ConfigError(
                f"the checkpoint's {name} has shape {tuple(weights[name].shape)}, the config "
                f"describes {shape}; give the params file it was trained with."
            )
    tensors: dict[str, np.ndarray] = {}
    n = int(mp["num_hidden_layers"])
    for t in spec.tensors:
        for i in _layers(t, n):
            name = t.cs.format(i=i)
            if name not in shapes:
                continue
            value = np.asarray(weights[name], dtype=np.float32)
            names = [h.format(i=i) for h in t.hf]
            sizes = t.sizes(mp) if t.sizes else [value.shape[-1]]
            pieces = np.split(value, np.cumsum(sizes)[:-1], axis=-1)
            for h, piece in zip(names, pieces, strict=True):
                tensors[h] = np.ascontiguousarray(piece.T if t.transpose else piece)
    config: dict[str, Any] = {"architectures": [spec.architecture], "model_type": spec.model_type}
    for ck in spec.config:
        setting = mp.get(ck.cs)
        config[ck.hf] = ck.to_hf(setting, mp) if ck.to_hf else setting
    for key, (allowed, _) in (spec.requires or {}).items():
        config.setdefault(key, allowed)
    config["torch_dtype"] = "float32"
    return tensors, config


# -- the subcommands ---------------------------------------------------------------------------


def _model_section(path: str, model: str) -> dict[str, Any]:
    """The model section of a params file of either format (the rest of it may be absent)."""
    from cs2sim.runtime.params import load_params
    from cs2sim.runtime.trainer_format.convert import is_trainer

    raw = load_params(path)
    section = raw["trainer"].get("init", {}).get("model") if is_trainer(raw) else raw.get("model")
    if not isinstance(section, dict):
        raise ConfigError(f"{path} has no model section; give the params file of the checkpoint.")
    name = section.get("name", model)
    if name != model:
        raise ConfigError(f"{path} configures {name}, not {model}; pass --model {name}.")
    return dict(section)


def _fmt(value: str, flag: str) -> str:
    if not FMT_RE.match(value):
        raise ConfigError(f"{flag} {value} is not a format; use hf or cs-<release> (e.g. cs-2.4).")
    return value


def convert(args: argparse.Namespace) -> str:
    """hf -> cs-<release> or cs-<release> -> hf."""
    src, tgt = _fmt(args.src_fmt, "--src-fmt"), _fmt(args.tgt_fmt, "--tgt-fmt")
    if (src == "hf") == (tgt == "hf"):
        raise ConfigError(f"--src-fmt {src} --tgt-fmt {tgt} converts nothing; one side must be hf.")
    spec = _spec(args.model)
    path = Path(args.checkpoint_path)
    stem = path.stem if path.is_file() else path.name
    out = Path(args.output_dir or path.parent / f"{stem}_to_{tgt}")
    if src == "hf":
        tensors, config = read_hf(path, args.config)
        mp, weights = hf_to_cs(args.model, tensors, config)
        state = ckpt.TrainState(
            step=0,
            model=weights,
            meta={"model": args.model, "converted_from": "hf", "release": tgt},
        )
        written = ckpt.save_checkpoint(out, state)
        params = {"trainer": {"init": {"model": mp}}}
        atomic_write(out / "params_from_hf.yaml", yaml.safe_dump(params, sort_keys=False))
        return (
            f"Converted {spec.architecture} ({len(tensors)} tensors) to {written} and "
            f"{out / 'params_from_hf.yaml'}."
        )
    state = ckpt.load_checkpoint(ckpt.resolve_checkpoint_path(path))
    saved = state.meta.get("model")
    if saved is not None and saved != args.model:
        raise ConfigError(
            f"{path} is a {saved} checkpoint, not {args.model}; pass --model {saved}."
        )
    tensors, config = cs_to_hf(args.model, state.model, _model_section(args.config, args.model))
    write_hf(out, tensors, config)
    return f"Converted {path} (step {state.step}) to {out / 'model.safetensors'} and config.json."


def info(args: argparse.Namespace) -> str:
    """Format, model, tensors, parameters, dtypes and step of a checkpoint of either kind."""
    p = Path(args.ckpt_path)
    if not ckpt.resolve_checkpoint_path(p).exists():
        raise ConfigError(f"{p} does not exist; give a checkpoint file or its directory.")
    if p.is_dir() and (p / ckpt.INDEX_NAME).is_file():  # a model_dir: its latest
        listed = ckpt.list_checkpoints(p)
        if not listed:
            raise ConfigError(f"{p} holds no checkpoint; give a model-ckpt-<step>.npz.")
        p = listed[-1]
    if p.suffix == ".npz" or ckpt.resolve_checkpoint_path(p).suffix == ".npz":
        state = ckpt.load_checkpoint(ckpt.resolve_checkpoint_path(p))
        arrays = state.model
        fmt, model, step = ckpt.FORMAT, str(state.meta.get("model", "-")), str(state.step)
        extra = f"Optimizer state: {'yes' if state.optimizer else 'no (weights only)'}"
    else:
        arrays, config = read_hf(p)
        fmt, model, step = "hf (safetensors)", str(config.get("model_type", "-")), "-"
        extra = f"Architecture: {', '.join(config.get('architectures') or ['-'])}"
    dtypes = sorted({str(np.asarray(a).dtype) for a in arrays.values()})
    total = sum(int(np.asarray(a).size) for a in arrays.values())
    return "\n".join(
        [
            f"Checkpoint: {p}",
            f"Format: {fmt}",
            f"Model: {model}",
            f"Step: {step}",
            f"Tensors: {len(arrays)}",
            f"Parameters: {total:,}",
            f"Dtypes: {', '.join(dtypes)}",
            extra,
        ]
    )
