"""Where a $CS2_HOME's cluster server listens, and the largest request it reads (what a client
needs, without importing the server)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["socket_path", "server_dir", "MAX_REQUEST"]

MAX_REQUEST = 256 * 1024


def server_dir(home: Path) -> Path:
    """`<home>/wsjob`, created with home's sharing (system/paths.py)."""
    from cs2sim.system.paths import shared_dir

    return shared_dir(Path(home), "wsjob")


def socket_path(home: Path) -> Path:
    return Path(home) / "wsjob" / "server.sock"
