"""gptj's run.py: `python run.py --mode train -p configs/<params>.yaml`.

Works with any `python`, venv active or not: runtime/job/bootstrap.py finds the project (and
re-executes in its venv when this interpreter lacks the dependencies).
"""

import importlib.util
import sys
import types
from pathlib import Path

_checkout = Path(__file__).resolve().parents  # runtime/modelzoo/<model>/run.py of a checkout?
if importlib.util.find_spec("cs2sim") is None and len(_checkout) > 3:  # not installed here
    sys.modules["cs2sim"] = types.ModuleType("cs2sim")  # the checkout this file is in, if any
    sys.modules["cs2sim"].__path__ = [str(_checkout[3])]
try:
    from cs2sim.runtime.job.bootstrap import ensure_environment
except ImportError:  # a copy of this directory, outside the checkout, and no cs2sim installed
    ensure_environment = None  # type: ignore[assignment]  # checked just below

if __name__ == "__main__":
    if ensure_environment is None:
        sys.exit(
            f"error: run.py needs cs2sim, which {sys.executable} cannot import; run it with "
            "the venv cs2sim is installed in (activate it, or call its bin/python)."
        )
    problem = ensure_environment(__file__)
    if problem:
        sys.exit(problem)
    from cs2sim.runtime.cli.main import main

    sys.exit(main("gptj"))
