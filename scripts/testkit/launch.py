"""Launching jobs on a throwaway system: `csrun_wse` / `csrun_cpu` as a user's script runs them.

`ThrowawaySystem.csrun_wse(...)` runs the real launcher (the console script installed with
cs2sim) with the system's environment and returns a `LaunchResult`: what it printed and its exit
code, plus the job as the scheduler recorded it (`jobs show`), every task's own log, and the
model_dir the command named — what a test of a job wrapper wants to look at afterwards.
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cs2sim.scripts.testkit.result import CsResult

if TYPE_CHECKING:
    from cs2sim.system.sched.queue_rows import QueueJob
    from cs2sim.system.store import Store

__all__ = [
    "LaunchResult",
    "launcher",
    "scripts_dir",
    "model_copy",
    "named_model_dir",
    "find_job",
    "task_logs",
]

MODEL_DIR_FLAGS = ("--model_dir", "-o")


@dataclass(frozen=True)
class LaunchResult(CsResult):
    """A finished launcher run: output, errors, exit_code (as CsResult) and what it left."""

    job: QueueJob | None = None  # id, state, nodes, exit_code, ... (None: none)
    tasks: dict[int, str] = field(default_factory=dict)  # SLURM_PROCID -> that task's log
    model_dir: Path | None = None  # the --model_dir / -o the command named, resolved

    @property
    def job_id(self) -> int | None:
        """The Slurm-style job id (`jobs show`, `jobs cancel`); None if nothing was queued."""
        return None if self.job is None else int(self.job.id)


def scripts_dir() -> Path:
    """Where cs2sim's console scripts (cs, csrun_wse, python-ws, ...) are installed for this
    Python: its environment's scripts directory (a venv's bin/), else the interpreter's own."""
    for where in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        if where and (Path(where) / "cs").exists():
            return Path(where)
    return Path(sys.executable).parent


def launcher(word: str) -> str:
    """The installed console script `word` (csrun_wse, csrun_cpu, ...) of this Python."""
    path = scripts_dir() / word
    if not path.exists():
        raise AssertionError(
            f"{word} is not installed next to {sys.executable}; install cs2sim "
            "(pip install -e .) in the environment that runs the tests."
        )
    return str(path)


def model_copy(root: Path, model: str) -> Path:
    """A working copy of a Model Zoo model directory (run.py + configs/) under `root`."""
    import cs2sim.runtime.modelzoo as modelzoo

    source = Path(modelzoo.__file__).parent / model
    if not (source / "run.py").is_file():
        raise AssertionError(f"cs2sim has no Model Zoo model {model!r}")
    work = root / model
    work.mkdir(exist_ok=True)
    shutil.copy(source / "run.py", work / "run.py")
    shutil.copytree(source / "configs", work / "configs", dirs_exist_ok=True)
    return work


def named_model_dir(argv: list[str], cwd: Path) -> Path | None:
    """The model_dir a run.py command line names (`--model_dir X`, `-o X`, `--model_dir=X`)."""
    for i, word in enumerate(argv):
        for flag in MODEL_DIR_FLAGS:
            if word == flag and i + 1 < len(argv):
                return (cwd / argv[i + 1]).resolve()
            if word.startswith(flag + "="):
                return (cwd / word.split("=", 1)[1]).resolve()
    return None


def find_job(store: Store, launcher_pid: int) -> QueueJob | None:
    """The scheduler's record of the job a launcher process submitted (None if none)."""
    from cs2sim.system.sched import queue

    mine = [j for j in queue.jobs(store, all_states=True) if j.pid == launcher_pid]
    return mine[-1] if mine else None


def task_logs(home: Path, job_id: int) -> dict[int, str]:
    """Every task's log of a job, by SLURM_PROCID ($CS2_HOME/slurm/<job>/task-<procid>.log)."""
    logs = {}
    for path in (home / "slurm" / str(job_id)).glob("task-*.log"):
        logs[int(path.stem.split("-")[1])] = path.read_text(errors="replace")
    return dict(sorted(logs.items()))
