"""Input pipelines: `build_input(params, split, model_name, seed)` -> a deterministic BatchStream.

Per model family (the model class's `family`, runtime/registry.py):
  mnist  MNIST IDX files in data_dir (runtime/data/mnist.py), else the UCI digits brought
         to 28x28 (runtime/data/digits.py). Batches {"x": float32 (B, 784), "y": int32 (B,)}.
  lm     token files in data_dir (runtime/data/tokens.py), else a byte-level corpus of the Python
         standard library (runtime/data/corpus.py).
         Batches {"input_ids": int32 (B, T), "labels": int32 (B, T)}.
  mlm    BERT's masked-LM (+ next-sentence) samples of the same text (runtime/data/mlm.py):
         input_ids, token_type_ids (B, T), masked_lm_positions / _ids / _weights (B, P),
         next_sentence_label (B,).
  pairs  BERT fine-tuning's labelled segment pairs of the same text (runtime/data/classify.py):
         input_ids, token_type_ids (B, T), labels (B,).
The split's section is `train_input` or `eval_input` (validated params; missing keys take the
INPUT_SCHEMA defaults). Its `shuffle_seed` overrides `seed` for shuffling. `num_workers` > 0, or
else `num_parallel_calls` (0 and -1: AUTOTUNE), starts input worker processes
(runtime/data/workers.py). `data_dir` may be a list: read in order, and sharded across the input
workers in order when there are any (runtime/data/shards.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from cs2sim.runtime import registry
from cs2sim.runtime.data.classify import build_pairs
from cs2sim.runtime.data.corpus import stdlib_corpus
from cs2sim.runtime.data.digits import DIGITS_TOTAL, EVAL_SIZE, DigitsArrays, digits_cache
from cs2sim.runtime.data.hdf5 import H5Files
from cs2sim.runtime.data.mlm import build_mlm, sequence_length
from cs2sim.runtime.data.mnist import MnistFiles, find_idx_files
from cs2sim.runtime.data.processors import Resolved, resolve
from cs2sim.runtime.data.shards import (
    ConcatRecipe,
    ShardPlan,
    SliceRecipe,
    cut,
    data_dirs,
    part_sizes,
)
from cs2sim.runtime.data.stream import SPLIT_SALT, BatchStream, Plan, Recipe
from cs2sim.runtime.data.tabular import BertCsvFiles, GlueTsv
from cs2sim.runtime.data.tfrecord import TfRecordFiles
from cs2sim.runtime.data.tokens import TokenFiles, find_token_files
from cs2sim.runtime.sections import AUTOTUNE, EVAL_INPUT_SCHEMA, INPUT_SCHEMA
from cs2sim.system.errors import ConfigError

__all__ = ["BatchStream", "Plan", "build_input", "input_config", "model_family"]

log = logging.getLogger("cs2sim.data")

SECTION = {"train": "train_input", "eval": "eval_input"}
STAND_IN_PREFIX = "STAND-IN data, not your data set: "
# set by csrun_wse / run.py CSX (runtime/job/remote_stream.py): the streamers to cut the data for
STREAMERS_KEY = "_streamers"
T = TypeVar("T")
# an input family's builder: (section, params, split) -> (recipes, what the data is)
Builder = Callable[[dict[str, Any], dict[str, Any], str], tuple[Sequence[Recipe], str]]


def model_family(model_name: str) -> str:
    """The model's input pipeline (a key of BUILDERS), from the model table."""
    family = registry.get(model_name).family
    if family not in BUILDERS:
        raise ConfigError(
            f"model {model_name!r} has the input family {family!r}, which has no "
            f"input pipeline; use one of {', '.join(sorted(BUILDERS))}."
        )
    return family


def input_config(params: dict[str, Any], split: str) -> dict[str, Any]:
    """The split's input section with every default filled (eval falls back to train's keys)."""
    if split not in SECTION:
        raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
    given = params.get(SECTION[split])
    if given is None and split == "eval":
        given = {**(params.get("train_input") or {}), "shuffle": False, "repeat": False}
    schema = INPUT_SCHEMA if split == "train" else EVAL_INPUT_SCHEMA
    cfg = {k: key.default for k, key in schema.items()}
    cfg.update(given or {})
    if not isinstance(cfg.get("batch_size"), int) or cfg["batch_size"] < 1:
        raise ConfigError(
            f"{SECTION[split]}.batch_size must be an integer > 0, not {cfg.get('batch_size')!r}."
        )
    return cfg


