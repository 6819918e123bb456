"""Kernel matching: an op without a kernel is named with its layer and the kernels that exist."""

from __future__ import annotations

import pytest
from compiler_helpers import fc_params

from cs2sim.runtime.compiler import KernelMatchError, compile_run
from cs2sim.runtime.compiler.graph import build_meta_model
from cs2sim.runtime.nn.module import Module
from cs2sim.runtime.nn.spec import make_spec
from cs2sim.system.state import ExecMode


class Conv(Module):
    """A layer of a kind the CS-2 kernel library does not have."""

    def forward(self, x):  # pragma: no cover - never trained
        return x

    def specs(self, name, in_shape, names):
        return [make_spec(name, "conv2d", in_shape, 9 * in_shape[-1])]


def test_unsupported_op_is_named_with_layer_and_kernels(tmp_path):
    p = fc_params()
    model = build_meta_model("fc_mnist", p, "float32")
    model.add_block("conv", Conv())  # after the loss; the graph reads it like any block
    with pytest.raises(KernelMatchError) as e:
        compile_run(
            "fc_mnist", p, tmp_path, mode=ExecMode.PIPELINED, stop_after="validate", model=model
        )
    msg = str(e.value)
    assert "'conv2d'" in msg and "'conv'" in msg
    for kernel in ("fc", "attention", "embedding", "eltwise", "layernorm", "softmax_ce"):
        assert kernel in msg
    assert not any(tmp_path.glob("cs_*"))  # nothing half-written is left to reuse


def test_validate_only_stops_after_matching(tmp_path):
    r = compile_run(
        "fc_mnist", fc_params(), tmp_path, mode=ExecMode.PIPELINED, stop_after="validate"
    )
    assert r.plan is None and r.est_samples_per_sec is None
    assert (r.directory / "kernel_matching.json").exists()
    assert not (r.directory / "plan.json").exists()
    log = (r.directory / "compile.log").read_text()
    assert "[match]" in log and "[place]" not in log
