"""`csctl log-export`: one job's logs (and with -c its compile) in one zip, gathered AS THE JOB'S
OWNER (asuser.call_as), under one size cap for the whole archive.

What goes in, under `log-export-<job>/`: the job's remote log directory (its `launch.log`), each
task's own log as the scheduler wrote it (`tasks/task-<procid>.log`; `--tasks chief-0,worker-1`
keeps the named replicas only, as the real csctl's `--tasks`), `job.json` (the server's record),
and with `compile` the compile directory `<compile_dir>/<cs_hash>` (`compile/...`). `num_lines`
keeps each log's last N lines (0: all, the real tool's default).

Every file is opened by a child that already runs as the job's owner, without following a
symlink at its last component, and must be a regular file: the archive holds at most what that
user may read. The cap counts the bytes read (not the compressed size), checked from the sizes
before anything is read, so a too-large request is refused at once rather than after minutes.
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cs2sim.system.appliance.jobs import WsJob, job_log_dir
from cs2sim.system.errors import CsError, UsageError

__all__ = ["ExportRequest", "build_zip", "export_request", "HASH_RE", "TASK_RE"]

HASH_RE = re.compile(r"cs_[0-9a-f]{8,64}")  # a compile's directory name (runtime/compiler)
TASK_RE = re.compile(r"(chief|coordinator|weight|activation|worker)-\d{1,4}|task-\d{1,5}")


class ExportTooLarge(CsError):
    exit_code = 1


@dataclass(frozen=True)
class ExportRequest:
    """What to gather; every path is read by the child running as the job's owner."""

    base: str  # the archive's top directory, log-export-<job>
    log_dir: Path  # the job's remote log directory
    task_dirs: tuple[Path, ...]  # where the scheduler may have written the job's task logs
    task_names: dict[str, str]  # task-<procid>.log -> the replica's name (chief-0, worker-1)
    compile_dir: Path | None  # <compile_dir>/<cs_hash>, when asked for and well formed
    job_json: str
    cap: int
    num_lines: int = 0
    tasks: tuple[str, ...] = ()  # replica names (or task-N) to keep; empty: all


def _files(top: Path) -> list[tuple[Path, int]]:
    """Every regular file under `top` (symlinks neither followed nor taken), with its size."""
    out: list[tuple[Path, int]] = []
    try:
        top_st = os.lstat(top)
    except FileNotFoundError:
        return out
    if not stat.S_ISDIR(top_st.st_mode):
        return out
    for root, dirs, names in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(root) / name
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                out.append((path, st.st_size))
    return out


