"""The own-model example's run.py: `python run.py --mode train -p configs/params.yaml -o out`.

`main(ResidualMLP)` registers the class in the model table (runtime/registry.py) under its NAME,
then runs the same command line as a Model Zoo run.py: --mode train | eval | train_and_eval |
validate_only | compile_only, --cs_ip for a CS-2 run under csrun_wse (docs/own-model.md).
"""

import sys

from residual_mlp import ResidualMLP

from cs2sim.runtime.cli.main import main

if __name__ == "__main__":
    sys.exit(main(ResidualMLP))
