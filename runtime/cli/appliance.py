"""`python run.py CSX [flags]`: the appliance client on the user node.

The forms are the Model Zoo's: R1.9+ `python run.py CSX --params ... --num_csx N --mode train`,
R1.8 `python run.py CSX pipeline|weight_streaming ...` (pipeline: one system in PIPELINED mode),
and `python run.py CPU ...` for a run on this host (runtime/cli/main.py). The flags are the real
client's (Model Zoo's cli_parser.py, R1.8-R2.4); an unknown or malformed one is refused by
argparse as the real parser does (usage line, exit 2).

The client talks to the cluster management server only (system/appliance/client.py), starting
one when none runs: a compile wsjob unless a complete compile with the same hash is found
(`Found existing cached compile with hash`), then an execute wsjob on num_csx systems whose
output it watches. Rate and GlobalRate are computed here, on the user node, from the training
outputs as they arrive (runtime/training/metrics.py's RateTracker), so a checkpoint's pause and
the first steps show in them as Cerebras' "Measure throughput of your model" explains. Every
line printed comes from one table (runtime/cli/appliance_lines.py), in its order.

Exit codes: 0 success, 2 a command-line error, 69 a job the cluster refuses (nothing was
reserved), 75 a system left ACTIVE while the job ran (checkpoints kept), 124 the job ran past
--job_time_sec, 130 interrupted (the job is cancelled), 1 anything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cs2sim.runtime.cli.appliance_eval import model_dir_of, plan_parts
from cs2sim.runtime.cli.appliance_watch import (
    EXIT_TIME_LIMIT,
    Out,
    Training,
    failed,
    follow,
)
from cs2sim.system.errors import CsError

__all__ = ["build_csx_parser", "run_csx", "EXECUTION_STRATEGIES", "EXIT_TIME_LIMIT"]

EXECUTION_STRATEGIES = ("pipeline", "weight_streaming")
ENV_KEEP = (
    "CS2",
    "SLURM",
    "PATH",
    "HOME",
    "LANG",
    "LC_",
    "PYTHON",
    "VIRTUAL_ENV",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "OMP_",
    "OPENBLAS",
    "MKL",
    "TZ",
    "COLUMNS",
)
log = logging.getLogger("cs2sim.run")
Loader = Callable[[list[str]], dict[str, Any]]  # run.py argv -> its effective params


def _labels(text: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.\-/]{1,63}=[A-Za-z0-9_.\-/]{0,63}", text):
        raise argparse.ArgumentTypeError(
            f"invalid label {text!r}: use key=value (letters, digits, '_.-/')"
        )
    return text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _one_or_more(text: str) -> int:
    value = _positive(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more (the CS-X systems the job runs on)")
    return value


def build_csx_parser(model_name: str) -> argparse.ArgumentParser:
    """The CSX parser (Model Zoo R1.8 cli_parser.py, with R1.9's optional strategy and R2.4's
    --job_priority)."""
    p = argparse.ArgumentParser(
        prog="run.py CSX",
        allow_abbrev=False,
        description=f"Run {model_name} on the Wafer-Scale Cluster.",
    )
    p.add_argument(
        "execution_strategy",
        nargs="?",
        choices=EXECUTION_STRATEGIES,
        help="R1.8's form; from R1.9 weight_streaming is implied.",
    )
    p.add_argument("-p", "--params", default=None, help="Path to the params YAML.")
    p.add_argument(
        "-m", "--mode", required=True, choices=("train", "eval", "train_and_eval", "eval_all")
    )
    p.add_argument("-o", "--model_dir", default=None, help="Checkpoints and summaries go here.")
    p.add_argument("--checkpoint_path", default=None)
    p.add_argument("--is_pretrained_checkpoint", action="store_true", default=None)
    p.add_argument(
        "--logging", default=None, type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR")
    )
    p.add_argument("--max_steps", type=_positive, default=None)
    p.add_argument("--eval_steps", type=_positive, default=None)
    only = p.add_mutually_exclusive_group()
    only.add_argument("--compile_only", action="store_true", help="Compile; do not run.")
    only.add_argument("--validate_only", action="store_true", help="Validate the graph only.")
    p.add_argument("--num_csx", type=_one_or_more, default=1, help="CS-X systems (default 1).")
    p.add_argument(
        "--num_workers_per_csx",
        type=_positive,
        default=0,
        help="Input workers per CS-X (0: automatic, one).",
    )
    p.add_argument(
        "--num_wgt_servers",
        type=_positive,
        default=None,
        help="MemoryX weight servers (default 1).",
    )
    p.add_argument(
        "--num_act_servers",
        type=_positive,
        default=None,
        help="Activation servers per CS-X (default 1).",
    )
    p.add_argument(
        "-c",
        "--compile_dir",
        default=None,
        help="Where compiles are kept (default: the model_dir).",
    )
    p.add_argument("--job_labels", nargs="+", type=_labels, default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--job_priority",
        choices=("p1", "p2", "p3"),
        default="p2",
        help="p1 is highest priority (default p2).",
    )
    p.add_argument("--mount_dirs", nargs="*", default=[], help="Directories the job sees.")
    p.add_argument("--python_paths", nargs="*", default=[], help="Added to the job's PYTHONPATH.")
    p.add_argument(
        "--mgmt_address",
        default=None,
        metavar="HOST:PORT",
        help="The cluster management server (default: this host's, on its socket).",
    )
    p.add_argument("--credentials_path", default=None, help="The server's TLS certificate.")
    p.add_argument(
        "--job_time_sec",
        type=_positive,
        default=None,
        help="Cancel the job after this many seconds.",
    )
    p.add_argument("--disable_version_check", action="store_true")
    p.add_argument("--multireplica", action="store_true", help="(pipeline only)")
    p.add_argument("--debug_args_path", default=None, help="(recorded with the job)")
    return p


def _job_argv(
    args: argparse.Namespace, params_path: Path, model_dir: Path, pipeline: bool
) -> list[str]:
    """The run.py flags every part of the job runs with."""
    argv = ["--mode", args.mode, "-p", str(params_path), "-o", str(model_dir)]
    for flag in ("checkpoint_path", "max_steps", "eval_steps", "logging"):
        value = getattr(args, flag)
        if value is not None:
            argv += [f"--{flag}", str(value)]
    if args.is_pretrained_checkpoint:
        argv.append("--is_pretrained_checkpoint")
    if args.multireplica:
        argv.append("--multireplica")
    if not pipeline:
        argv += ["--num_csx", str(args.num_csx)]
    return argv


def _env(python_paths: list[str]) -> dict[str, str]:
    """The job's environment: this node's, with --python_paths first on PYTHONPATH (every task
    of the job inherits it from its launch)."""
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_KEEP) and len(v) < 4000}
    if python_paths:
        env["PYTHONPATH"] = os.pathsep.join([*python_paths, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _dirs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """--mount_dirs and --python_paths as absolute paths; a mount dir must exist (UsageError).
    There are no containers here: the job's processes see this host's file system, so a mount
    dir is checked and recorded with the job, and said so once."""
    from cs2sim.system.errors import UsageError

    mounts = [str(Path(d).resolve()) for d in args.mount_dirs]
    missing = [d for d in mounts if not Path(d).is_dir()]
    if missing:
        raise UsageError(
            f"--mount_dirs {missing[0]} is not a directory; pass directories "
            "that exist on this node."
        )
    if mounts:
        log.info(
            f"Mount dirs {', '.join(mounts)}: there are no containers here, so the job's "
            "processes see this node's file system; recorded with the job."
        )
    return mounts, [str(Path(p).resolve()) for p in args.python_paths]


def _checksum(model_name: str, argv: list[str], pipeline: bool, load: Loader) -> str:
    """The compile hash the compile job would produce (the graph pass only, on this node)."""
    from cs2sim.runtime.compiler.driver import compile_checksum
    from cs2sim.system.state import ExecMode

    params = load([*argv, "--compile_only"])
    mode = ExecMode.PIPELINED if pipeline else ExecMode.WEIGHT_STREAMING
    return "cs_" + compile_checksum(model_name, params, mode=mode)


def run_csx(
    model_name: str, argv: Sequence[str], default_params: Path | None, load: Loader, run_py: Path
) -> int:
    """The CSX command line (module docstring); returns the exit code. `load(run.py argv)` gives
    the effective params of a run.py command line and `run_py` is the model's run.py (both from
    runtime/cli/main.py, which calls this)."""
    parser = build_csx_parser(model_name)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as e:  # argparse printed the usage line and the error, as the real one
        return int(e.code or 0)
    pipeline = args.execution_strategy == "pipeline"
    if pipeline and args.num_csx != 1:
        parser.print_usage(sys.stderr)
        sys.stderr.write("run.py CSX: error: pipeline runs on one CS-X only: --num_csx 1\n")
        return 2
    if args.multireplica and not pipeline:
        parser.print_usage(sys.stderr)
        sys.stderr.write("run.py CSX: error: --multireplica belongs to `run.py CSX pipeline`\n")
        return 2
    params_path = Path(args.params) if args.params else default_params
    if params_path is None:
        parser.print_usage(sys.stderr)
        sys.stderr.write("run.py CSX: error: the following arguments are required: -p/--params\n")
        return 2
    from cs2sim.runtime.cli.runlog import RunLog

    with RunLog() as runlog:
        try:
            path = params_path.resolve()  # each of the mode's runs, refused before any is submitted
            for part in plan_parts(model_name, args, path, pipeline, load, _job_argv):
                if code := _run(model_name, part, path, pipeline, runlog, load, run_py):
                    return code
            return 0
        except CsError as e:
            runlog.error(f"error: {e}")
            return e.exit_code
        except KeyboardInterrupt:
            runlog.error("error: interrupted; the job was cancelled (its checkpoints are kept).")
            return 130
        except OSError as e:
            runlog.error(
                f"error: {e.strerror or e} ({e.filename}); check the path and its permissions."
            )
            return 1


def _run(
    model_name: str,
    args: argparse.Namespace,
    params_path: Path,
    pipeline: bool,
    runlog: Any,
    load: Loader,
    run_py: Path,
) -> int:
    from cs2sim.runtime.compiler.cache import complete_stage
    from cs2sim.runtime.params import load_params
    from cs2sim.system.appliance.client import connect
    from cs2sim.system.store import default_home

    raw = load_params(params_path)  # bounded, as run.py reads it (runtime/params.py)
    model_dir = model_dir_of(args, raw)
    model_dir.mkdir(parents=True, exist_ok=True)
    _claim = _claim_model_dir(model_dir)  # held until this client ends (closed with the process)
    runlog.add_file(model_dir)
    compile_dir = Path(args.compile_dir).resolve() if args.compile_dir else model_dir
    job_argv = _job_argv(args, params_path, model_dir, pipeline)
    start = [sys.executable, "-m", "cs2sim.scripts.cluster_server", "start", "--auto"]
    home = default_home()

    def conn() -> Any:
        return connect(
            home,
            start=None if args.mgmt_address else start,
            mgmt_address=args.mgmt_address,
            credentials_path=args.credentials_path,
        )

    def call(op: str, **values: Any) -> dict[str, Any]:
        c = conn()
        try:
            return dict(c.call(op, **values))
        finally:
            c.close()

    mounts, python_paths = _dirs(args)  # refused before any server is asked
    if not args.disable_version_check:
        _check_version(conn())

    out = Out()
    counts, base = _job_base(args, run_py, pipeline, mounts, python_paths, compile_dir)
    labels = dict(label.split("=", 1) for label in args.job_labels)
    stage = "validate" if args.validate_only else "compile"
    hash_ = _checksum(model_name, job_argv, pipeline, load)
    if not (args.compile_only or args.validate_only):  # refused before anything is reserved
        call("check", num_csx=args.num_csx, mode=_mode(pipeline), **counts)
    section = "train_input" if args.mode in ("train", "train_and_eval") else "eval_input"
    out.say("effective_batch", batch=int((raw.get(section) or {}).get("batch_size") or 1))
    if args.mode == "eval" and args.checkpoint_path:
        out.say("eval_checkpoint", path=args.checkpoint_path)
    out.say("compiling")
    if complete_stage(compile_dir / hash_) in (stage, "compile"):
        out.say("cached", hash=hash_)
    else:
        code = _compile(call, conn, args, out, job_argv, compile_dir, labels, pipeline, base, hash_)
        if code:
            return code
    if args.compile_only or args.validate_only:
        return 0
    return _execute(call, conn, args, out, raw, labels, pipeline, base, job_argv, hash_)


def _job_base(
    args: argparse.Namespace,
    run_py: Path,
    pipeline: bool,
    mounts: list[str],
    python_paths: list[str],
    compile_dir: Path,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The server counts, and the spec every job of this run shares (its compile and its
    execute job): where run.py is, the wrapper, the environment, the mounts, the counts."""
    wrapper = "python" if pipeline else "python-ws"
    counts = {
        "num_workers_per_csx": args.num_workers_per_csx,
        "num_wgt_servers": args.num_wgt_servers,
        "num_act_servers": args.num_act_servers,
    }
    base = {
        "cwd": str(Path.cwd()),
        "run_py": str(run_py),
        "wrapper": wrapper,
        "env": _env(python_paths),
        "job_time_sec": args.job_time_sec or 0,
        "mount_dirs": mounts,
        "python_paths": python_paths,
        **counts,
        "compile_dir": str(compile_dir),
    }
    return counts, base


