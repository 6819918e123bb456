"""runtime/numerics: the arithmetic of training, independent of any model.

    precision.py    16-bit formats (float16, bfloat16, cbfloat16) emulated by rounding float32
    mixed_precision.py  which format a run computes in, from its params (Model Zoo's rules)
    loss_scale.py   static and dynamic loss scaling (Model Zoo's CSDynamicLossScale)
    clipping.py     gradient clipping by global norm or by value
    optim.py        SGD, Adam, AdamW over the float32 master weights
    schedules.py    learning-rate schedules in Model Zoo's form

May import only runtime.schema, runtime.threads and system.errors.
Everything above it (nn/, params, executors/, ...) may import it.
"""
