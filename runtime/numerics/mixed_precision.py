"""Mixed precision: which 16-bit format a run computes in, from its params, as Model Zoo decides.

The keys are Model Zoo's (docs/sources.md, "mixed precision"): `model.mixed_precision`,
`model.fp16_type` (float16 | bfloat16 | cbfloat16), the legacy `csconfig.use_cbfloat16` and
`model.use_bfloat16`, and `optimizer.loss_scaling_factor`; the messages are Model Zoo's,
verbatim. The format itself is emulated by runtime/numerics/precision.py.
"""

from __future__ import annotations

from typing import Any

from cs2sim.runtime.schema import shown
from cs2sim.system.errors import ConfigError

__all__ = ["FP16_TYPES", "DYNAMIC", "resolve_precision"]

FP16_TYPES = ("float16", "bfloat16", "cbfloat16")
DYNAMIC = ("dynamic", "tf_dynamic")

MSG_CBFLOAT16_NEEDS_DLS = (
    "In order to use cbfloat16, dynamic loss scaling must be enabled. Otherwise, gradients might "
    "underflow/overflow in the middle of training and cause NaNs. Please set "
    "`loss_scaling_factor` to `dynamic` to use cbfloat16."
)
MSG_BFLOAT16_NO_DLS = (
    "No need to use DLS for loss when half dtype is bfloat16. "
    "Setting `loss_scaling_factor ` to `1.0`."
)
MSG_USE_BFLOAT16 = 'The flag "use_bfloat16" is deprecated. Use the flag "fp16_type" instead.'
MSG_PRECISION_OPT_LEVEL = (
    "Passing `precision_opt_level` via `model` params is deprecated. "
    'Please use `params["runconfig"]["precision_opt_level"]`'
)


def resolve_precision(params: dict[str, Any]) -> tuple[str, list[str]]:
    """(half format for `Policy`, warnings); adjusts params in place as Model Zoo does.

    1. model.mixed_precision false -> "float32" (nothing is rounded);
    2. else model.fp16_type, else the legacy csconfig.use_cbfloat16 / model.use_bfloat16,
       else "float16";
    3. cbfloat16 needs loss_scaling_factor "dynamic" (ConfigError); bfloat16 with "dynamic"
       sets it to 1.0 with a warning. cbfloat16 is emulated on the host, so unlike Model Zoo
       off a CS-X it is not replaced by bfloat16.
    """
    model = params.setdefault("model", {})
    optimizer = params.setdefault("optimizer", {})
    csconfig = params.get("csconfig") or {}
    warnings: list[str] = []
    if model.get("precision_opt_level") is not None:  # moved to runconfig in R1.9
        warnings.append(MSG_PRECISION_OPT_LEVEL)
        params.setdefault("runconfig", {})["precision_opt_level"] = model.pop("precision_opt_level")
    if model.get("to_float16"):
        raise ConfigError(
            "model.to_float16 must be false (mixed precision casts the model); "
            "set model.mixed_precision: true instead."
        )
    if model.get("use_bfloat16"):
        warnings.append(MSG_USE_BFLOAT16)
    legacy = (
        "cbfloat16"
        if csconfig.get("use_cbfloat16")
        else "bfloat16"
        if model.get("use_bfloat16")
        else None
    )
    fp16_type = model.get("fp16_type")
    if fp16_type is not None:
        if not isinstance(fp16_type, str) or fp16_type.lower() not in FP16_TYPES:
            raise ConfigError(
                f"model.fp16_type must be one of {', '.join(FP16_TYPES)}, not {shown(fp16_type)}."
            )
        fp16_type = fp16_type.lower()
        if legacy and legacy != fp16_type:
            warnings.append(
                f"model.fp16_type ({fp16_type}) wins over the legacy flag that asks for {legacy}"
            )
    if not model.get("mixed_precision", False):
        if fp16_type or legacy:
            warnings.append(
                f"model.mixed_precision is false, so {fp16_type or legacy} is not "
                f"used and training runs in float32"
            )
        return "float32", warnings
    half = fp16_type or legacy or "float16"
    dls = optimizer.get("loss_scaling_factor") in DYNAMIC
    if half == "cbfloat16" and not dls:
        raise ConfigError(MSG_CBFLOAT16_NEEDS_DLS)
    if half == "bfloat16" and dls:
        optimizer["loss_scaling_factor"] = 1.0
        warnings.append(MSG_BFLOAT16_NO_DLS)
    return half, warnings
