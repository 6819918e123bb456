"""What `csctl get cluster|system|nodegroup|node|volume|version` show: read from the cluster
description and the store at the moment of the request (the real tool's table layouts are not
public, so the columns are the facts a user checks: state, mode, holder; node counts, CPUs,
memory; which job holds a node; the directories every job sees).

A holder is named as the user knows it: the wsjob whose launch holds the system or node (the
server passes `names`, scheduler job id -> wsjob id), else the scheduler's job id. Every row
says whether it is in error (`error`), which `csctl get cluster --error-only` keeps: a system
that is not ACTIVE, a node of a system in error."""

from __future__ import annotations

from typing import Any

from cs2sim.system.cluster import cluster_source, load_cluster
from cs2sim.system.machine import Machine, SystemStatus, list_systems, software_version
from cs2sim.system.store import Store

__all__ = ["cluster_facts", "WHATS"]

WHATS = ("cluster", "system", "nodegroup", "node", "volume", "version")


def _holder(s: SystemStatus, names: dict[str, str]) -> str:
    """The job holding system status `s`, by the name its user knows (module docstring)."""
    if s.held_by is None:
        return ""
    if str(s.held_by) in names:
        return names[str(s.held_by)]
    for job in s.running_jobs:  # a wsjob's chief registers as "<wsjob id>: <command>"
        head = str(job.command).split(":", 1)[0]
        if head.startswith("wsjob-"):
            return head
    return str(s.held_by)


def _systems(store: Store, names: dict[str, str]) -> list[dict[str, Any]]:
    rows = []
    for name in list_systems(store):
        s = Machine(store, name).status()
        rows.append(
            {
                "name": s.name,
                "ip": s.ip,
                "state": s.state.value,
                "mode": s.active_mode.value,
                "job": _holder(s, names),
                "fault": s.fault_reason,
            }
        )
    return rows


def _nodes(store: Store, names: dict[str, str]) -> list[dict[str, Any]]:
    """Every CPU node of the cluster: its role, size, and the running job that holds it."""
    from cs2sim.system.sched import queue

    held: dict[str, str] = {}
    for job in queue.jobs(store):
        if job.state == "RUNNING":
            for component in job.nodes:
                for node in component:
                    held[node] = names.get(str(job.id), str(job.id))
    cluster = load_cluster(cluster_source())
    return [
        {
            "name": n.name,
            "role": n.role,
            "state": "ALLOCATED" if n.name in held else "IDLE",
            "cpus": n.cpus,
            "memory_gb": n.memory_gb,
            "job": held.get(n.name, ""),
        }
        for n in cluster.nodes
    ]


def _volumes() -> list[dict[str, Any]]:
    """The directories every job sees: the site's mount dirs (the real csrun_cpu's MOUNT_DIRS)
    and the directory it was submitted from. There are no containers here: a job's processes
    see this host's file system, so the container path is the host path."""
    cluster = load_cluster(cluster_source())
    dirs = [d.strip() for d in cluster.site.mount_dirs.split(",") if d.strip()]
    rows = [
        {
            "name": f"site-{i}",
            "type": "hostPath",
            "container_path": d,
            "server_path": d,
            "readonly": False,
            "allow_venv": True,
        }
        for i, d in enumerate(dirs)
    ]
    rows.append(
        {
            "name": "workdir",
            "type": "hostPath",
            "container_path": "(the directory the job was submitted from)",
            "server_path": "(the same)",
            "readonly": False,
            "allow_venv": True,
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


def cluster_facts(
    store: Store, what: str, server_version: str, names: dict[str, str] | None = None
) -> dict[str, Any]:
    """The rows for `what` (one of WHATS); `names`: scheduler job id -> wsjob id."""
    names = names or {}
    if what == "system":
        return {"rows": _systems(store, names)}
    if what == "nodegroup":
        return {"rows": _nodegroups()}
    if what == "node":
        return {"rows": _nodes(store, names)}
    if what == "volume":
        return {"rows": _volumes()}
    if what == "version":
        return {
            "rows": [
                {"component": "cluster-server", "version": server_version},
                {"component": "system software", "version": software_version()},
            ]
        }
    systems = _systems(store, names)
    return {
        "rows": systems,
        "nodegroups": _nodegroups(),
        "healthy": all(s["state"] == "ACTIVE" for s in systems),
    }
