"""The systems of the cluster, as the store knows them: synced from the cluster description.

The systems come from the cluster description (cluster.yaml), copied into the store when it is
created and again only when the file changes (so opening a Machine does not import yaml). A
shared store's service keeps it in sync with its owner's file (members ask it, as for any
operation).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from cs2sim.system.cluster import cluster_source, load_cluster
from cs2sim.system.errors import ConfigError
from cs2sim.system.state import State
from cs2sim.system.store_ops import operation

if TYPE_CHECKING:
    import sqlite3

    from cs2sim.system.store import Store

__all__ = ["list_systems", "system_addresses"]


@operation("systems.list", args={})
def list_systems(store: Store) -> list[str]:
    """The systems of the cluster, in its order (syncing the store with the file if it
    changed)."""
    return [name for name, _ in system_addresses(store)]


@operation("systems.addresses", args={})
def system_addresses(store: Store) -> list[tuple[str, str]]:
    """(name, ip) of each system of the cluster, in its order (syncing as `list_systems`)."""
    source = cluster_source(store.home)
    try:
        st = source.stat()
    except OSError as e:
        raise ConfigError(
            f"cannot read cluster description {source}: {e.strerror}; "
            "fix the path or its permissions."
        ) from e
    key = f"{source}|{st.st_mtime_ns}|{st.st_size}"
    with store.read() as db:
        cached = db.execute("SELECT value FROM meta WHERE key = 'cluster'").fetchone()
        if cached and cached[0] == key:
            return _addresses(db)
    cluster = load_cluster(source)  # only when the file is new or changed
    now = time.time()
    with store.transaction() as db:
        db.execute("UPDATE systems SET in_cluster = 0")
        for position, spec in enumerate(cluster.systems):
            db.execute(
                "INSERT INTO systems (name, ip, model, position, in_cluster, state,"
                " configured_mode, active_mode, state_since) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET ip = excluded.ip, model = excluded.model,"
                " position = excluded.position, in_cluster = 1",
                (
                    spec.name,
                    spec.ip,
                    spec.model,
                    position,
                    str(State.ACTIVE),
                    str(spec.execmode),
                    str(spec.execmode),
                    now,
                ),
            )
        db.execute(
            "INSERT INTO meta (key, value) VALUES ('cluster', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key,),
        )
        return _addresses(db)


def _addresses(db: sqlite3.Connection) -> list[tuple[str, str]]:
    rows = db.execute(
        "SELECT name, ip FROM systems WHERE in_cluster = 1 ORDER BY position"
    ).fetchall()
    return [(str(name), str(ip)) for name, ip in rows]
