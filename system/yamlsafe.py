"""One bounded YAML loader for every file a user hands us (params files, cluster descriptions).

A YAML file is small text, but anchors and aliases make it a graph: nine levels of nine aliases
expand to 9**9 nodes when anything walks or re-serializes the result ("billion laughs"). So a
file is read with bounded work and memory:

* at most `max_bytes` of text (checked before parsing);
* at most `max_depth` nested collections (checked while composing, before Python's recursion
  limit could be reached);
* at most `max_aliases` alias uses, and at most `max_nodes` nodes once every alias is expanded
  (counted on the composed graph with one memo per node, so the count itself is linear);
* no recursive anchors (a collection that contains itself).

Over a limit, `load_yaml` raises `ConfigError` in one sentence naming the limit and its value.
The loader is PyYAML's SafeLoader plus two fixes Model Zoo files need: `1e-8` (no dot) is a
float as in YAML 1.2, and a duplicate key is an error rather than a silent overwrite.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# PyYAML ships no types (types-PyYAML is not a dependency): untyped where it is not installed
import yaml  # type: ignore[import-untyped,unused-ignore]

from cs2sim.system.errors import ConfigError

__all__ = ["Limits", "DEFAULT_LIMITS", "load_yaml"]


@dataclass(frozen=True)
class Limits:
    """What one YAML document may cost."""

    max_bytes: int = 1 << 20  # 1 MiB: the largest published Model Zoo config is ~6 KB
    max_depth: int = 64  # nested mappings/sequences
    max_aliases: int = 256  # uses of `*anchor`
    max_nodes: int = 200_000  # scalars + collections after expanding every alias


DEFAULT_LIMITS = Limits()


class _LimitExceeded(Exception):
    """Raised inside the loader; turned into a ConfigError naming the file."""


class _Loader(yaml.SafeLoader):  # type: ignore[misc,unused-ignore]  # an untyped base
    """SafeLoader that counts depth and aliases while composing, and refuses duplicate keys."""

    limits: Limits = DEFAULT_LIMITS

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > self.limits.max_aliases:
                raise _LimitExceeded(
                    f"more than {self.limits.max_aliases} aliases (limit max_aliases)"
                )
        self._depth += 1
        try:
            if self._depth > self.limits.max_depth:
                raise _LimitExceeded(
                    f"nesting deeper than {self.limits.max_depth} levels (limit max_depth)"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base class reports it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


# PyYAML follows YAML 1.1, where `1e-8` (no dot) is a string; Model Zoo files use both forms.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes in the tree the graph `root` unfolds to (aliases expanded); stops past `limit`.

    Iterative post-order walk with a memo per node, so shared (aliased) subtrees are counted
    once each time they are used without being walked again; a node met again while its own
    children are being counted is a recursive anchor.
    """
    memo: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            active.discard(key)
            total = 1 + sum(memo[id(c)] for c in children)
            if total > limit:
                raise _LimitExceeded(
                    f"more than {limit} nodes once aliases are expanded (limit max_nodes)"
                )
            memo[key] = total
            continue
        if key in memo:
            continue
        if key in active:
            raise _LimitExceeded("a recursive anchor (a collection that contains itself)")
        active.add(key)
        stack.append((node, True))
        for c in children:
            if id(c) in active:
                raise _LimitExceeded("a recursive anchor (a collection that contains itself)")
            if id(c) not in memo:
                stack.append((c, False))
    return memo[id(root)]


def load_yaml(text: str | bytes, source: str, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Parse one YAML document within `limits`; ConfigError (one sentence) on any problem."""
    size = len(text.encode("utf-8") if isinstance(text, str) else text)
    if size > limits.max_bytes:
        raise ConfigError(
            f"{source} is {size} bytes, over the {limits.max_bytes}-byte limit "
            f"(max_bytes) for a YAML file here; shorten it."
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{source}: it is not UTF-8 text; save it as UTF-8.") from None
    loader_cls = type("_BoundLoader", (_Loader,), {"limits": limits})
    loader = None
    try:
        loader = loader_cls(text)  # the reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, limits.max_nodes)
        return loader.construct_document(node)
    except _LimitExceeded as e:
        raise ConfigError(
            f"{source} has {e}; a params or cluster file needs nothing like "
            f"that: remove the anchors/nesting."
        ) from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(
            f"cannot parse {source}{where}: {e.problem or e.context}; fix the YAML there."
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: {str(e).splitlines()[0]}; fix the YAML.") from None
    except RecursionError:  # belt and braces: max_depth should make this unreachable
        raise ConfigError(
            f"{source} nests too deeply (limit max_depth {limits.max_depth}); flatten it."
        ) from None
    finally:
        if loader is not None:
            loader.dispose()
