"""Damaged or hostile files in model_dir never reach an internal error and are never trusted:
each falls back (the previous checkpoint, a directory scan) or recompiles, with one line."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from cs2sim.runtime.artifacts import checkpoint as ckpt
from cs2sim.runtime.compiler import compile_run
from cs2sim.system.state import ExecMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compiler"))
from compiler_helpers import fc_params
from test_checkpoint import state


def _rewrite_meta(path: Path, edit) -> None:
    """Rewrite a checkpoint's metadata JSON with `edit(tree) -> text`, digest recomputed (what
    a careful forger does: the file then verifies itself)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {n: z[n] for n in z.files if not n.startswith("__")}
        tree = json.loads(str(z["__meta__"]))
    meta = edit(tree)
    members = {
        **arrays,
        "__meta__": np.array(meta),
        "__digest__": np.array(ckpt._digest(arrays, meta)),
    }
    with open(path, "wb") as f:
        np.savez(f, **members)
    index = path.parent / ckpt.INDEX_NAME
    doc = json.loads(index.read_text())  # keep the index's sha256 in step with the file
    for e in doc["checkpoints"]:
        if e["file"] == path.name:
            e["sha256"] = ckpt._file_sha256(path)
    index.write_text(json.dumps(doc))


@pytest.mark.parametrize("bad", [-5, 10**30, True, 5.5, "deep"])
def test_a_forged_checkpoint_falls_back_to_the_previous_one(tmp_path, caplog, bad):
    ckpt.save_checkpoint(tmp_path, state(2))
    path = ckpt.save_checkpoint(tmp_path, state(4))
    if bad == "deep":
        _rewrite_meta(
            path,
            lambda t: (
                json.dumps({**t, "rng": {"__dict__": {"x": "[" * 5000 + "]" * 5000}}})
                .replace('"[[', "[[")
                .replace(']]"', "]]")
            ),
        )
    else:
        _rewrite_meta(path, lambda t: json.dumps({**t, "step": bad}))
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        back = ckpt.load_latest(tmp_path)
    assert back is not None and back.step == 2
    assert [
        r.message for r in caplog.records if "model-ckpt-4" in r.message and "damaged" in r.message
    ]


def test_a_deeply_nested_index_is_scanned_past(tmp_path, caplog):
    ckpt.save_checkpoint(tmp_path, state(3))
    (tmp_path / ckpt.INDEX_NAME).write_text("[" * 100_000)
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        back = ckpt.load_latest(tmp_path)
    assert back is not None and back.step == 3
    assert any("unreadable" in r.message and "nests deeper" in r.message for r in caplog.records)


def test_an_index_entry_with_a_forged_step_makes_the_index_untrusted(tmp_path, caplog):
    ckpt.save_checkpoint(tmp_path, state(3))
    index = tmp_path / ckpt.INDEX_NAME
    doc = json.loads(index.read_text())
    doc["checkpoints"][0]["step"] = -5
    index.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="cs2sim.checkpoint"):
        assert ckpt.load_latest(tmp_path).step == 3  # found by the scan, verified by itself
    assert any("unreadable" in r.message for r in caplog.records)


def test_a_symlink_with_a_checkpoint_name_is_not_followed(tmp_path):
    other = tmp_path / "elsewhere"
    ckpt.save_checkpoint(other, state(9))
    md = tmp_path / "md"
    ckpt.save_checkpoint(md, state(1))
    os.symlink(other / "model-ckpt-9.npz", md / "model-ckpt-9.npz")
    assert [p.name for p in ckpt.list_checkpoints(md)] == ["model-ckpt-1.npz"]
    assert ckpt.load_latest(md).step == 1


def _compile(md: Path):
    return compile_run("fc_mnist", fc_params(), md, mode=ExecMode.PIPELINED, draw_map=False)


@pytest.mark.parametrize("damage", ["garbage", "deep", "no kernels", "other model"])
def test_a_damaged_plan_is_recompiled_with_one_line(tmp_path, caplog, damage):
    first = _compile(tmp_path)
    plan = first.directory / "plan.json"
    doc = json.loads(plan.read_text())
    plan.write_text(
        {
            "garbage": "{not json",
            "deep": "[" * 100_000,
            "no kernels": json.dumps({**doc, "kernels": []}),
            "other model": json.dumps({**doc, "blocks": ["x"]}),
        }[damage]
    )
    with caplog.at_level(logging.WARNING, logger="cs2sim.compiler"):
        again = _compile(tmp_path)
    assert not again.reused and again.plan == first.plan
    lines = [r.message for r in caplog.records if "compiling again" in r.message]
    assert len(lines) == 1 and str(first.directory) in lines[0]
    assert _compile(tmp_path).reused  # the recompiled directory is sound
    assert not list(tmp_path.glob(".cs_*"))  # nothing left behind


def test_a_symlinked_compile_directory_is_replaced_not_followed(tmp_path):
    first = _compile(tmp_path / "a")
    md = tmp_path / "md"
    md.mkdir()
    link = md / first.directory.name
    os.symlink(first.directory, link)  # someone else's (or an old) compile, planted
    again = _compile(md)
    assert not again.reused and not link.is_symlink() and link.is_dir()
    assert first.directory.is_dir()  # the symlink's target is untouched
    assert not list(md.glob(".cs_*"))
