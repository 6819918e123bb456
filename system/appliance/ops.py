"""The cluster server's operations: one table of name -> argument schema, who may call, handler.

Every request is `{"op": NAME, "args": {...}}` in system/wire.py's framing. The server checks
the arguments against the schema (types, sizes) before the handler runs, and decides who may
call from the caller's identity as the kernel reports it (SO_PEERCRED on the Unix socket, the
token's owner on TCP), never from anything the request says about itself:

    anyone    any local user (listing, cluster facts)
    owner     the job's owner, or an admin of the store (others are refused, and audited)
    runner    a caller the server can run processes for: its own user (or any user when the
              server runs as root, which then runs the job as that user)
    admin     an admin of the store, or the user the server runs as
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Caller",
    "Op",
    "OPS",
    "PROTOCOL",
    "ArgError",
    "check_args",
    "csx_wording",
    "MAX_STR",
    "MAX_LIST",
]

MAX_STR = 4096  # any one string argument
MAX_LIST = 256  # any list or dict argument's entries


@dataclass(frozen=True)
class Caller:
    """Who sent a request, from the kernel (or a verified token)."""

    uid: int
    name: str
    admin: bool
    via: str  # "unix" | "tls"


@dataclass(frozen=True)
class Op:
    name: str
    schema: dict[str, type | tuple[type, ...]]  # argument -> its type(s); others refused
    who: str  # anyone | owner | runner | admin
    handler: str  # the Server method that serves it
    streams: bool = False  # answers with a stream of frames (watch), not one reply


OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op("ping", {}, "anyone", "op_ping"),
        Op(
            "submit",
            {
                "kind": str,
                "priority": str,
                "labels": dict,
                "num_csx": int,
                "mode": str,
                "spec": dict,
            },
            "runner",
            "op_submit",
        ),
        Op(
            "check",
            {
                "num_csx": int,
                "mode": str,
                "num_workers_per_csx": (int, type(None)),
                "num_wgt_servers": (int, type(None)),
                "num_act_servers": (int, type(None)),
            },
            "anyone",
            "op_check",
        ),
        Op(
            "get_jobs",
            {"all": bool, "mine": bool, "labels": dict, "limit": int},
            "anyone",
            "op_get_jobs",
        ),
        Op("get_job", {"name": str}, "owner", "op_get_job"),
        Op("cancel", {"name": str, "reason": str}, "owner", "op_cancel"),
        Op("label", {"name": str, "set": dict, "remove": list}, "owner", "op_label"),
        Op(
            "log_export",
            {
                "name": str,
                "binaries": bool,
                "compile": bool,
                "num_lines": int,
                "tasks": list,
                "timeout": int,
            },
            "owner",
            "op_log_export",
        ),
        Op(
            "watch", {"name": str, "attach": bool, "offset": int}, "owner", "op_watch", streams=True
        ),
        Op("cluster", {"what": str}, "anyone", "op_cluster"),
        Op("token", {}, "anyone", "op_token"),
        Op("shutdown", {}, "admin", "op_shutdown"),
    )
}


# which operations with which arguments: a client and a server that disagree cannot work together
PROTOCOL = hashlib.sha256(
    repr(sorted((o.name, sorted(o.schema), o.who) for o in OPS.values())).encode()
).hexdigest()[:12]


class ArgError(ValueError):
    """A request whose arguments do not fit the operation's schema (the text says how)."""


def _check_value(where: str, value: Any, depth: int = 0) -> None:
    if depth > 3:
        raise ArgError(f"{where} is nested too deeply")
    if isinstance(value, str):
        if len(value) > MAX_STR:
            raise ArgError(f"{where} is longer than {MAX_STR} characters")
    elif isinstance(value, (list, dict)):
        if len(value) > MAX_LIST:
            raise ArgError(f"{where} has more than {MAX_LIST} entries")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            _check_value(f"{where}[{k!r}]", v, depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise ArgError(f"{where} is of an unsupported type")


def check_args(op: Op, args: Any) -> dict[str, Any]:
    """`args` if it fits `op`'s schema (missing arguments are allowed: handlers default them)."""
    if not isinstance(args, dict):
        raise ArgError("args must be an object")
    for key, value in args.items():
        want = op.schema.get(key)
        if want is None:
            raise ArgError(f"{op.name} takes no argument {key!r}")
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ArgError(f"{op.name}'s argument {key!r} has the wrong type")
        _check_value(key, value)
    return args


# The system's refusals are worded for a launcher user (`python-ws run.py --cs_ip ...`); a user of
# the appliance gives neither a wrapper nor --cs_ip, so the server says what *they* change:
# (pattern, replacement) in order
_CSX_WORDS: tuple[tuple[str, str], ...] = (
    (r"launch it with `python-ws`", "run it with `python run.py CSX` (weight streaming)"),
    (r"launch it with `python`", "run it with `python run.py CSX pipeline`"),
    (r"start the run with python-ws for weight streaming", "run it with `python run.py CSX`"),
    (r"num_csx (\d+) from --cs_ip [^)\s]+", r"--num_csx \1"),
    (
        r"; or start it with --cs_ip naming other systems \(`system list` in cs shows them all\)",
        "; or ask for fewer with --num_csx (`csctl get system` shows them all)",
    ),
    (r",? ?or start this job on another system \(--cs_ip\)", ""),
    (r"\(runconfig\.num_csx\)", "(--num_csx)"),
)


def csx_wording(message: str) -> str:
    """A system refusal as an appliance user acts on it (no `--cs_ip`, no `python-ws`)."""
    for pattern, replacement in _CSX_WORDS:
        message = re.sub(pattern, replacement, message)
    return message