def _per_dir(found: list[T | None], dirs: list[str], section: str, what: str) -> list[T]:
    """The directories' finds when every one has data; [] when none has (built-in data)."""
    empty = [i for i, f in enumerate(found) if not f]
    if len(empty) == len(found):
        return []
    if empty:
        i = empty[0]
        raise ConfigError(
            f"{section}.data_dir[{i}] ({dirs[i]}) has no {what} while other "
            f"entries do; add the files or remove it from the list."
        )
    return [f for f in found if f is not None]  # all of them (none is empty)


def _where(dirs: list[str]) -> str:
    return dirs[0] if len(dirs) == 1 else f"{len(dirs)} data_dir entries ({dirs[0]}, ...)"


def _mnist(cfg: dict[str, Any], params: dict[str, Any], split: str) -> tuple[Sequence[Recipe], str]:
    dirs = data_dirs(cfg.get("data_dir"))
    found = _per_dir(
        [find_idx_files(d, split) for d in dirs], dirs, SECTION[split], "MNIST IDX files"
    )
    if found:
        recipes: list[Recipe] = [
            MnistFiles(str(i), str(lb), bool(cfg["to_float16"])) for i, lb in found
        ]
        images, labels = found[0]
        if len(found) == 1:
            return recipes, f"MNIST IDX files {images.name}, {labels.name} in {images.parent}"
        return recipes, f"MNIST IDX files in {_where(dirs)}, in list order"
    recipe = DigitsArrays(str(digits_cache()), split, bool(cfg["to_float16"]))
    why = cfg.get("_stand_in_why") or f"no MNIST IDX files in {_where(dirs)}"
    n = EVAL_SIZE if split == "eval" else DIGITS_TOTAL - EVAL_SIZE
    return [recipe], (
        f"UCI handwritten digits ({n} of 1797 real 8x8 images, bilinear-upscaled to "
        f"20x20 and padded to 28x28 like MNIST; {why})"
    )


def _lm_shape(cfg: dict[str, Any], params: dict[str, Any], split: str) -> tuple[int, int]:
    """(max_sequence_length, vocab_size) of a language model's input section, checked."""
    model, section = params.get("model") or {}, SECTION[split]
    seq_len = cfg.get("max_sequence_length") or model.get("max_position_embeddings")
    vocab = cfg.get("vocab_size") or model.get("vocab_size")
    if not seq_len:
        raise ConfigError(
            f"{section}.max_sequence_length is not set (nor model.max_position_embeddings); add it."
        )
    if not vocab:
        raise ConfigError(f"{section}.vocab_size is not set (nor model.vocab_size); add it.")
    max_pos = model.get("max_position_embeddings")
    if max_pos and seq_len > max_pos:
        raise ConfigError(
            f"{section}.max_sequence_length ({seq_len}) exceeds "
            f"model.max_position_embeddings ({max_pos}); lower it."
        )
    if model.get("vocab_size") and vocab > model["vocab_size"]:
        raise ConfigError(
            f"{section}.vocab_size ({vocab}) exceeds model.vocab_size "
            f"({model['vocab_size']}); make them equal."
        )
    return int(seq_len), int(vocab)


def _lm(cfg: dict[str, Any], params: dict[str, Any], split: str) -> tuple[Sequence[Recipe], str]:
    seq_len, vocab = _lm_shape(cfg, params, split)
    section = SECTION[split]
    dirs = data_dirs(cfg.get("data_dir"))
    found = _per_dir([find_token_files(d, split) for d in dirs], dirs, section, "token files")
    if found:
        recipes: list[Recipe] = [
            TokenFiles(tuple(str(p) for p in files), seq_len, vocab) for files in found
        ]
        if len(found) == 1:
            files = found[0]
            names = ", ".join(p.name for p in files)
            return recipes, f"token files {names} in {files[0].parent}"
        count = sum(len(f) for f in found)
        return recipes, f"{count} token files in {_where(dirs)}, in list order"
    entry, meta = stdlib_corpus(vocab)
    name = "train.bin" if split == "train" else "val.bin"
    why = cfg.get("_stand_in_why") or f"no token files in {_where(dirs)}"
    part = "first 90%" if split == "train" else "last 10%"
    eot = ", id 256 ends each file" if meta["eot"] else ""
    return [TokenFiles((str(entry / name),), seq_len, vocab)], (
        f"byte-level corpus of the Python {meta['python']} standard library ({part} of "
        f"{meta['tokens']} tokens from {meta['files']} files{eot}; {why})"
    )


