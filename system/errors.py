"""The project's errors: one hierarchy, one display point (the shell / launcher `main`).

Every message is one sentence that says what failed and what to do about it. Code that raises
these never prints; `csshell` and `scripts` catch `CsError` at their boundary, print
``error: <message>`` and exit with ``exit_code``.

* CsError                      base; exit code 1
  - UsageError                 bad command line or command words (exit 2)
    · UnknownCommand           no such command (carries "did you mean" candidates)
    · AmbiguousCommand         an abbreviation matches several commands
  - InvalidTransition          the state machine refuses (state, command); nothing changed
    · JobRefused               a job's target system is not ACTIVE in the job's mode (exit 69)
  - PermissionDenied           the user's role may not run this command (exit 77, sysexits NOPERM)
  - AuthenticationFailed       wrong user or password
  - StoreError                 the SQLite store is unreadable, corrupt or of a newer schema
    · StoreAccessDenied        the OS refuses this user the store (file or directory modes; 77)
  - NoSuchJob                  no job has the id given (exit 1, as scancel's "Invalid job id")
  - ConfigError                a YAML file (cluster.yaml, params.yaml) is invalid; names the key
  - ResourceError              the host cannot do it (memory, nodes); names need and alternatives
  - RuntimeFailure             a training/compile run failed in a way the user can act on
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "CsError",
    "UsageError",
    "UnknownCommand",
    "AmbiguousCommand",
    "InvalidTransition",
    "JobRefused",
    "PermissionDenied",
    "AuthenticationFailed",
    "StoreError",
    "StoreAccessDenied",
    "ConfigError",
    "NoSuchJob",
    "ResourceError",
    "RuntimeFailure",
    "CsWarning",
    "one_line_warnings",
]


class CsError(Exception):
    """An error the user can act on; its message is shown as is."""

    exit_code: int = 1


class UsageError(CsError):
    """The command line or the command words are wrong."""

    exit_code = 2


class UnknownCommand(UsageError):
    """No command matches the words typed."""

    def __init__(self, message: str, candidates: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.candidates = candidates


class AmbiguousCommand(UsageError):
    """An abbreviation matches more than one command."""

    def __init__(self, message: str, candidates: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.candidates = candidates


class InvalidTransition(CsError):
    """The system's state does not allow this command; nothing was changed."""


class JobRefused(InvalidTransition):
    """A job cannot run on its target system now (state or execution mode); nothing started.

    Exit 69 (sysexits EX_UNAVAILABLE): a script can tell "the CS-2 is not ready for this job" from
    a bad command line (2) or a failed run (1) and wait or page an admin instead of retrying.
    """

    exit_code = 69


class PermissionDenied(CsError):
    """The current user's role may not run this command."""

    exit_code = 77


class AuthenticationFailed(CsError):
    """Wrong user name or password."""

    exit_code = 77


class StoreError(CsError):
    """The system store cannot be read or written."""


class StoreAccessDenied(StoreError):
    """The OS does not let this user read or write the store (exit 77, like PermissionDenied)."""

    exit_code = 77


class NoSuchJob(CsError):
    """No job has this id (a lookup that found nothing, not a wrong command line: exit 1)."""


class ConfigError(CsError):
    """A configuration file is invalid; the message names the key path."""


class ResourceError(CsError):
    """The host cannot provide what was asked (memory, nodes)."""


class RuntimeFailure(CsError):
    """A run failed in a way the user can act on."""


class CsWarning(UserWarning):
    """Something the user should know that did not stop the command (a damaged row skipped):
    its message is one sentence, shown by the console as ``warning: <message>``."""


def one_line_warnings(write: Callable[[str], object]) -> None:
    """Have every CsWarning shown as one line, ``warning: <message>``, through `write` (the
    printing layer's: a launcher's or run.py's stderr); other warnings as Python shows them."""
    import warnings

    default = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *rest: Any, **kw: Any) -> None:
        if issubclass(category, CsWarning):
            write(f"warning: {' '.join(str(message).split())}\n")
        else:
            default(message, category, *rest, **kw)

    warnings.showwarning = show
