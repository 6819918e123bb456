"""What the executors read of a compiled plan.

The plan is the compiler's `Plan` (runtime/compiler/plan.py), read from plan.json by the run's
`--cs_ip` path (runtime/job/cs_run.py) and handed to an executor as that object, never as its
JSON dict. The executors sit beside the compiler in runtime/'s layers (neither imports the
other), so the fields they use are named here as a Protocol that `Plan` satisfies.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["PlanView"]


class PlanView(Protocol):
    """The fields of `Plan` an executor uses (see runtime/compiler/plan.py for their meaning)."""

    @property
    def kernels(self) -> list[dict[str, Any]]: ...

    @property
    def layers(self) -> list[dict[str, Any]]: ...

    @property
    def replicas(self) -> int: ...

    @property
    def micro_batches(self) -> int: ...

    @property
    def micro_batch_size(self) -> int: ...

    def blocks_in_order(self) -> list[str]: ...
