"""What `csctl get cluster|system|nodegroup|version` show: read from the cluster description and
the store at the moment of the request (the real tool's table layouts are not public, so the
columns are the facts a user checks: state, mode, holder; node counts, CPUs, memory)."""

from __future__ import annotations

from typing import Any

from cs2sim.system.cluster import cluster_source, load_cluster
from cs2sim.system.machine import Machine, list_systems, software_version
from cs2sim.system.store import Store

__all__ = ["cluster_facts", "WHATS"]

WHATS = ("cluster", "system", "nodegroup", "version")


def _systems(store: Store) -> list[dict[str, Any]]:
    rows = []
    for name in list_systems(store):
        s = Machine(store, name).status()
        rows.append(
            {
                "name": s.name,
                "ip": s.ip,
                "state": s.state.value,
                "mode": s.active_mode.value,
                "job": "" if s.held_by is None else str(s.held_by),
                "fault": s.fault_reason,
            }
        )
    return rows


def _nodegroups() -> list[dict[str, Any]]:
    cluster = load_cluster(cluster_source())
    groups: dict[str, dict[str, Any]] = {}
    for n in cluster.nodes:
        g = groups.setdefault(n.role, {"name": n.role, "nodes": 0, "cpus": 0, "memory_gb": 0.0})
        g["nodes"] += 1
        g["cpus"] += n.cpus
        g["memory_gb"] += n.memory_gb
    mx = cluster.memoryx
    return [
        *groups.values(),
        {
            "name": "memoryx",
            "nodes": 1,
            "cpus": 0,
            "memory_gb": float(getattr(mx, "capacity_tb", 0)) * 1000,
        },
    ]


def cluster_facts(store: Store, what: str, server_version: str) -> dict[str, Any]:
    """The rows for `what` (one of WHATS)."""
    if what == "system":
        return {"rows": _systems(store)}
    if what == "nodegroup":
        return {"rows": _nodegroups()}
    if what == "version":
        return {
            "rows": [
                {"component": "cluster-server", "version": server_version},
                {"component": "system software", "version": software_version()},
            ]
        }
    systems = _systems(store)
    return {
        "rows": systems,
        "nodegroups": _nodegroups(),
        "healthy": all(s["state"] == "ACTIVE" for s in systems),
    }
