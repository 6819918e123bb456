"""Let `python run.py` work from a model directory without activating anything.

The manual's commands (docs/training.md) are `cd runtime/modelzoo/<model> && python run.py ...`,
with whatever `python` the shell finds. That interpreter may not see the project (it is not on
sys.path from a model directory) or its dependencies (they are installed in the project's venv).
Each run.py calls `ensure_environment(__file__)` before importing anything else:

1. when this interpreter has no `cs2sim` installed, run.py itself makes the import name
   `cs2sim` the checkout it belongs to (three directories above it), so this module and then
   the rest of the project import from there;
2. if a dependency is still missing, and the project has a venv (`.venv/` or `venv/`, or the
   one named by $CS2SIM_VENV), the process re-executes itself with that venv's interpreter, same
   arguments, same working directory, same environment (+ CS2SIM_REEXEC, so it happens at most
   once: a venv that lacks the package too gets the error below, not a loop);
3. otherwise it returns one sentence saying what is missing and the command that installs it.

Standard library only: this runs before numpy or yaml can be imported.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from string import Template

__all__ = [
    "DEPENDENCIES",
    "GUARD",
    "project_root",
    "missing_dependency",
    "venv_python",
    "ensure_environment",
    "RUN_PY",
    "run_py_text",
]

DEPENDENCIES = ("numpy", "yaml", "rich", "tensorboardX")  # what a run imports (pyproject.toml)
GUARD = "CS2SIM_REEXEC"  # set on the re-executed process: never re-exec twice
VENV_DIRS = (".venv", "venv")


def project_root(run_py: str | os.PathLike[str]) -> Path | None:
    """The checkout a model's run.py belongs to (runtime/modelzoo/<model>/run.py -> root), or
    None for a run.py elsewhere (a user's copy of a model directory)."""
    parents = Path(run_py).resolve().parents
    if len(parents) > 3 and (parents[3] / "runtime" / "job" / "bootstrap.py").is_file():
        return parents[3]
    return None


def missing_dependency() -> str | None:
    """The first dependency this interpreter cannot import, or None."""
    for name in DEPENDENCIES:
        if importlib.util.find_spec(name) is None:
            return name
    return None


def venv_python(root: Path) -> Path | None:
    """The project venv's interpreter ($CS2SIM_VENV, else root/.venv or root/venv), or None."""
    candidates = [Path(os.environ["CS2SIM_VENV"])] if os.environ.get("CS2SIM_VENV") else []
    candidates += [root / d for d in VENV_DIRS]
    for venv in candidates:
        for name in ("python", "python3"):
            exe = venv / "bin" / name
            if exe.is_file() and os.access(exe, os.X_OK):
                return exe
    return None


def ensure_environment(run_py: str) -> str | None:
    """Make the project importable (maybe by re-executing in its venv); else an error line."""
    missing = missing_dependency()
    if missing is None:
        return None
    root = project_root(run_py)
    if root is None:  # a copy outside the checkout: only an activated venv or $CS2SIM_VENV helps
        return (
            f"error: run.py needs the Python package {missing!r}, which {sys.executable} "
            "cannot import; run it with the python of the venv cs2sim is installed in "
            "(activate it, or set CS2SIM_VENV to it)."
        )
    exe = venv_python(root)
    if exe is not None and os.environ.get(GUARD) is None:
        env = {**os.environ, GUARD: str(exe)}
        argv = [str(exe), str(Path(run_py).resolve()), *sys.argv[1:]]
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(exe, argv, env)  # does not return
    where = (
        f"the venv's interpreter {exe} lacks it too"
        if exe is not None
        else f"no venv was found in {root}"
    )
    return (
        f"error: run.py needs the Python package {missing!r}, which {sys.executable} cannot "
        f"import and {where}; install the project once with: cd {root} && "
        f"python3 -m venv .venv && .venv/bin/pip install -e ."
    )


# Every Model Zoo model's run.py is this text with its name (tests/modelzoo/test_run_py.py
# checks the six files against it). It must run before cs2sim can be imported, so it carries the
# one step this module cannot do for it: making `cs2sim` name the checkout it is in.
RUN_PY = Template('''"""${model}'s run.py: `python run.py --mode train -p configs/<params>.yaml`.

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

    sys.exit(main("${model}"))
''')


def run_py_text(model: str) -> str:
    """The run.py of Model Zoo model `model` (its directory name under runtime/modelzoo/)."""
    return RUN_PY.substitute(model=model)
