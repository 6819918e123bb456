"""`csctl`: the Wafer-Scale Cluster's command-line tool, as documented for R1.9-R2.5.

    csctl get jobs [-a] [-m] [-l k=v,...] [-o table|json|yaml] [--sort priority|age]
    csctl get job NAME [-o json|yaml]
    csctl get cluster [--error-only] | system | nodegroup | node | volumes | version
    csctl cancel job NAME                     -> Job canceled successfully
    csctl label job NAME k=v [k-] ...         -> job/NAME was patched
    csctl log-export NAME [-b] [-c] [-p PATH] -> <PATH>/log-export-NAME.zip
    csctl types
    csctl config view

It is a client of the cluster management server (system/appliance/), which decides every
permission from who the kernel says the caller is: anyone lists jobs, a user acts on their own,
an admin of the store on all. Errors are one line, `error: ...`, and a non-zero exit.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cs2sim.system.errors import CsError, UsageError

__all__ = ["main", "COLUMNS", "TYPES", "format_age"]

COLUMNS = ("NAME", "AGE", "DURATION", "PHASE", "SYSTEMS", "USER", "LABELS", "DASHBOARD")
TYPES = (
    ("jobs", "job", "wsjobs of the cluster"),
    ("cluster", "", "systems and node groups"),
    ("system", "systems", "the CS-2 systems"),
    ("nodegroup", "nodegroups", "node groups"),
    ("node", "nodes", "the cluster's CPU nodes and the jobs holding them"),
    ("volume", "volumes", "the directories every job sees"),
    ("version", "", "server and system software versions"),
)
BROKEN_PIPE_EXIT = 141  # 128 + SIGPIPE: what `cs` and `csrun_wse` exit with when `| head` leaves
DEFAULT_CONFIG = Path.home() / ".cs" / "config"


def format_age(seconds: float) -> str:
    """kubectl-style age: 45s, 3m, 2h, 5d."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="csctl", description="Cerebras cluster command line tool.", allow_abbrev=False
    )
    p.add_argument(
        "--csconfig", default=str(DEFAULT_CONFIG), help="config file (default $HOME/.cs/config)"
    )
    p.add_argument("-d", "--debug", type=int, default=0, help="higher values show more fields")
    p.add_argument("--namespace", default="job-operator", help="the jobs' namespace")
    p.add_argument("-v", "--version", action="store_true", help="print csctl's version")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    get = sub.add_parser(
        "get",
        help="Get resources",
        description="Get resources of a given type. The types which the server "
        "supports can be discovered using the 'csctl types' "
        "command.",
    )
    get.add_argument("type", nargs="?", metavar="TYPE")
    get.add_argument("name", nargs="?", metavar="NAME")
    get.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    get.add_argument("-l", "--labels", default="", help="k=v,k2=v2: all must match")
    get.add_argument("-m", "--my-jobs", action="store_true", help="only my jobs")
    get.add_argument(
        "-a", "--all-states", action="store_true", help="All jobs run in the past week"
    )
    get.add_argument("--sort", default="priority", help="priority or age (default priority)")
    get.add_argument("--order", choices=("desc", "asc"), default="asc")
    get.add_argument("--max-jobs", type=int, default=5000, help="0 = no limit")
    get.add_argument(
        "--error-only",
        action="store_true",
        help="get cluster: only what is in error (systems not ACTIVE, their nodes)",
    )
    cancel = sub.add_parser("cancel", help="Cancel job")
    cancel.add_argument("type", choices=("job",))
    cancel.add_argument("name", metavar="NAME")
    label = sub.add_parser(
        "label",
        help="Label resources",
        description="Add k=v labels, remove with a trailing '-' (k-).",
    )
    label.add_argument("type", choices=("job",))
    label.add_argument("name", metavar="NAME")
    label.add_argument("labels", nargs="+", metavar="k=v|k-")
    export = sub.add_parser(
        "log-export",
        help="Gather and download logs.",
        description="Gather and download logs and artifacts from the "
        "cluster for a given job that is owned by the user "
        "group.",
    )
    export.add_argument("name", metavar="NAME")
    export.add_argument("-p", "--path", default=".", help='where the zip goes (default ".")')
    export.add_argument("-b", "--binaries", action="store_true", help="include binaries")
    export.add_argument(
        "-c", "--compile-artifacts", action="store_true", help="include the compile artifacts"
    )
    export.add_argument(
        "--num-lines", type=int, default=0, help="each log's last N lines (0, the default: all)"
    )
    export.add_argument(
        "--tasks", default="", help="only these tasks' logs, e.g. coordinator-0,chief-0"
    )
    export.add_argument(
        "--timeout", type=int, default=3600, help="seconds to wait for the export (default 3600)"
    )
    sub.add_parser("types", help="Display resource types")
    config = sub.add_parser("config", help="Modify csctl config files")
    config.add_argument("action", choices=("view",))
    return p


