"""The cluster description: CS-2 systems, MemoryX / SwarmX capacity, and the support CPU nodes.

Read from YAML: $CS2_CLUSTER, else $CS2_HOME/cluster.yaml, else the built-in
system/cluster_default.yaml. Every key is validated; an error names its key path
(``nodes[3].cpus``). yaml is imported only when a file is actually read (it costs ~20 ms at
start-up); system/machine.py caches the systems in the store and re-reads the file only when it
changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from cs2sim.system import knobs
from cs2sim.system.errors import ConfigError, UsageError
from cs2sim.system.state import ExecMode

__all__ = [
    "DEFAULT_PATH",
    "EXAMPLE_PATH",
    "gres_nodes",
    "MODELS",
    "NODE_ROLES",
    "SystemSpec",
    "NodeSpec",
    "MemoryXSpec",
    "SiteSpec",
    "SwarmXSpec",
    "Cluster",
    "cluster_source",
    "load_cluster",
]

DEFAULT_PATH = Path(__file__).with_name("cluster_default.yaml")
# A Wafer-Scale Cluster of four CS-2s in weight streaming (CS2_CLUSTER=<this path>; docs/cluster.md)
EXAMPLE_PATH = Path(__file__).with_name("cluster_four_cs2.yaml")
MODELS = ("CS-2",)  # the hardware model (system/hardware.py) is the WSE-2's
NODE_ROLES = ("chief", "worker")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
# Cerebras' MemoryX and cluster pages (docs/sources.md): MemoryX "can scale from 4TB to 2.4PB",
# "clusters of up to 192 Cerebras CS-2s"
MEMORYX_TB = (4.0, 2400.0)
MAX_SYSTEMS = 192


@dataclass(frozen=True)
class SystemSpec:
    """One CS-2 system: its name, its IP (an identifier, never contacted), its starting mode."""

    name: str
    ip: str
    model: str = "CS-2"
    execmode: ExecMode = ExecMode.PIPELINED


@dataclass(frozen=True)
class NodeSpec:
    """One support-cluster CPU node."""

    name: str
    cpus: int
    memory_gb: float
    role: str  # one of NODE_ROLES


@dataclass(frozen=True)
class MemoryXSpec:
    """MemoryX: stores weights and optimizer state for weight streaming."""

    capacity_tb: float


@dataclass(frozen=True)
class SwarmXSpec:
    """SwarmX: broadcasts weights to the CS-2s and reduces their gradients."""

    max_systems: int


SCHEDULERS = ("embedded", "slurm")  # who runs csrun_wse / csrun_cpu jobs (site.scheduler)


@dataclass(frozen=True)
class SiteSpec:
    """The site variables a sys-admin sets at the top of the real `csrun_cpu` (Model Zoo's
    csrun_cpu, docs/sources.md).

    `csrun_cpu --def_nodes` (etc.) prints them; `csrun_wse` uses them when a flag is not given.
    `gres_node` is the CPU node wired to the CS-2 (Slurm GRES `gres_resource`; several,
    comma-separated, in a cluster of several CS-2s, so several jobs' chiefs can run): the chief's
    component asks for the GRES, `csrun_cpu` excludes that node.
    """

    def_nodes: int = 5  # ALCF: "By default it reserves five entire worker nodes"
    def_tasks_per_node: int = 8
    def_cpus_per_task: int = 16
    mount_dirs: str = ""  # comma-separated; the current directory is always mounted
    singularity_image: str = "/opt/cerebras/cbcore_latest.sif"  # a name only: nothing is read
    gres_resource: str = "cs:cerebras:1"  # PSC Neocortex's GRES string
    gres_node: str = ""  # "" -> the first node of role chief; "a,b": several nodes have it
    scheduler: str = "embedded"  # "embedded" | "slurm" (CS2_SCHEDULER overrides it for one run)
    # On Slurm, each CS-2 system is a license of count 1 named as the system (slurm.conf
    # `Licenses=cs2-1:1,...`): csrun_wse's line asks for the systems its job reserves.
    system_licenses: bool = False


def gres_nodes(site: SiteSpec) -> frozenset[str]:
    """The nodes that carry the CS-2 GRES (`site.gres_node`, comma-separated)."""
    return frozenset(n for n in site.gres_node.split(",") if n)


@dataclass(frozen=True)
class Cluster:
    """The whole installation."""

    systems: list[SystemSpec]
    nodes: list[NodeSpec]
    memoryx: MemoryXSpec
    swarmx: SwarmXSpec
    source: Path = DEFAULT_PATH
    site: SiteSpec = SiteSpec()


def cluster_source(home: Path | None = None) -> Path:
    """Which file describes the cluster: $CS2_CLUSTER, $CS2_HOME/cluster.yaml, or the default."""
    env = knobs.raw("CS2_CLUSTER")
    if env:
        path = Path(env).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"CS2_CLUSTER names {path}, which is not a file; fix the path or unset CS2_CLUSTER."
            )
        return path
    if home is None:
        from cs2sim.system.store import default_home

        home = default_home()
    local = Path(home) / "cluster.yaml"
    return local if local.is_file() else DEFAULT_PATH


def load_cluster(path: Path | None = None) -> Cluster:
    """Read and validate a cluster description (default: cluster_source())."""
    path = Path(path) if path is not None else cluster_source()
    data = _read_yaml(path)
    check = _Checker(path)
    check.keys(data, "", {"systems", "nodes", "memoryx", "swarmx", "site"})
    systems = [
        _system(check, item, f"systems[{i}]")
        for i, item in enumerate(check.get(data, "", "systems", list))
    ]
    if not systems:
        check.fail("systems", "must list at least one system")
    if len(systems) > MAX_SYSTEMS:
        check.fail(
            "systems", f"lists {len(systems)} systems; a cluster holds at most {MAX_SYSTEMS}"
        )
    nodes = [
        node
        for i, item in enumerate(check.get(data, "", "nodes", list, []))
        for node in _nodes(check, item, f"nodes[{i}]")
    ]
    check.unique([s.name for s in systems], "systems")
    check.unique([n.name for n in nodes], "nodes")
    mx = check.get(data, "", "memoryx", dict, {"capacity_tb": MEMORYX_TB[0]})
    check.keys(mx, "memoryx", {"capacity_tb"})
    capacity = check.number(mx, "memoryx", "capacity_tb", float, MEMORYX_TB)
    sx = check.get(data, "", "swarmx", dict, {"max_systems": MAX_SYSTEMS})
    check.keys(sx, "swarmx", {"max_systems"})
    max_systems = check.number(sx, "swarmx", "max_systems", int, (1, MAX_SYSTEMS))
    site = _site(check, check.get(data, "", "site", dict, {}), nodes)
    return Cluster(systems, nodes, MemoryXSpec(capacity), SwarmXSpec(max_systems), path, site)


def _site(check: _Checker, item: dict[str, Any], nodes: list[NodeSpec]) -> SiteSpec:
    """The `site:` section (csrun_cpu's site variables); defaults where a key is absent."""
    base = SiteSpec()
    check.keys(item, "site", set(base.__dataclass_fields__))
    total = max(1, len(nodes))
    def_nodes = check.number(item, "site", "def_nodes", int, (1, total), min(base.def_nodes, total))
    tasks = check.number(
        item, "site", "def_tasks_per_node", int, (1, 100_000), base.def_tasks_per_node
    )
    cpus = check.number(
        item, "site", "def_cpus_per_task", int, (1, 1_000_000), base.def_cpus_per_task
    )
    texts = {
        key: check.get(item, "site", key, str, getattr(base, key))
        for key in ("mount_dirs", "singularity_image", "gres_resource", "gres_node", "scheduler")
    }
    if texts["scheduler"] not in SCHEDULERS:
        check.fail(
            "site.scheduler", f"is {texts['scheduler']!r}; use one of: " + ", ".join(SCHEDULERS)
        )
    licenses = item.get("system_licenses", base.system_licenses)
    if not isinstance(licenses, bool):
        check.fail("site.system_licenses", f"must be true or false (got {licenses!r})")
    chiefs = [n.name for n in nodes if n.role == "chief"]
    if not texts["gres_node"]:
        texts["gres_node"] = chiefs[0] if chiefs else ""
    else:  # one node, or several comma-separated (a cluster of several CS-2s: one per system)
        known = {n.name for n in nodes}
        for name in texts["gres_node"].split(","):
            if name not in known:
                check.fail(
                    "site.gres_node", f"names {name!r}, which is not a node listed in `nodes`"
                )
    return SiteSpec(def_nodes, tasks, cpus, **texts, system_licenses=licenses)


def _read_yaml(path: Path) -> dict[str, Any]:
    """Parse the file with the bounded loader (system/yamlsafe.py); ConfigError on a problem."""
    from cs2sim.system.yamlsafe import DEFAULT_LIMITS, load_yaml  # lazy: yaml only when (re)read

    try:
        with open(path, "rb") as f:  # never more than the limit into memory
            text = f.read(DEFAULT_LIMITS.max_bytes + 1)
    except OSError as e:
        raise ConfigError(
            f"cannot read cluster description {path}: {e.strerror}; "
            "fix the path or its permissions."
        ) from e
    data = load_yaml(text, f"cluster description {path}")
    if not isinstance(data, dict):
        raise ConfigError(
            f"cluster description {path} must be a mapping with a `systems` list; "
            "see system/cluster_default.yaml for the shape."
        )
    return data


def _system(check: _Checker, item: Any, where: str) -> SystemSpec:
    check.is_type(item, where, dict)
    check.keys(item, where, {"name", "ip", "model", "execmode"})
    name = check.name(item, where)
    ip = check.get(item, where, "ip", str)
    import ipaddress  # lazy with yaml: only when the file is read

    try:
        ipaddress.ip_address(ip)
    except ValueError:
        check.fail(f"{where}.ip", f"is {ip!r}, not an IP address (e.g. 127.0.1.1)")
    model = check.get(item, where, "model", str, "CS-2")
    if model not in MODELS:
        check.fail(f"{where}.model", f"is {model!r}; the simulator models {', '.join(MODELS)}")
    mode_text = check.get(item, where, "execmode", str, ExecMode.PIPELINED.value)
    try:
        mode = ExecMode.parse(mode_text)
    except UsageError:
        check.fail(f"{where}.execmode", f"is {mode_text!r}; use PIPELINED or WEIGHT_STREAMING")
    return SystemSpec(name, ip, model, mode)


def _nodes(check: _Checker, item: Any, where: str) -> list[NodeSpec]:
    check.is_type(item, where, dict)
    check.keys(item, where, {"name", "count", "cpus", "memory_gb", "role"})
    name = check.name(item, where)
    count = check.number(item, where, "count", int, (1, 100_000), None)
    cpus = check.number(item, where, "cpus", int, (1, 1_000_000))
    memory = check.number(item, where, "memory_gb", float, (0.001, 1e9))
    role = check.get(item, where, "role", str)
    if role not in NODE_ROLES:
        check.fail(f"{where}.role", f"is {role!r}; use one of {', '.join(NODE_ROLES)}")
    names = [name] if count is None else [f"{name}-{i}" for i in range(count)]
    return [NodeSpec(n, cpus, memory, role) for n in names]


_REQUIRED = object()


class _Checker:
    """Validation helpers that raise ConfigError naming the file and the key path."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str, problem: str) -> NoReturn:
        raise ConfigError(
            f"Invalid cluster description {self.path}: `{key}` {problem}; fix that key."
        )

    def is_type(self, value: Any, key: str, kind: type) -> None:
        if not isinstance(value, kind):
            names: dict[type, str] = {dict: "a mapping", list: "a list", str: "a string"}
            self.fail(key, f"must be {names.get(kind, kind.__name__)} (got {value!r})")

    def keys(self, mapping: dict[str, Any], where: str, known: set[str]) -> None:
        for key in mapping:
            if key not in known:
                full = f"{where}.{key}" if where else str(key)
                self.fail(full, f"is not a known key (known: {', '.join(sorted(known))})")

    def get(
        self, mapping: dict[str, Any], where: str, key: str, kind: type, default: Any = _REQUIRED
    ) -> Any:
        full = f"{where}.{key}" if where else key
        if key not in mapping or mapping[key] is None:
            if default is _REQUIRED:
                self.fail(full, "is missing")
            return default
        self.is_type(mapping[key], full, kind)
        return mapping[key]

    def number(
        self,
        mapping: dict[str, Any],
        where: str,
        key: str,
        kind: type,
        bounds: tuple[float, float],
        default: Any = _REQUIRED,
    ) -> Any:
        full = f"{where}.{key}" if where else key
        if key not in mapping and default is not _REQUIRED:
            return default
        value = mapping.get(key)
        ok_types = (int,) if kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, ok_types):
            self.fail(
                full, f"must be {'an integer' if kind is int else 'a number'} (got {value!r})"
            )
        if not bounds[0] <= value <= bounds[1]:
            self.fail(full, f"is {value}; it must be between {bounds[0]:g} and {bounds[1]:g}")
        return kind(value)

    def name(self, mapping: dict[str, Any], where: str) -> str:
        name: str = self.get(mapping, where, "name", str)
        if not NAME_RE.fullmatch(name):
            self.fail(f"{where}.name", f"is {name!r}; use letters, digits, '.', '_', '-'")
        return name

    def unique(self, names: list[str], where: str) -> None:
        seen: set[str] = set()
        for name in names:
            if name in seen:
                self.fail(where, f"names {name!r} twice; names must be unique")
            seen.add(name)
