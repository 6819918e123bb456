"""runtime/ is the embedded training runtime: numpy layers and models, numerics (16-bit formats,
loss scaling), optimizers, data, the training loop and its artifacts.

It never prints or prompts: the loop reports through callbacks that scripts/ and the run.py
entry points register. It may consult system/ (state, mode, cluster); it never imports csshell/.
"""

# Before anything imports numpy: BLAS / OpenMP threads that wait must sleep, not spin. The
# libraries read these variables once, when they load (see runtime/threads.py).
from cs2sim.runtime.threads import set_env_defaults as _set_env_defaults

_set_env_defaults()
