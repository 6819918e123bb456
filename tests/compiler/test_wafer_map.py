"""The wafer map (runtime/compiler/wafermap.py): an inset only where it magnifies; tiny shares as
counts; the PNG is drawn and its title states what a step runs."""

from __future__ import annotations

from compiler_helpers import ZOO, fc_params, params

from cs2sim.runtime.compiler import compile_run
from cs2sim.runtime.compiler.wafermap import _inset, inset_box, render_rich, share_text, title
from cs2sim.system.hardware import WSE2
from cs2sim.system.state import ExecMode


def _plan(tmp_path, p, model="fc_mnist"):
    return compile_run(model, p, tmp_path, mode=ExecMode.PIPELINED, draw_map=True)


def test_a_small_model_gets_an_inset_that_magnifies_it(tmp_path):
    r = _plan(tmp_path, fc_params())
    box, where = _inset(r.plan, WSE2)
    x0, y0, x1, y1 = box
    for k in r.plan.kernels:  # the frame holds the (one) replica's kernels
        x, y, w, h = k["rect"]
        assert x0 <= x and x + w <= x1 and y0 <= y and y + h <= y1
    _, _, fw, fh = where
    assert min(fw * WSE2.width / (x1 - x0), fh * WSE2.height / (y1 - y0)) >= 2
    assert (r.directory / "wafer_map.png").stat().st_size > 0


def test_replicas_spanning_the_wafer_height_get_no_inset_of_that_height(tmp_path):
    p = params(
        "fc_mnist", ZOO / "fc_mnist" / "configs" / "params.yaml", runconfig__multireplica=True
    )
    plan = _plan(tmp_path, p).plan
    assert plan.replicas > 1
    box = inset_box(plan, WSE2)
    # when there is an inset it frames one copy, never the whole column of copies
    if box is not None:
        assert box[3] - box[1] < WSE2.height / 2
        assert box[3] - box[1] <= max(k["rect"][1] + k["rect"][3] for k in plan.kernels) + 50


def test_a_one_pe_kernel_shows_a_count_not_zero_percent(tmp_path):
    plan = _plan(tmp_path, fc_params()).plan
    assert share_text(1, WSE2.pes) == f"1 of {WSE2.pes:,}"
    assert share_text(WSE2.pes // 4, WSE2.pes) == "25%"
    from rich.console import Console

    console = Console(record=True, width=160)
    console.print(render_rich(plan, WSE2))
    text = console.export_text()
    assert "0.00%" not in text
    if any(k["pes"] * k["replicas"] == 1 for k in plan.kernels):
        assert f"1 of {WSE2.pes:,}" in text
    assert plan.batch_line() in title(plan, WSE2)
