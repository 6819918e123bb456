"""The client side's two errors (one sentence each, as every CsError)."""

from __future__ import annotations

from cs2sim.system.errors import CsError

__all__ = ["ServerGone", "RequestFailed"]


class ServerGone(CsError):
    """The cluster server cannot be reached, or went away mid-conversation."""

    exit_code = 1


class RequestFailed(CsError):
    """The server refused or failed a request; `exit_code` is the one it gave."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = code
