"""The run.py command line shared by every model: `main(model_name, argv) -> exit code`.

Flags are those of Model Zoo's run.py (docs/sources.md); CLI values override the YAML (copied into
`runconfig`). Without `--cs_ip` a run trains on the host CPU, as in Model Zoo; with `--cs_ip` it
trains on the simulated CS-2 that names (runtime/job/cs_run.py: gated by the system's state and
mode).
`--validate_only`, `--compile_only` and `--mode=validate_only|compile_only` compile for the CS-2
without training (runtime/cli/compile_run.py).

One error boundary: a `CsError` becomes ``error: <message>`` and its exit code, Ctrl-C exits 130,
an OSError (a path, a permission, a full disk) is one line naming the file, anything else is
reported as an internal error in one line; `--traceback` re-raises instead.

Said once per job. Under csrun_wse every task runs this same command, so until the tasks split
into their parts (the chief trains, streamers feed it, coordinators wait) they all meet the same
errors, and Ctrl-C reaches them all. The chief (task 0) says such an error once for the job; a
streamer or coordinator waits SHARED_ERROR_GRACE_S first, in which the chief's failure makes the
launcher stop it (kill-on-bad-exit): only if it is still running then was the error its own, and
it says it. A streamer or coordinator never repeats the chief's "interrupted" sentence.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from cs2sim.runtime.cli.compile_run import run_compile
from cs2sim.runtime.cli.compile_run import stop_after as compile_stop
from cs2sim.runtime.cli.flags import (
    DEFAULT_PARAMS,
    MODES,
    ParserExit,
    build_parser,
    check_eval_steps,
    check_flags,
    cli_overrides,
    default_params,
    model_home,
    script_dir,
)
from cs2sim.runtime.cli.runlog import RunLog
from cs2sim.system.errors import CsError, UsageError

__all__ = [
    "MODES",
    "build_parser",
    "main",
    "check_flags",
    "model_home",
    "default_params",
    "script_dir",
]

DEVICES = ("CPU", "GPU", "CSX")  # the first word of Model Zoo R1.8+'s run.py
# Real run.py flags (Model Zoo's run.py, docs/sources.md) whose feature is not in this version:
# accepted, stored in runconfig under the same name, and answered with one note. A later version
# that implements one removes its entry here.
NO_EFFECT_YET = {
    "num_csx": "it sets the CS-X systems of a weight-streaming run with --cs_ip (python-ws)",
    "num_wgt_servers": "MemoryX weight servers belong to the weight-streaming executor",
    "mount_dirs": "it belongs to the appliance: `python run.py CSX ... --mount_dirs ...`",
    "python_paths": "it belongs to the appliance: `python run.py CSX ... --python_paths ...`",
    "execution_strategy": "the execution mode comes from the launcher (python, python-ws, "
    "python-pt)",
}
MSG_NO_EFFECT = (
    "note: --{flag} {value} is stored in runconfig.{flag} and has no effect here yet ({why})."
)
EXIT_INTERRUPTED = 130
SHARED_ERROR_GRACE_S = 10.0  # how long a non-chief task leaves a shared error to the chief
MSG_HOST_JOB = (
    "This job trains on the host CPU of node {node}, not on a CS-2: run.py has no "
    "--cs_ip; add --cs_ip <the system's IP> to train on the CS-2."
)


def _load(model_name: str, args: argparse.Namespace) -> tuple[dict[str, Any], str, list[str]]:
    """Validated effective params (YAML + CLI), the half format and the warnings."""
    from cs2sim.runtime.numerics.mixed_precision import resolve_precision
    from cs2sim.runtime.numerics.optim import check_optimizer_params
    from cs2sim.runtime.params import (
        apply_cli_overrides,
        fill_resolved,
        load_params,
        validate_params,
    )
    from cs2sim.runtime.trainer_format.convert import METHODS, is_trainer, to_legacy

    raw = load_params(args.params)
    if is_trainer(raw):  # today's Model Zoo form: read into the same sections
        method = METHODS.get(getattr(args, "mode", None) or "train", "fit")
        raw = to_legacy(raw, model_name, method=method, source=str(args.params)).legacy
    params, warnings = validate_params(raw, model_name, source=str(args.params))
    values, clears = cli_overrides(args)
    params = apply_cli_overrides(params, values)
    for k in clears:
        params["runconfig"][k] = None
    half, more = resolve_precision(params)
    fill_resolved(params, half)
    check_optimizer_params(params["optimizer"], half)  # cross-key checks: fail now, not at step 1
    return params, half, warnings + more


def _params_of(model_name: str, argv: list[str]) -> dict[str, Any]:
    """The effective params of a run.py command line, as its compile sees them."""
    ns = build_parser(model_name).parse_args(argv)
    ns.params_given, ns.split, ns.home = True, False, None
    return _load(
        model_name, argparse.Namespace(**{**vars(ns), "mode": "train", "wafer_map": None})
    )[0]


# mode -> effective params written (Model Zoo's run.py: <mode>/params_<mode>.yaml; docs/sources.md)
PARAMS_FILES = {
    "train": ("train/params_train.yaml",),
    "eval": ("eval/params_eval.yaml",),
    "eval_all": ("eval/params_eval.yaml",),
    "train_and_eval": ("train/params_train.yaml", "eval/params_eval.yaml"),
}


def _run(model_name: str, args: argparse.Namespace, runlog: RunLog) -> int:
    import logging

    from cs2sim.runtime.job.roles import Role, task_info

    log = logging.getLogger("cs2sim.run")
    check_flags(model_name, args)
    stop = compile_stop(args)  # --validate_only / --compile_only / --mode=...: no training
    if args.params is None:  # fc_mnist only: -p is required for the others
        found, args.params_found = default_params(model_name, args.home)
        args.params = str(found)
    # Under csrun_wse every task runs this command; Slurm's environment says which part it is.
    task = task_info()
    # What the run uses is said once, by the task that trains (not by each of 96 streamers).
    say = log.info if task.role in (Role.CHIEF, Role.STANDALONE) else log.debug
    given = (
        "" if args.params_given else f" (the default {args.params_found}; choose another with -p)"
    )
    say(f"Params file: {Path(args.params).resolve()}{given}")  # a compile says it too
    if stop:
        return run_compile(model_name, args, runlog, _load, stop)
    params, half, warnings = _load(model_name, args)
    rc = params["runconfig"]
    runlog.logger.setLevel(rc["logging"])
    if args.cs_ip is None and rc.get("cs_ip"):  # the YAML's runconfig.cs_ip, as the flag
        args.cs_ip = rc["cs_ip"]
        say(f"CS-2 system: {args.cs_ip} (runconfig.cs_ip of the params file; --cs_ip overrides it)")
        check_flags(model_name, args)
    check_eval_steps(args, rc)  # on the effective runconfig: the YAML's eval_steps counts
    model_dir = Path(args.model_dir or rc["model_dir"])  # the YAML's default: ./model_dir
    where = "" if args.model_dir else " (runconfig.model_dir; choose another with -o)"
    say(f"Model directory: {model_dir.resolve()}{where}")
    for flag, why in NO_EFFECT_YET.items():
        value = getattr(args, flag, None)
        if value is not None and not (flag == "num_csx" and args.cs_ip is not None):
            shown = " ".join(map(str, value)) if isinstance(value, list) else value
            say(MSG_NO_EFFECT.format(flag=flag, value=shown, why=why))
    if model_dir.exists() and not model_dir.is_dir():
        raise UsageError(
            f"model_dir {model_dir} is a file, not a directory; pass "
            "-o/--model_dir with a directory."
        )
    rc["model_dir"] = str(model_dir)
    cs = None
    if args.cs_ip is not None:  # a CS-2 run: refused here by every task, before anything is written
        from cs2sim.runtime.job.cs_run import CsRun

        cs = CsRun(model_name, params, model_dir, args.cs_ip)
        cs.gate()
    elif task.role is Role.CHIEF:  # launched on the cluster, but not for the CS-2
        log.warning(MSG_HOST_JOB.format(node=task.node or "?"))
    from cs2sim.runtime.job.hub import chief_task
    from cs2sim.runtime.job.streamers import serve_task

    args.split = True  # from here on each task does its own part (see main's error boundary)
    if task.role in (Role.STREAMER, Role.COORDINATOR):
        with _streamer_voice(task.role, rc["logging"]):
            return serve_task(task, model_name, params, model_dir)  # they never train
    with chief_task(task, model_dir):  # its streamers feed the input; all hear its outcome
        return _run_mode(model_name, args, runlog, params, half, warnings, model_dir, cs)


@contextlib.contextmanager
def _streamer_voice(role: Any, level: str) -> Iterator[None]:
    """What an input streamer task prints: its own warnings and errors only. Its progress and
    the input pipeline's notices (AUTOTUNE, worker counts) are the chief's to say, once: it
    builds the same pipeline from the same params (a 96-streamer job would say each 96 times).
    --logging DEBUG shows everything."""
    from cs2sim.runtime.job.roles import Role

    if role is not Role.STREAMER or level == "DEBUG":
        yield
        return
    loggers = {"cs2sim": logging.WARNING, "cs2sim.data": logging.ERROR}
    from cs2sim.system import knobs

    if knobs.raw("CS2SIM_WSJOB"):  # an input worker of a wsjob: its own log says what it did
        loggers["cs2sim.run"] = logging.INFO  # (exported by csctl log-export, never printed)
    old = {name: logging.getLogger(name).level for name in loggers}
    for name, quiet in loggers.items():
        logging.getLogger(name).setLevel(quiet)
    try:
        yield
    finally:
        for name, was in old.items():
            logging.getLogger(name).setLevel(was)


def _run_mode(
    model_name: str,
    args: argparse.Namespace,
    runlog: RunLog,
    params: dict[str, Any],
    half: str,
    warnings: list[str],
    model_dir: Path,
    cs: Any = None,
) -> int:
    import logging

    from cs2sim.runtime.job.remote_stream import streamed_input
    from cs2sim.runtime.params import write_params
    from cs2sim.runtime.training.runconfig import Components
    from cs2sim.runtime.training.trainer import Trainer

    log = logging.getLogger("cs2sim.run")
    trainer = Trainer(
        model_name,
        params,
        model_dir,
        half=half,
        components=Components(model_name, params, half, stream_fn=streamed_input),
    )
    if args.mode.startswith("train"):
        runlog.resume_text = trainer.resume_text  # what the message of a Ctrl-C says
    try:
        # a refused run leaves nothing in model_dir
        trainer.check_host_memory(args.mode, cs2=cs is not None)
    except CsError:
        for w in warnings:
            log.warning(w)
        raise
    runlog.add_file(model_dir)
    for w in warnings:
        log.warning(w)
    for rel in PARAMS_FILES[args.mode]:
        write_params(params, model_dir / rel, within=model_dir)
    log.info(f"Checkpoints and summaries will be saved in: {model_dir}")
    runlog.attach(trainer)
    t0 = time.perf_counter()
    if cs is not None:
        return int(cs.run(trainer, args.mode))
    getattr(trainer, args.mode)()
    log.debug(f"{args.mode} took {time.perf_counter() - t0:.3f} s")
    return 0


def main(
    model: str | type, argv: Sequence[str] | None = None, home: str | Path | None = None
) -> int:
    """Parse `argv`, run the mode, return the exit code (the run.py entry point).

    `model` is a model's name in the model table (runtime/registry.py), or a model class, which
    is registered under its NAME first: a user's own run.py passes its class. `home` is where
    the default params (`configs/params.yaml`, for a model that has one) are looked for first:
    default the directory of the running script (the run.py), then the working directory."""
    from cs2sim.runtime import registry
    from cs2sim.system.errors import one_line_warnings

    one_line_warnings(sys.stderr.write)  # a private directory moved: `warning: ...`, one line
    model_name = model if isinstance(model, str) else registry.register(model).NAME
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DEVICES:  # Model Zoo R1.8+: `run.py {CPU,GPU,CSX} ...`
        device, argv = argv[0], argv[1:]
        if device == "CSX":
            return _run_on_appliance(model_name, argv, home)
        if device == "GPU":
            sys.stderr.write(
                "error: this installation has no GPU; run `python run.py CPU ...` "
                "on the host or `python run.py CSX ...` on the cluster.\n"
            )
            return 2
    part = _part_of_a_job()
    args: argparse.Namespace | None = None
    with RunLog() as runlog:
        show_traceback = "--traceback" in argv

        def fail(message: str) -> None:
            """The run's one error line: said by the chief for the whole job (module doc)."""
            if part is not None and not getattr(args, "split", False):
                time.sleep(SHARED_ERROR_GRACE_S)  # the chief says it, and srun stops us ...
            runlog.error(message)  # ... or it did not fail: the error is this task's own

        try:
            args = build_parser(model_name, runlog.write).parse_args(argv)
            args.params_given = args.params is not None
            args.split = False
            args.home = Path(home) if home is not None else script_dir()
            return _run(model_name, args, runlog)
        except ParserExit as e:
            return e.status
        except CsError as e:
            if show_traceback:
                raise
            fail(f"error: {e}")
            return e.exit_code
        except KeyboardInterrupt as e:
            if show_traceback:
                raise
            return _interrupted(e, part, runlog)
        except OSError as e:  # the file system said no: a path, a permission, a full disk
            if show_traceback:
                raise
            named = f" ({e.filename})" if e.filename else ""
            fail(
                f"error: {e.strerror or e}{named}; check the path, its permissions and the "
                "free disk space."
            )
            return 1
        except Exception as e:
            if show_traceback:
                raise
            fail(
                f"error: internal error ({type(e).__name__}: {e}); rerun with --traceback "
                "and report it."
            )
            return 1