def _read(path: Path, size: int, num_lines: int) -> bytes:
    """The file (or its last `num_lines` lines), opened without following a symlink; a file
    that changed into something else since it was listed is skipped (empty)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        if num_lines <= 0:
            return f.read(size)  # what was counted, even if it grew since
        # the last N lines: read backwards in blocks until N newlines are seen
        end = min(size, os.fstat(fd).st_size)
        pos, data = end, b""
        while pos > 0 and data.count(b"\n") <= num_lines:
            step = min(pos, 64 * 1024)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
        lines = data.splitlines(keepends=True)
        return b"".join(lines[-num_lines:])


def build_zip(req: ExportRequest) -> bytes:
    """The archive's bytes (run as the job's owner); ExportTooLarge past the cap."""
    wanted: list[tuple[str, Path, int, bool]] = []  # (name in zip, path, size, is a log)
    for path, size in _files(req.log_dir):
        wanted.append((f"{req.base}/{path.relative_to(req.log_dir)}", path, size, True))
    seen: set[str] = set()
    for tdir in req.task_dirs:
        for path, size in _files(tdir):
            if path.parent != tdir or not path.name.startswith("task-") or path.name in seen:
                continue
            seen.add(path.name)
            replica = req.task_names.get(path.name, "")
            if req.tasks and replica not in req.tasks and path.stem not in req.tasks:
                continue
            wanted.append((f"{req.base}/tasks/{path.name}", path, size, True))
    if req.compile_dir is not None:
        for path, size in _files(req.compile_dir):
            rel = path.relative_to(req.compile_dir)
            wanted.append((f"{req.base}/compile/{rel}", path, size, False))
    whole = sum(size for _, _, size, is_log in wanted if not (is_log and req.num_lines > 0))
    if whole > req.cap:
        raise ExportTooLarge(
            f"the export would hold {whole / (1 << 20):.1f} MiB, over the cap of "
            f"{req.cap >> 20} MiB for one archive; ask for less (--num-lines N, --tasks, "
            "or without -c)"
        )
    buf = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path, size, is_log in wanted:
            data = _read(path, size, req.num_lines if is_log else 0)
            total += len(data)
            if total > req.cap:
                raise ExportTooLarge(
                    f"the export passed the cap of {req.cap >> 20} MiB for one archive; "
                    "ask for less (--num-lines N, --tasks, or without -c)"
                )
            z.writestr(name, data)
        z.writestr(f"{req.base}/job.json", req.job_json)
    return buf.getvalue()


def check_tasks(tasks: list[str]) -> tuple[str, ...]:
    """--tasks as given: each a replica name (chief-0, worker-1) or task-N; UsageError if not."""
    bad = [t for t in tasks if not TASK_RE.fullmatch(t)]
    if bad:
        raise UsageError(
            f"found invalid task(s): {bad}. Please use `csctl -d2 get job` to check the tasks"
        )
    return tuple(tasks)


def _task_names(job: WsJob) -> dict[str, str]:
    """task-<procid>.log -> its replica's name: the launch's tasks are the replicas in order."""
    from cs2sim.system.appliance.replicas import plan_of

    if job.kind != "execute" or "shape" not in job.spec:
        return {}
    try:
        replicas = plan_of(job.num_csx, job.spec).replicas(job.id, None)
    except CsError:
        return {}
    prefix = f"{job.id}-"
    return {f"task-{i}.log": r["name"].removeprefix(prefix) for i, r in enumerate(replicas)}


def _task_dirs(home: Path, job: WsJob) -> tuple[Path, ...]:
    """Where the job's launch wrote its task logs: `<home>/slurm/<id>` when its user opens the
    store directly, else that user's private `<tmp>/cs2sim-<uid>/slurm/<id>` (a member of a
    shared store, system/sched/backend.py); read as the user, so a wrong guess reads nothing."""
    if not job.sched_job or not job.sched_job.isdigit():
        return ()
    tmps = {Path(tempfile.gettempdir())}
    env_tmp = (job.spec.get("env") or {}).get("TMPDIR")
    if isinstance(env_tmp, str) and env_tmp.startswith("/"):
        tmps.add(Path(env_tmp))
    return (
        Path(home) / "slurm" / job.sched_job,
        *(t / f"cs2sim-{job.uid}" / "slurm" / job.sched_job for t in sorted(tmps)),
    )


def export_request(home: Path, job: WsJob, args: dict[str, Any], cap: int) -> ExportRequest:
    """What `csctl log-export` asked for, checked (UsageError for a --tasks the job has not)."""
    names = _task_names(job)
    tasks = check_tasks(list(args.get("tasks") or []))
    known = set(names.values()) | {n.removesuffix(".log") for n in names}
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UsageError(
            f"found invalid task(s): {unknown}. Please use `csctl -d2 get job` to check the tasks"
        )
    compile_dir = job.spec.get("compile_dir")
    cdir = None
    if args.get("compile") and isinstance(compile_dir, str) and compile_dir.startswith("/"):
        if HASH_RE.fullmatch(job.compile_hash):
            cdir = Path(compile_dir) / job.compile_hash
    return ExportRequest(
        base=f"log-export-{job.id}",
        log_dir=job_log_dir(home, job.id),
        task_dirs=_task_dirs(home, job),
        task_names=names,
        compile_dir=cdir,
        job_json=json.dumps(job.public(home), indent=2) + "\n",
        cap=cap,
        num_lines=max(0, int(args.get("num_lines") or 0)),
        tasks=tasks,
    )
