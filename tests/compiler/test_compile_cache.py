"""The compile directory: checksum, reuse, and atomic creation (a killed compile is not reused)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from compiler_helpers import fc_params

from cs2sim.runtime.compiler import compile_run
from cs2sim.system.state import ExecMode

ROOT = Path(__file__).resolve().parents[2]


def _compile(tmp_path, p, mode=ExecMode.PIPELINED, **kw):
    return compile_run("fc_mnist", p, tmp_path, mode=mode, draw_map=False, **kw)


def test_second_compile_reuses(tmp_path):
    a = _compile(tmp_path, fc_params())
    b = _compile(tmp_path, fc_params())
    assert not a.reused and b.reused
    assert a.directory == b.directory and a.directory.name == f"cs_{a.checksum}"
    assert len(a.checksum) == 64 and int(a.checksum, 16) >= 0
    assert b.plan == a.plan and b.est_samples_per_sec == a.est_samples_per_sec
    assert any("Reusing existing compilation in" in line for line in b.log_lines)


def test_irrelevant_change_hits_relevant_change_misses(tmp_path):
    base = _compile(tmp_path, fc_params())
    same = _compile(
        tmp_path,
        fc_params(
            optimizer__learning_rate=0.5,
            runconfig__max_steps=7,
            runconfig__save_checkpoints_steps=3,
        ),
    )
    assert same.reused and same.checksum == base.checksum
    for change in (
        {"model__hidden_sizes": [500, 301]},
        {"train_input__batch_size": 128},
        {"model__mixed_precision": False},
    ):  # params.yaml: float16 (TF flow)
        other = _compile(tmp_path, fc_params(**change))
        assert not other.reused and other.checksum != base.checksum, change
    ws = _compile(tmp_path, fc_params(), mode=ExecMode.WEIGHT_STREAMING)
    tgt = _compile(tmp_path, fc_params(), target="systemf99")
    assert len({base.checksum, ws.checksum, tgt.checksum}) == 3


def test_validate_then_compile_upgrades_the_directory(tmp_path):
    v = _compile(tmp_path, fc_params(), stop_after="validate")
    c = _compile(tmp_path, fc_params())
    assert v.directory == c.directory and not c.reused and c.plan is not None
    assert _compile(tmp_path, fc_params(), stop_after="validate").reused


def test_killed_compile_is_not_reused(tmp_path):
    # a compile killed (SIGKILL) after writing every file but before its rename
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests" / "compiler")!r}]
        import cs2sim.runtime.compiler.driver as d
        from compiler_helpers import fc_params
        from cs2sim.system.state import ExecMode
        d.publish = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        d.compile_run("fc_mnist", fc_params(), {str(tmp_path)!r}, mode=ExecMode.PIPELINED,
                      draw_map=False)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=120)
    assert proc.returncode == -9
    assert not list(tmp_path.glob("cs_*"))  # only the temp directory is left
    assert list(tmp_path.glob(".cs_*.tmp-*"))
    r = _compile(tmp_path, fc_params())
    assert not r.reused and (r.directory / "COMPLETE").exists()
    assert not list(tmp_path.glob(".cs_*.tmp-*"))  # the dead compile's leftovers are removed
    assert os.path.isdir(r.directory)


def test_two_compiles_publishing_together_keep_one_directory(tmp_path):
    from cs2sim.runtime.compiler.cache import complete_stage, publish

    final = tmp_path / ("cs_" + "0" * 64)
    for i in range(2):
        tmp = tmp_path / f".{final.name}.tmp-{i}"
        tmp.mkdir()
        (tmp / "plan.json").write_text(str(i))
        publish(tmp, final, "compile")
        assert not tmp.exists()
    assert complete_stage(final) == "compile"
    assert (final / "plan.json").read_text() == "0"  # the first complete one is kept