def _mlm(cfg: dict[str, Any], params: dict[str, Any], split: str) -> tuple[Sequence[Recipe], str]:
    return build_mlm(cfg, params, split, SECTION[split])


def _pairs(cfg: dict[str, Any], params: dict[str, Any], split: str) -> tuple[Sequence[Recipe], str]:
    return build_pairs(cfg, params, split, SECTION[split])


BUILDERS: dict[str, Builder] = {"mnist": _mnist, "lm": _lm, "mlm": _mlm, "pairs": _pairs}


def _where_found(res: Resolved) -> str:
    files = [p for f in res.found for p in f]
    where = files[0].parent if len(res.found) == 1 else _where(res.dirs or [])
    fmt = res.processor.fmt  # "HDF5 files (.h5)": the noun is in it
    if len(files) == 1:
        fmt = fmt.replace(" files", " file", 1)
    return f"{len(files)} {fmt} in {where}"


def _hdf5(
    cfg: dict[str, Any], params: dict[str, Any], split: str, res: Resolved
) -> tuple[Sequence[Recipe], str]:
    seq_len, vocab = _lm_shape(cfg, params, split)
    recipe = H5Files.of([p for f in res.found for p in f], seq_len, vocab)
    return [recipe], f"{_where_found(res)} ({recipe.num_samples} samples), read by {res.name}"


def _mlm_weights(cfg: dict[str, Any], params: dict[str, Any]) -> tuple[bool, float]:
    """(scale the MLM weights by the batch's masked tokens, mlm_loss_weight): mlm.py's rules."""
    model = params.get("model") or {}
    scaling, dynamic = model.get("mlm_loss_scaling"), bool(cfg.get("dynamic_mlm_scale"))
    by_masked = (
        dynamic
        or bool(cfg.get("scale_mlm_weights"))
        or scaling in ("num_masked", "precomputed_num_masked")
    )
    if scaling == "batch_size" and not dynamic:
        by_masked = False
    return by_masked, 1.0 if dynamic else float(model.get("mlm_loss_weight") or 1.0)


def _tfrecord(
    cfg: dict[str, Any], params: dict[str, Any], split: str, res: Resolved
) -> tuple[Sequence[Recipe], str]:
    model, kind = params.get("model") or {}, "gpt" if "lm" in res.processor.families else "bert"
    if kind == "gpt":
        seq_len, vocab = _lm_shape(cfg, params, split)
        by_masked, weight = False, 1.0
    else:
        seq_len = sequence_length(cfg, model, SECTION[split])
        vocab = int(model["vocab_size"])
        by_masked, weight = _mlm_weights(cfg, params)
    recipes = [
        TfRecordFiles((str(p),), kind, res.name, seq_len, vocab, by_masked, weight)
        for f in res.found
        for p in f
    ]
    return recipes, f"{_where_found(res)}, read by {res.name}"


def _csv(
    cfg: dict[str, Any], params: dict[str, Any], split: str, res: Resolved
) -> tuple[Sequence[Recipe], str]:
    model = params.get("model") or {}
    seq_len = sequence_length(cfg, model, SECTION[split])
    if cfg.get("whole_word_masking") or cfg.get("mask_whole_word"):
        raise ConfigError(
            f"{SECTION[split]}.mask_whole_word is not implemented (tokens are "
            "masked one at a time); set it to false."
        )
    by_masked, weight = _mlm_weights(cfg, params)
    seed = cfg.get("shuffle_seed")
    seed = (params.get("runconfig") or {}).get("seed") or 0 if seed is None else seed
    recipes = [
        BertCsvFiles(
            (str(p),),
            str(cfg.get("vocab_file") or ""),
            bool(cfg.get("do_lower", True)),
            seq_len,
            int(model["vocab_size"]),
            int(cfg.get("max_predictions_per_seq") or 20),
            float(cfg.get("masked_lm_prob") or 0.15),
            not model.get("disable_nsp", False),
            int(seed) * 2 + (0 if split == "train" else 1),
            by_masked,
            weight,
        )
        for f in res.found
        for p in f
    ]
    return recipes, f"{_where_found(res)}, masked as read by {res.name}"


