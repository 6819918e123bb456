"""Where a $CS2_HOME's cluster server listens, the largest request it reads, and which cluster
file it serves (what a client needs, without importing the server)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["socket_path", "server_dir", "MAX_REQUEST", "cluster_identity"]

MAX_REQUEST = 256 * 1024
DEFAULT_CLUSTER = Path(__file__).parents[1] / "cluster_default.yaml"  # system/cluster.py's


def server_dir(home: Path) -> Path:
    """`<home>/wsjob`, created with home's sharing (system/paths.py)."""
    from cs2sim.system.paths import shared_dir

    return shared_dir(Path(home), "wsjob")


def socket_path(home: Path) -> Path:
    return Path(home) / "wsjob" / "server.sock"


def cluster_identity() -> tuple[str, str]:
    """The cluster file this process would use ($CS2_CLUSTER, $CS2_HOME/cluster.yaml or the
    built-in one, as system/cluster.py's cluster_source resolves it, without importing that
    module: csctl asks this on every call) and a digest of its bytes: a server and a client
    that differ in either do not describe the same cluster."""
    import hashlib

    from cs2sim.system import knobs

    env = knobs.raw("CS2_CLUSTER")
    if env:
        path = Path(env).expanduser()
    else:
        home = knobs.text("CS2_HOME")
        local = (Path(home).expanduser() if home else Path.home() / ".cs2sim") / "cluster.yaml"
        path = local if local.is_file() else DEFAULT_CLUSTER
    try:
        return str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError as e:
        return str(path), f"unreadable ({e.strerror})"
