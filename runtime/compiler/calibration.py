"""The cost model's calibrated parameters: the ONE table of figures set from published runs.

Everything else the cost model uses is a public hardware fact (system/hardware.py) or follows
from one. These three numbers cannot be derived from public facts, so they were set from the
calibration runs below (bench/fidelity.py --fit re-derives them by least squares on the log of
the ratio ours/published and prints the fit). Nothing is set per model: each applies to every
model, mode and system count.

| name                 | value    | what it is                                    | set from (published)              |
|----------------------|----------|-----------------------------------------------|-----------------------------------|
| KERNEL_PEAK_SHARE    | 0.46     | share of the dense fp16 peak that kernel code | GPT-2 small b112 (494.5 samples/s,|
|                      |          | reaches on a PE with ample work (the rest:    | ALCF R2.1.1); Cerebras-GPT 256M / |
|                      |          | FP32 accumulation, task switches, non-matrix  | 590M / 2.7B b128 (373 / 199 /     |
|                      |          | ops the FLOP count does not see)              | 46.6, Zhang et al. HPEC 2024)     |
| LAYER_PASS_SECONDS   | 3.6e-3   | fixed time of one weight-streaming layer pass | the same four runs, jointly: the  |
|                      |          | (forward or backward, per micro-batch):       | narrow models' low utilisation    |
|                      |          | filling and draining the wafer for the layer, | (GPT-2 small 13% of peak vs 2.7B  |
|                      |          | starting its weight stream                    | 23%) sets it                      |
| REF_INPUT_NODE_BYTES | 112.7e6  | bytes/s of samples one input worker node of   | fc_mnist TF b256 (358,417         |
| _S                   |          | the reference (ALCF R1.1) cluster delivered   | samples/s x 1,572 B over the 5    |
|                      |          | to the CS-2; used only to model that cluster  | worker nodes csrun_wse reserves   |
|                      |          | in bench/fidelity.py                          | by default at ALCF)               |

KERNEL_PEAK_SHARE and LAYER_PASS_SECONDS are fitted jointly: with only these two, the four
weight-streaming runs fit within 1.1x (bench/results/fidelity.md). REF_INPUT_NODE_BYTES_S has
no degree of freedom left (one run sets one number): the fc_mnist row that uses it is a check of
the arithmetic, not of the model. BERT-large (6,728 samples/s at b2048, ALCF R2.1.1) is in the
calibration set once a `bert` model exists; it did not take part in setting these values.
"""

from __future__ import annotations

__all__ = ["KERNEL_PEAK_SHARE", "LAYER_PASS_SECONDS", "REF_INPUT_NODE_BYTES_S", "PARAMETERS"]

KERNEL_PEAK_SHARE = 0.46
LAYER_PASS_SECONDS = 3.6e-3
REF_INPUT_NODE_BYTES_S = 112.7e6

# (name, value, unit, set from): what bench/fidelity.py and the docs print
PARAMETERS: tuple[tuple[str, float, str, str], ...] = (
    ("KERNEL_PEAK_SHARE", KERNEL_PEAK_SHARE, "of peak",
     "GPT-2 small b112 (ALCF R2.1.1) + Cerebras-GPT 256M/590M/2.7B b128 (HPEC 2024), jointly"),
    ("LAYER_PASS_SECONDS", LAYER_PASS_SECONDS, "s per layer pass",
     "the same four runs, jointly with KERNEL_PEAK_SHARE"),
    ("REF_INPUT_NODE_BYTES_S", REF_INPUT_NODE_BYTES_S, "B/s per input node",
     "fc_mnist TF b256 measured 358,417 samples/s (ALCF R1.1), 5 default worker nodes"),
)