def _tsv(
    cfg: dict[str, Any], params: dict[str, Any], split: str, res: Resolved
) -> tuple[Sequence[Recipe], str]:
    model = params.get("model") or {}
    seq_len = sequence_length(cfg, model, SECTION[split])
    task = "mnli" if res.name in ("MNLIDataProcessor", "MnliDataProcessor") else "sst2"
    recipes = [
        GlueTsv(
            str(p),
            task,
            str(cfg.get("vocab_file") or ""),
            bool(cfg.get("do_lower", True)),
            seq_len,
            int(model.get("num_labels") or 2),
        )
        for f in res.found
        for p in f
    ]
    return recipes, f"{_where_found(res)}, read by {res.name}"


READERS = {"hdf5": _hdf5, "tfrecord": _tfrecord, "csv": _csv, "tsv": _tsv}


def choose_data(
    cfg: dict[str, Any], params: dict[str, Any], split: str, family: str
) -> tuple[Sequence[Recipe], str]:
    """(recipes, what the data is) of a section: the processor's files, or the stand-in data
    (runtime/data/processors.py decides and warns)."""
    if family == "lm":
        _lm_shape(cfg, params, split)  # the section's own errors before the data's
    res = resolve(cfg, family, SECTION[split], split)
    if res.dirs is None:
        why = (
            "asked for by stand_in_data"
            if cfg.get("stand_in_data")
            else "no data_dir"
            if not cfg.get("data_dir")
            else "data_dir does not exist"
        )
        recipes, source = BUILDERS[family](
            {**cfg, "data_dir": None, "_stand_in_why": why}, params, split
        )
        return recipes, f"{STAND_IN_PREFIX}{source}"
    if res.processor.kind == "family":
        return BUILDERS[family](cfg, params, split)
    return READERS[res.processor.kind](cfg, params, split, res)


def _combine(recipes: Sequence[Recipe]) -> Recipe:
    """One recipe reading `recipes` one after another."""
    if len(recipes) == 1:
        return recipes[0]
    tokens = [r for r in recipes if isinstance(r, TokenFiles)]
    if len(tokens) == len(recipes):
        first = tokens[0]
        return TokenFiles(
            tuple(p for r in tokens for p in r.paths), first.seq_len, first.vocab_size
        )
    return ConcatRecipe(tuple(recipes))


def _for_worker(recipe: Recipe) -> Recipe:
    """A worker's copy: token and HDF5 files were already checked by the consumer."""
    if isinstance(recipe, TokenFiles | H5Files):
        return dataclasses.replace(recipe, verify=False)
    if isinstance(recipe, SliceRecipe):
        return dataclasses.replace(recipe, inner=_for_worker(recipe.inner))
    if isinstance(recipe, ConcatRecipe):
        return ConcatRecipe(tuple(_for_worker(r) for r in recipe.parts))
    return recipe