def _connect(args: argparse.Namespace) -> Any:
    from cs2sim.scripts.cluster_server import start_command
    from cs2sim.system.appliance.client import connect
    from cs2sim.system.store import default_home

    cfg = _config(args.csconfig)
    address = cfg.get("mgmtAddress")
    return connect(
        default_home(),
        start=None if address else start_command(),
        mgmt_address=address,
        credentials_path=cfg.get("credentialsPath"),
    )


def _config(path: str) -> dict[str, Any]:
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    import yaml

    data = yaml.safe_load(text) if len(text) < 65536 else None
    return data if isinstance(data, dict) else {}


def _emit(obj: Any, fmt: str) -> None:
    if fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(obj, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _table(rows: list[list[str]], head: tuple[str, ...]) -> None:
    widths = [max(len(str(r[i])) for r in [list(head), *rows]) for i in range(len(head))]
    for r in [list(head), *rows]:
        sys.stdout.write(
            "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n"
        )


def _get(args: argparse.Namespace) -> int:
    if not args.type:
        raise CsError(
            "missing required argument TYPE. Run 'csctl types' to see available resource types"
        )
    kind = args.type
    if args.error_only and kind != "cluster":
        raise UsageError("--error-only belongs to `csctl get cluster`.")
    if kind in ("jobs", "job") and args.name:
        job = _connect(args).call("get_job", name=args.name)["job"]
        if args.output == "table":
            _job_rows([job], time.time())
        else:
            _emit(job, args.output)
        return 0
    if kind in ("jobs", "job"):
        if args.sort not in ("priority", "age"):
            raise CsError(f"invalid sort type: {args.sort}, allowed types: [priority, age]")
        want = dict(kv.split("=", 1) for kv in args.labels.split(",") if "=" in kv)
        reply = _connect(args).call(
            "get_jobs", all=args.all_states, mine=args.my_jobs, labels=want, limit=args.max_jobs
        )
        jobs = reply["jobs"]
        if args.sort == "priority":
            jobs.sort(key=lambda j: (j["spec"]["priority"], j["meta"]["createTime"]))
        else:
            jobs.sort(key=lambda j: j["meta"]["createTime"], reverse=True)
        if args.order == "desc":
            jobs.reverse()
        if args.output != "table":
            _emit({"jobs": jobs}, args.output)
        else:
            _job_rows(jobs, reply["now"])
        return 0
    names = {t: t for t, alias, _ in TYPES} | {alias: t for t, alias, _ in TYPES if alias}
    if kind not in names:
        raise CsError(
            f"unknown resource type {kind!r}. Run 'csctl types' to see available resource types"
        )
    what = names[kind]
    reply = _connect(args).call("cluster", what=what)
    if args.error_only:
        return _errors_only(reply, args.output)
    if args.output != "table":
        _emit({k: v for k, v in reply.items() if k != "ok"}, args.output)
        return 0
    rows = reply["rows"]
    if rows:
        head = tuple(k.upper() for k in rows[0])
        _table([[_cell(v) for v in r.values()] for r in rows], head)
    if what == "cluster":
        sys.stdout.write("\n")
        groups = reply["nodegroups"]
        _table([[str(v) for v in g.values()] for g in groups], tuple(k.upper() for k in groups[0]))
        if not reply["healthy"]:
            sys.stdout.write("\nNot every system is ACTIVE: see `csctl get system`.\n")
    return 0


def _cell(value: Any) -> str:
    return "-" if value == "" or value is None else str(value)


def _errors_only(reply: dict[str, Any], fmt: str) -> int:
    """`get cluster --error-only`: the systems in error (not ACTIVE), or one line saying there
    are none; exit 0 either way, as a listing."""
    bad = [r for r in reply["rows"] if r["state"] != "ACTIVE"]
    if fmt != "table":
        _emit({"rows": bad}, fmt)
    elif bad:
        _table([[_cell(v) for v in r.values()] for r in bad], tuple(k.upper() for k in bad[0]))
    else:
        sys.stdout.write("No errors found: every system is ACTIVE.\n")
    return 0


def _when(iso: str | None) -> float | None:
    """`2026-01-02T03:04:05Z` as epoch seconds (a thousand rows: no strptime per row)."""
    if not iso:
        return None
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _job_rows(jobs: list[dict[str, Any]], now: float) -> None:
    rows = []
    for j in jobs:
        created, started = _when(j["meta"]["createTime"]), _when(j["status"]["startTime"])
        ended = _when(j["status"]["completionTime"])
        duration = "" if started is None else format_age((ended or now) - started)
        labels = ",".join(f"{k}={v}" for k, v in sorted(j["meta"]["labels"].items()))
        rows.append(
            [
                j["meta"]["name"],
                format_age(now - (created or now)),
                duration or "-",
                j["status"]["phase"],
                ",".join(j["status"]["systems"]) or "-",
                j["spec"]["user"]["username"],
                labels or "-",
                "-",
            ]
        )
    _table(rows, COLUMNS)


def _label(args: argparse.Namespace) -> int:
    add, remove = {}, []
    for word in args.labels:
        if "=" in word and not word.startswith("="):
            k, v = word.split("=", 1)
            add[k] = v
        elif word.endswith("-") and len(word) > 1:
            remove.append(word[:-1])
        else:
            raise CsError(f"invalid label {word!r}: use key=value to set, key- to remove")
    _connect(args).call("label", name=args.name, set=add, remove=remove)
    print(f"job/{args.name} was patched")
    return 0


def _export(args: argparse.Namespace) -> int:
    if not Path(args.path).is_dir():  # before asking the cluster for anything
        raise CsError(
            f"the export's directory {args.path} does not exist or is not a directory; "
            "create it or pass another with -p."
        )
    if args.num_lines < 0 or args.timeout < 1:
        raise CsError("--num-lines must be 0 or more and --timeout 1 or more.")
    sys.stderr.write(" Gathering log data within cluster...\n")
    reply = _connect(args).call(
        "log_export",
        name=args.name,
        binaries=args.binaries,
        compile=args.compile_artifacts,
        num_lines=args.num_lines,
        tasks=[t for t in args.tasks.split(",") if t],
        timeout=args.timeout,
    )
    target = Path(args.path) / f"{reply['base']}.zip"
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(base64.b64decode(reply["zip"]))
        os.replace(tmp, target)  # a complete zip or none
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise CsError(
            f"could not write the export into {args.path} ({e.strerror}); pass a "
            "directory you may write with -p."
        ) from None
    print(f"Logs are exported to {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        if args.version:
            from cs2sim.system.appliance.server import SERVER_VERSION

            print(f"csctl version {SERVER_VERSION}")
            return 0
        if args.command == "get":
            return _get(args)
        if args.command == "cancel":
            _connect(args).call("cancel", name=args.name)
            print("Job canceled successfully")
            return 0
        if args.command == "label":
            return _label(args)
        if args.command == "log-export":
            return _export(args)
        if args.command == "types":
            _table(
                [[t, alias or "-", what] for t, alias, what in TYPES],
                ("TYPE", "ALIAS", "DESCRIPTION"),
            )
            return 0
        if args.command == "config":
            cfg = _config(args.csconfig)
            if "token" in cfg:
                cfg["token"] = "REDACTED"
            sys.stdout.write(
                f"# {args.csconfig}{'' if cfg else ' (none: the local server of $CS2_HOME)'}\n"
            )
            if cfg:
                import yaml

                sys.stdout.write(yaml.safe_dump(cfg, sort_keys=True))
            return 0
        p.print_help()
        return 0
    except CsError as e:
        sys.stderr.write(f"error: {e}\n")
        return e.exit_code
    except BrokenPipeError:  # `csctl get jobs | head`: the reader left; nothing to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # and no second failure when stdout is flushed
        os.close(devnull)
        return BROKEN_PIPE_EXIT
    except OSError as e:
        sys.stderr.write(f"error: {e.strerror or e} ({e.filename}); check the path.\n")
        return 1


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
