"""Where a $CS2_HOME's cluster server listens, the largest request it reads, and which cluster
file it serves (what a client needs, without importing the server)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["socket_path", "server_dir", "MAX_REQUEST", "cluster_identity"]

MAX_REQUEST = 256 * 1024


def server_dir(home: Path) -> Path:
    """`<home>/wsjob`, created with home's sharing (system/paths.py)."""
    from cs2sim.system.paths import shared_dir

    return shared_dir(Path(home), "wsjob")


def socket_path(home: Path) -> Path:
    return Path(home) / "wsjob" / "server.sock"


def cluster_identity() -> tuple[str, str]:
    """The cluster file this process would use ($CS2_CLUSTER, $CS2_HOME/cluster.yaml or the
    built-in one) and a digest of its bytes: a server and a client that differ in either do
    not describe the same cluster."""
    import hashlib

    from cs2sim.system.cluster import cluster_source
    from cs2sim.system.errors import CsError

    try:
        path = cluster_source()
        return str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except (OSError, CsError) as e:
        return "", f"unreadable ({type(e).__name__})"
