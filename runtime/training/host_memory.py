"""Refuse up front what the host cannot hold: a true-shape config (GPT-2 small, GPT-3 XL, GPT-J 6B)
is for compiling, and training it in numpy would swap the machine to a halt an hour later.

The model class sizes itself from the config without allocating (`param_bytes_estimate`, at the
configured batch and sequence length); a run is refused when that exceeds MEMORY_HEADROOM of
the host's memory (the cgroup limit when lower), in one sentence naming the need, the capacity
and the alternatives.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

from cs2sim.system.errors import ResourceError

__all__ = ["MEMORY_HEADROOM", "SMALLER_CONFIGS", "host_memory_bytes", "check_host_memory"]

MEMORY_HEADROOM = 0.9  # refuse when the estimate exceeds 90% of the host's memory

# Smaller configs to name when the host cannot hold a model.
SMALLER_CONFIGS = {
    "fc_mnist": "configs/params_small.yaml",
    "gpt2": "configs/params_tiny.yaml",
    "gptj": "configs/params_continuous_pretraining.yaml",
    "bert": "configs/params_tiny.yaml",
    "bert_classifier": "configs/params_tiny.yaml",
    "llama": "configs/params_tiny.yaml",
}


def host_memory_bytes() -> int:
    """Physical memory of this host (the cgroup limit when one is lower)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return int(total)


def _size(n: float) -> str:
    return f"{n / 2**30:.0f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _estimate_kwargs(estimate: Any, section: dict[str, Any]) -> dict[str, int]:
    """The section's batch size (and sequence length) for the arguments `estimate` accepts."""
    accepted = inspect.signature(estimate).parameters
    given = {"batch_size": section.get("batch_size"), "seq_len": section.get("max_sequence_length")}
    return {k: int(v) for k, v in given.items() if k in accepted and v}


def check_host_memory(
    model_name: str,
    model_cls: type,
    params: dict[str, Any],
    *,
    training: bool = True,
    capacity: int | None = None,
    cs2: bool = False,
) -> None:
    """ResourceError when training (or evaluating) this config needs more than the host has.

    `cs2`: the run is on the simulated CS-2, whose model also lives in this machine's memory;
    the message then speaks of the simulated CS-2, never of training on the host."""
    estimate = getattr(model_cls, "param_bytes_estimate", None)
    if estimate is None:
        return
    section = params.get("train_input" if training else "eval_input") or {}
    need = int(estimate(params["model"], **_estimate_kwargs(estimate, section)))
    capacity = capacity or host_memory_bytes()
    if need <= MEMORY_HEADROOM * capacity:
        return
    what = model_name
    count = getattr(model_cls, "param_count", None)
    if count is not None:
        n = int(count(params["model"]))
        what += f" ({n / 1e9:.1f}B parameters)" if n >= 1e9 else f" ({n / 1e6:.0f}M parameters)"
    verb = "Training" if training else "Evaluating"
    smaller = SMALLER_CONFIGS.get(model_name, "a smaller config")
    if cs2:
        raise ResourceError(
            f"{verb} {what} on the simulated CS-2 needs about {_size(need)} of this machine's "
            f"memory (the simulator holds the model's arrays) but it has {_size(capacity)}; "
            f"compile it instead (--mode compile_only gives the CS-2 plan and estimates), or "
            f"run {smaller} on the simulated CS-2 as a stand-in."
        )
    raise ResourceError(
        f"{verb} {what} on the host needs about {_size(need)} of memory but this machine has "
        f"{_size(capacity)}; compile it for the CS-2 instead (--mode compile_only), or run "
        f"{smaller} or another smaller config on the host or on the simulated CS-2 (--cs_ip)."
    )