def autotune_workers() -> int:
    """Input workers for num_parallel_calls AUTOTUNE (0 or -1): half the host's CPUs (the
    other half trains), at least 1 and at most 4 (more only compete for memory bandwidth)."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def input_workers(cfg: dict[str, Any], section: str) -> int:
    """Worker processes for an input section: num_workers, else num_parallel_calls (TF; 0 and
    -1 are AUTOTUNE, as the TF configs' own comments say), else 0 (in-process)."""
    if cfg.get("num_workers"):
        return int(cfg["num_workers"])
    calls = cfg.get("num_parallel_calls")
    if calls is None:
        return 0
    if calls in (0, AUTOTUNE):
        n = autotune_workers()
        log.info(
            "%s.num_parallel_calls %d is AUTOTUNE: %d input worker%s (half of this "
            "host's %d CPUs, 1 to 4).",
            section,
            calls,
            n,
            "" if n == 1 else "s",
            os.cpu_count() or 1,
        )
        return n
    return int(calls)


def _count(recipe: Recipe) -> int:
    """Samples of a recipe, loaded (its files checked) and closed again."""
    loaded = recipe.load()
    try:
        return len(loaded)
    finally:
        close = getattr(loaded, "close", None)
        if close is not None:
            close()


def _parts_stream(
    recipes: Sequence[Recipe],
    n: int,
    plan_for: Callable[[int, int], Plan],
    too_small: Callable[[Plan, int, str], None],
    source: str,
    cfg: dict[str, Any],
    section: str,
) -> BatchStream:
    """The stream of n input workers (or streamers) over several files or an HDF5 data set:
    the SAMPLES cut into contiguous parts of equal batch counts (runtime/data/shards.py)."""
    split = "train" if section == "train_input" else "eval"
    h5 = recipes[0] if len(recipes) == 1 and isinstance(recipes[0], H5Files) else None
    counts = [h5.num_samples] if h5 is not None else [_count(r) for r in recipes]  # checked
    whole = plan_for(sum(counts), SPLIT_SALT[split])
    too_small(whole, sum(counts), source)
    sizes = part_sizes(sum(counts), n, whole.batch_size, whole.drop_last)
    parts = h5.cut(sizes) if h5 is not None else cut(recipes, counts, sizes)
    plans = [plan_for(size, SPLIT_SALT[split] + 16 * (k + 1)) for k, size in enumerate(sizes)]
    if h5 is not None:
        for r in parts:
            _count(r)  # the consumer checks every part's values before the workers start
    files = len(h5.parts) if h5 is not None else len(recipes)
    log.info(
        "%s: %d samples of %d file%s cut into %d contiguous parts of %s samples, one per "
        "input worker (a worker may read part of a file; each serves %d batches an epoch).",
        section,
        sum(counts),
        files,
        "" if files == 1 else "s",
        len(sizes),
        "/".join(str(x) for x in sorted(set(sizes), reverse=True)),
        plans[0].batches_per_epoch,
    )
    return BatchStream(
        parts,
        ShardPlan(tuple(plans)),
        source=source,
        data=None,
        num_workers=len(sizes),
        prefetch_factor=int(cfg["prefetch_factor"]),
        worker_recipe=tuple(_for_worker(r) for r in parts),
    )


def build_input(params: dict[str, Any], split: str, model_name: str, seed: int) -> BatchStream:
    """The batch stream of `split` ("train" | "eval") for `model_name`, shuffled from `seed`."""
    cfg = input_config(params, split)
    section = SECTION[split]
    recipes, source = choose_data(cfg, params, split, model_family(model_name))
    workers = input_workers(cfg, section)
    cpus = os.cpu_count() or 1
    if workers > cpus:  # as PyTorch's DataLoader warns: they will only compete for the cores
        log.warning(
            "%s.num_workers is %d but this host has %d CPUs; input workers beyond that "
            "compete for the same cores.",
            section,
            workers,
            cpus,
        )
    shuffle_seed = cfg.get("shuffle_seed")

    def plan_for(num_samples: int, salt: int) -> Plan:
        return Plan(
            num_samples=num_samples,
            batch_size=cfg["batch_size"],
            shuffle=bool(cfg["shuffle"]),
            seed=int(seed if shuffle_seed is None else shuffle_seed),
            salt=salt,
            drop_last=bool(
                cfg["drop_last_batch"] if cfg.get("drop_last") is None else cfg["drop_last"]
            ),
            repeat=bool(cfg["repeat"]),
        )

    def too_small(plan: Plan, n: int, what: str) -> None:
        if plan.batches_per_epoch < 1:
            raise ConfigError(
                f"{section}.batch_size {plan.batch_size} is larger than the "
                f"{n} samples of {what}; lower it or set drop_last_batch: false."
            )

    contiguous = len(recipes) == 1 and isinstance(recipes[0], H5Files)
    parts_wanted = int(cfg.get(STREAMERS_KEY) or workers)
    if parts_wanted and (len(recipes) >= 2 or contiguous):
        return _parts_stream(recipes, parts_wanted, plan_for, too_small, source, cfg, section)
    recipe = _combine(recipes)
    # in the consumer too: checks the files now and counts the samples (the workers load
    # their own, so the consumer's copy is closed again when there are workers)
    data = None if workers else recipe.load()
    count = _count(recipe) if data is None else len(data)
    plan = plan_for(count, SPLIT_SALT[split])
    too_small(plan, count, source)
    return BatchStream(
        recipe,
        plan,
        source=source,
        data=data,
        num_workers=workers,
        prefetch_factor=int(cfg["prefetch_factor"]),
        worker_recipe=_for_worker(recipe),
    )
