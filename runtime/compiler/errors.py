"""The compiler's two user-facing failures (both `system.errors.CsError`, one sentence each).

* KernelMatchError(RuntimeFailure)  an op or dtype no kernel of the library covers: names the
  op, the layer it is in, and the kernels that exist (`--validate_only` stops here)
* PlacementError(ResourceError)     the model does not fit the wafer in the asked mode: names the
  bytes it needs, the capacity, and the fix
* PassVerifyError(RuntimeFailure)   a pass produced output that breaks its invariants (a compiler
  bug, named with the pass so it can be reported)
"""

from __future__ import annotations

from cs2sim.system.errors import ResourceError, RuntimeFailure

__all__ = ["KernelMatchError", "PlacementError", "PassVerifyError"]


class KernelMatchError(RuntimeFailure):
    """No kernel in the library covers an op (or its dtype)."""

    report: str | None = None  # the kernel matching report (every op and its kernel or why)


class PlacementError(ResourceError):
    """The model does not fit on the wafer in the requested execution mode."""


class PassVerifyError(RuntimeFailure):
    """A compiler pass broke an invariant the verifier checks after it."""
