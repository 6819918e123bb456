"""The CS-2 compiler: named passes from a model's layer graph to an executable plan.

runtime/ never prints: the compiler returns results and calls `on_stage`; runtime/cli/compile_run.py
(the run.py side) draws progress, the report summary and the wafer map. Public API:
`compile_run`, `CompileResult`, `Plan`, `KernelMatchError`, `PlacementError`, `PASSES`.
"""

from cs2sim.runtime.compiler.driver import CompileResult, compile_run, stages
from cs2sim.runtime.compiler.errors import KernelMatchError, PassVerifyError, PlacementError
from cs2sim.runtime.compiler.passes import PASSES
from cs2sim.runtime.compiler.plan import Plan

__all__ = [
    "compile_run",
    "CompileResult",
    "Plan",
    "KernelMatchError",
    "PlacementError",
    "PassVerifyError",
    "PASSES",
    "stages",
]
