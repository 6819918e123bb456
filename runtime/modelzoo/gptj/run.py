"""gptj's run.py: `python run.py --mode train -p configs/<params>.yaml -o <model_dir>`.

Works with any `python`, venv active or not: runtime/bootstrap.py finds the project (and
re-executes in its venv when this interpreter lacks the dependencies).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the checkout this file is in
from runtime.bootstrap import ensure_environment  # noqa: E402 - stdlib only

if __name__ == "__main__":
    problem = ensure_environment(__file__)
    if problem:
        sys.exit(problem)
    from runtime.cli import main

    sys.exit(main("gptj"))
