"""The CS-2 figures the docs quote are the code's: bench/doc_figures.py computes them, and the
tables between the docs' markers must be exactly what it computes now."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _doc_figures():
    spec = importlib.util.spec_from_file_location("doc_figures", ROOT / "bench" / "doc_figures.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_tables_are_regenerated_from_the_code(tmp_path):
    figures = _doc_figures()
    for name, md in figures.generate(tmp_path).items():
        page = figures.TABLES[name][0]
        quoted = figures.block(name, page.read_text())
        assert quoted is not None, f"{page.name} lost its {name} markers"
        assert quoted == md, (
            f"{page.name}'s {name} table is stale: run "
            "`.venv/bin/python bench/doc_figures.py --write`"
        )
