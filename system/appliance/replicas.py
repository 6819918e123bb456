"""What an execute wsjob reserves: its replicas, as the csrun_wse heterogeneous job that runs them.

The real cluster's execute job is a set of replica types (the Wafer-Scale Cluster's job
operator: coordinator, weight servers (MemoryX), activation servers, workers, chief). Here each
is a task of one csrun_wse launch, so the scheduler that serves csrun_wse reserves the nodes:

    component 0            the chief, on the node wired to the first CS-2 (its GRES)
    component 1            the coordinator (one node)
    next W components      the weight servers, `--num_wgt_servers` (one node each)
    next A x N components  the activation servers, `--num_act_servers` per CS-X (one node each)
    last component         the input workers: one node per CS-X, `--num_workers_per_csx` tasks

The launch's tasks learn which single-task component is which from SERVERS_ENV (the counts W
and A x N), set in the job's environment; runtime/job/roles.py reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cs2sim.system.errors import JobRefused
from cs2sim.system.store import Store

__all__ = [
    "Plan",
    "plan_of",
    "plan_for",
    "SERVERS_ENV",
    "COUNTS",
    "COMPILE_FROM_ENV",
    "REPLICA_TYPES",
    "DEFAULT_WGT_SERVERS",
    "DEFAULT_ACT_SERVERS",
]

COUNTS = ("num_workers_per_csx", "num_wgt_servers", "num_act_servers")  # the client's flags
COMPILE_FROM_ENV = "CS2SIM_COMPILE_FROM"  # the compile directory the execute job loads
SERVERS_ENV = "CS2SIM_WS_SERVERS"  # "W,A": weight and activation server components, in order
REPLICA_TYPES = ("chief", "coordinator", "weight", "activation", "worker")
DEFAULT_WGT_SERVERS = 1  # when unset and the nodes can hold it (plan_for)
DEFAULT_ACT_SERVERS = 1  # per CS-X, as Model Zoo's --num_act_servers (same)
CPUS_PER_WORKER = 1


def _count(spec: dict[str, Any], key: str, default: int) -> int:
    value = spec.get(key)
    if value is None:
        return default
    if type(value) is not int or not 0 <= value <= 64:
        raise JobRefused(
            f"{key} {value!r} is not a whole number from 0 to 64; pass --{key} with one."
        )
    return value


@dataclass(frozen=True)
class Plan:
    """The replicas of one execute job."""

    num_csx: int
    workers_per_csx: int  # input-worker tasks on each CS-X's worker node
    wgt_servers: int
    act_servers: int  # in all (per CS-X x num_csx)

    @property
    def single_task_nodes(self) -> int:
        return 2 + self.wgt_servers + self.act_servers

    @property
    def total_nodes(self) -> int:
        return self.single_task_nodes + self.num_csx

    def shape(self) -> list[str]:
        """csrun_wse's flags for this job."""
        return [
            f"--total-nodes={self.total_nodes}",
            f"--single-task-nodes={self.single_task_nodes}",
            f"--tasks-per-node={self.workers_per_csx}",
            f"--cpus-per-task={CPUS_PER_WORKER}",
        ]

    def env(self) -> dict[str, str]:
        return {SERVERS_ENV: f"{self.wgt_servers},{self.act_servers}"}

    def components(self) -> list[tuple[str, int]]:
        """(replica type, tasks) per heterogeneous component, in the launch's order."""
        return [
            ("chief", 1),
            ("coordinator", 1),
            *[("weight", 1)] * self.wgt_servers,
            *[("activation", 1)] * self.act_servers,
            ("worker", self.num_csx * self.workers_per_csx),
        ]

    def describe(self) -> str:
        return (
            f"{self.total_nodes} nodes (the chief, a coordinator, {self.wgt_servers} weight "
            f"server(s), {self.act_servers} activation server(s) and {self.num_csx} "
            f"input-worker node(s))"
        )

    def replicas(self, job_id: str, nodes: list[list[str]] | None) -> list[dict[str, Any]]:
        """`.status.replicas[]`: each replica's type, instance name and node (once placed;
        `nodes` is the scheduler's node names per component)."""
        out: list[dict[str, Any]] = []
        index: dict[str, int] = {}
        for comp, (kind, tasks) in enumerate(self.components()):
            placed = list(nodes[comp]) if nodes and comp < len(nodes) else []
            per_node = max(1, -(-tasks // max(1, len(placed)))) if placed else tasks
            for t in range(tasks):
                i = index.get(kind, 0)
                index[kind] = i + 1
                node = placed[t // per_node] if placed and t // per_node < len(placed) else None
                out.append({"type": kind, "name": f"{job_id}-{kind}-{i}", "node": node})
        return out

    def check_fits(self, store: Store) -> None:
        """JobRefused (before anything is reserved) when even an idle cluster's nodes cannot
        hold this job."""
        from cs2sim.system.cluster import cluster_source, gres_nodes, load_cluster
        from cs2sim.system.sched.fit import never_fits
        from cs2sim.system.sched.flags import LaunchError, parse_wse
        from cs2sim.system.sched.queue import cluster_nodes

        cluster = load_cluster(cluster_source())
        site = cluster.site
        worker_cpus = [n.cpus for n in cluster.nodes if n.name not in gres_nodes(site)]
        try:
            launch = parse_wse([*self.shape(), "python-ws", "run.py"], site, worker_cpus, [])
        except LaunchError as e:
            raise JobRefused(
                f"the execute job's shape is refused by csrun_wse ({e}); lower "
                "--num_workers_per_csx."
            ) from None
        assert launch.request is not None
        why = never_fits(launch.request.components, cluster_nodes(store), frozenset())
        if why is not None:
            raise JobRefused(
                f"the execute job needs {self.describe()}, which the cluster "
                f"cannot hold even when idle ({why}); lower --num_wgt_servers, "
                "--num_act_servers, --num_workers_per_csx or --num_csx, or ask "
                "an admin to add nodes to the cluster description; nothing was "
                "reserved."
            )


def plan_for(num_csx: int, spec: dict[str, Any], store: Store) -> Plan:
    """The plan of a new execute job, checked against the cluster's nodes (JobRefused when even
    an idle cluster cannot hold it). A count the user gave is honoured or refused; one left
    unset is the cluster's to choose, as Model Zoo's --num_wgt_servers is an upper bound: the
    default when the nodes can hold it, else none (the chief's executor does that work)."""
    plan = plan_of(num_csx, spec)
    try:
        plan.check_fits(store)
        return plan
    except JobRefused:
        unset = {k: 0 for k in ("num_wgt_servers", "num_act_servers") if spec.get(k) is None}
        if not unset:
            raise
    smaller = plan_of(num_csx, {**spec, **unset})
    try:
        smaller.check_fits(store)
    except JobRefused:
        plan.check_fits(store)  # the sentence about what was asked for
        raise
    return smaller


def plan_of(num_csx: int, spec: dict[str, Any]) -> Plan:
    """The plan of an execute job from its spec's counts (the client's flags)."""
    workers = _count(spec, "num_workers_per_csx", 0)
    act = _count(spec, "num_act_servers", DEFAULT_ACT_SERVERS)
    return Plan(
        num_csx=max(1, num_csx),
        workers_per_csx=max(1, workers),
        wgt_servers=_count(spec, "num_wgt_servers", DEFAULT_WGT_SERVERS),
        act_servers=act * max(1, num_csx),
    )