def _compile(
    call: Callable[..., dict[str, Any]],
    conn: Callable[[], Any],
    args: argparse.Namespace,
    out: Out,
    job_argv: list[str],
    compile_dir: Path,
    labels: dict[str, str],
    pipeline: bool,
    base: dict[str, Any],
    hash_: str,
) -> int:
    """Submit the compile job and follow it to its end; 0 once its artifacts are in
    compile_dir/hash_, else the failed job's exit code."""
    from cs2sim.runtime.compiler.cache import complete_stage

    out.say("compile_init")
    flag = "--validate_only" if args.validate_only else "--compile_only"
    cargv = [a for a in job_argv]
    cargv[cargv.index("-o") + 1] = str(compile_dir)
    reply = call(
        "submit",
        kind="compile",
        priority=args.job_priority,
        labels=labels,
        mode=_mode(pipeline),
        spec={**base, "args": [*cargv, flag], "compile_hash": hash_},
    )
    job = reply["job"]
    out.say("compile_id", id=job["meta"]["name"], path=job["status"]["logPath"])
    end = follow(conn(), job["meta"]["name"], out, "compile", None)
    if end["status"]["phase"] != "SUCCEEDED":
        return failed(end)
    if complete_stage(compile_dir / hash_) is None:
        raise CsError(
            f"the compile job {end['meta']['name']} succeeded but left no "
            f"{compile_dir / hash_}; see its log with `csctl log-export "
            f"{end['meta']['name']}`."
        )
    out.say("compile_written", hash=hash_)
    out.say("compile_ok")
    return 0


