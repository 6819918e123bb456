"""The model table: every model a run can train, by its Model Zoo name. Open to users' models.

A model is a class derived from `runtime.nn.model.Model` that names itself with three class
attributes: `NAME` (the name run.py passes to `main`, e.g. "gpt2"), `SCHEMA` (the table of its
params file's `model:` section, runtime/schema.py) and `family` (its input pipeline, "mnist" or
"lm", runtime/data). Models reach the table in one of two ways:

* as entry points of the group `cs2sim.models` (name = the model's NAME, value =
  "package.module:Class"): pyproject.toml declares the Model Zoo's built-ins there, and a user's
  installable package may declare its own; each is imported on its first lookup only;
* registered explicitly with `register(cls)`: what `runtime.cli.main.main(MyModel)` does for
  a model defined in the user's own directory (docs/own-model.md).

Params validation, the input pipelines, the compiler and the trainer find a model here by name,
so none of them imports runtime/modelzoo: the arrows of the layering point down.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol, cast

from cs2sim.system.errors import ConfigError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from cs2sim.runtime.nn.model import Model
    from cs2sim.runtime.numerics.precision import Policy

__all__ = ["GROUP", "register", "get", "build", "names", "explicit"]

GROUP = "cs2sim.models"

_lock = threading.Lock()
_registered: dict[str, type[Model]] = {}  # explicit registrations win over entry points
_declared: dict[str, EntryPoint] | None = None  # read once per process
_loaded: dict[str, type[Model]] = {}


def _entry_points() -> dict[str, EntryPoint]:
    global _declared
    with _lock:
        if _declared is None:
            # imported here: importlib.metadata costs ~25 ms, and an input worker, which
            # imports this module with the data layer, never looks a model up
            from importlib.metadata import entry_points

            found: dict[str, EntryPoint] = {}
            for ep in entry_points(group=GROUP):
                if ep.name in found and found[ep.name].value != ep.value:
                    raise ConfigError(
                        f"two installed packages declare the model {ep.name!r} "
                        f"({found[ep.name].value} and {ep.value}); uninstall one of them."
                    )
                found[ep.name] = ep
            _declared = found
        return _declared


def register(cls: type[Model]) -> type[Model]:
    """Add `cls` under its NAME (replacing an earlier registration of that name); returns it,
    so it can decorate a class."""
    name = getattr(cls, "NAME", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"model class {cls.__qualname__} has no NAME; give it one "
            '(NAME = "my_model"), the name its run.py passes to main.'
        )
    with _lock:
        _registered[name] = cls
    return cls


def explicit() -> dict[str, type[Model]]:
    """The explicit registrations of this process ({name: class}), for a process started with
    `spawn` to register again (a class pickles by reference to its module)."""
    with _lock:
        return dict(_registered)


def names() -> list[str]:
    """Every model name the table knows, sorted."""
    return sorted(set(_registered) | set(_entry_points()))


class ModelFactory(Protocol):
    """How every model of the table is built: its params file's `model:` section, the
    precision policy, the seed (the base class's own constructor takes only the last two)."""

    def __call__(self, model_params: dict[str, Any], policy: Policy, seed: int) -> Model: ...


def build(name: str, model_params: dict[str, Any], policy: Policy, seed: int) -> Model:
    """A freshly initialised model called `name`."""
    return cast(ModelFactory, get(name))(model_params, policy, seed)


def get(name: str) -> type[Model]:
    """The model class called `name`; ConfigError naming the known ones when there is none."""
    with _lock:
        if name in _registered:
            return _registered[name]
        if name in _loaded:
            return _loaded[name]
    ep = _entry_points().get(name)
    if ep is None:
        raise ConfigError(f"unknown model {name!r}; available: {', '.join(names())}.")
    cls: type[Model] = ep.load()
    with _lock:
        _loaded[name] = cls
    return cls