def _run_on_appliance(model_name: str, argv: list[str], home: str | Path | None) -> int:
    """`run.py CSX ...`: the appliance client, with the default params if the model has them
    and the run.py the cluster's jobs run."""
    from cs2sim.runtime.cli.appliance import run_csx

    where = Path(home) if home is not None else script_dir()
    found = None
    if model_name in DEFAULT_PARAMS:
        with contextlib.suppress(CsError):
            found = default_params(model_name, where)[0]
    main_file = Path(sys.argv[0]).resolve()
    run_py = main_file if main_file.name == "run.py" else model_home(model_name) / "run.py"
    return run_csx(
        model_name, argv, found, lambda job_argv: _params_of(model_name, job_argv), run_py
    )


def _interrupted(e: KeyboardInterrupt, part: str | None, runlog: RunLog) -> int:
    """Ctrl-C or a cancel (SIGTERM): the chief says it once, with how to resume; a cancelled
    task then dies of the signal."""
    from cs2sim.runtime.job.cs_run import Terminated

    what = "cancelled (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
    if part is None:  # Ctrl-C reaches every task of a job: the chief says it once
        if runlog.resume_text is None:  # before training began, or an evaluation
            runlog.error(f"error: {what}.")
        else:
            runlog.error(f"error: {what}; {runlog.resume_text()}.")
    if isinstance(e, Terminated):  # its job is recorded: now die of the signal, so
        runlog.close()  # that srun reports the chief as the other tasks: "Terminated"
        _die_of(signal.SIGTERM)
    return EXIT_INTERRUPTED


def _die_of(signum: int) -> NoReturn:
    """End this process by the signal's default action (as if never caught), output flushed."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the default action of SIGTERM ends the process


def _part_of_a_job() -> str | None:
    """ "streamer" / "coordinator" when this process is such a task of a launched job, else None
    (the chief, or a run of its own). A broken Slurm environment counts as None: the error that
    names it is then said by every task, which is all it can do."""
    from cs2sim.runtime.job.roles import Role, task_info

    try:
        role = task_info().role
    except CsError:
        return None
    return role.value if role in (Role.STREAMER, Role.COORDINATOR) else None