def _execute(
    call: Callable[..., dict[str, Any]],
    conn: Callable[[], Any],
    args: argparse.Namespace,
    out: Out,
    raw: dict[str, Any],
    labels: dict[str, str],
    pipeline: bool,
    base: dict[str, Any],
    job_argv: list[str],
    hash_: str,
) -> int:
    """Submit the execute job and follow it, showing its training progress; its exit code."""
    runconfig = raw.get("runconfig") or {}
    out.say("programming")
    out.say("execute_init")
    # the server plans the job's replicas (and their nodes) from the counts in `base`
    reply = call(
        "submit",
        kind="execute",
        priority=args.job_priority,
        labels=labels,
        num_csx=args.num_csx,
        mode=_mode(pipeline),
        spec={**base, "args": job_argv, "compile_hash": hash_},
    )
    job = reply["job"]
    out.say("execute_id", id=job["meta"]["name"], path=job["status"]["logPath"])
    section = "eval_input" if args.mode == "eval" else "train_input"
    batch = int((raw.get(section) or {}).get("batch_size") or 1)
    log_steps = int(runconfig.get("log_steps") or runconfig.get("save_summary_steps") or 1)
    end = follow(
        conn(),
        job["meta"]["name"],
        out,
        "execute",
        Training(out, batch, log_steps, args.num_csx, args.mode),
    )
    return 0 if end["status"]["phase"] == "SUCCEEDED" else failed(end)


MODEL_DIR_LOCK = ".run_csx.lock"


def _claim_model_dir(model_dir: Path) -> Any:
    """This client's lock on `model_dir` (an open file holding flock(2) until the process
    ends): a second `run.py CSX` given the same model_dir while the first is live would compile
    into it and write its checkpoints over the first's, so it is refused, naming the first."""
    import fcntl

    path = model_dir / MODEL_DIR_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    f = os.fdopen(fd, "r+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = f.read(200).strip() or "another process"
        f.close()
        raise CsError(
            f"model_dir {model_dir} is in use by another `run.py CSX` ({holder}), whose job "
            "writes its checkpoints there; wait for it to end (`csctl get jobs`) or give this "
            "run another --model_dir."
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {os.uname().nodename}, started {time.strftime('%H:%M:%S')}\n")
    f.flush()
    return f


def _check_version(conn: Any) -> None:
    """The server must speak this client's operations (a server left running from an older
    installation does not)."""
    from cs2sim.system.appliance.ops import PROTOCOL

    info = conn.call("ping")
    conn.close()
    if info.get("protocol") != PROTOCOL:
        raise CsError(
            f"the cluster server (version {info.get('version')}, protocol "
            f"{info.get('protocol')}) does not speak this client's protocol "
            f"{PROTOCOL}; restart it with `cs-cluster-server stop` (the next run "
            "starts a new one), or pass --disable_version_check."
        )


def _mode(pipeline: bool) -> str:
    from cs2sim.system.state import ExecMode

    return (ExecMode.PIPELINED if pipeline else ExecMode.WEIGHT_STREAMING).value
