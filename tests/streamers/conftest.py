"""Helpers: a csrun_wse-shaped job launched by hand (real processes, Slurm's variables)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cs2sim.runtime.cli.main import model_home

ROOT = Path(__file__).resolve().parents[2]
FC_SMALL = str(model_home("fc_mnist") / "configs" / "params_small.yaml")
GPT2_TINY = str(model_home("gpt2") / "configs" / "params_tiny.yaml")


def slurm_env(
    job: str,
    procid: int,
    sizes: tuple[int, ...],
    node: str = "worker-0",
    cpus: int = 1,
    with_groups: bool = True,
) -> dict[str, str]:
    """The variables a heterogeneous srun step gives task `procid` (components `sizes`)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    comp = max(i for i, s in enumerate(starts) if s <= procid)
    env = {
        "SLURM_JOB_ID": str(int(job) + comp),
        "SLURM_PROCID": str(procid),
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(comp),
        "SLURM_NTASKS": str(sum(sizes)),
        "SLURMD_NODENAME": node,
        "SLURM_CPUS_PER_TASK": str(cpus),
    }
    if len(sizes) > 1:
        env.update(
            {
                "SLURM_HET_JOB_ID": job,
                "SLURM_HET_JOB_OFFSET": str(comp),
                "SLURM_HET_SIZE": str(len(sizes)),
            }
        )
        if with_groups:
            env.update({f"SLURM_NTASKS_HET_GROUP_{i}": str(n) for i, n in enumerate(sizes)})
    return env


class Job:
    """Every task of one hand-launched job, as real processes running the same run.py."""

    def __init__(
        self,
        model: str,
        argv: list[str],
        sizes: tuple[int, ...],
        tmp: Path,
        extra_env: dict[str, str] | None = None,
        job: str = "4242",
        procids: list[int] | None = None,
    ) -> None:
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        run_py = str(model_home(model) / "run.py")
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        base.update(
            {
                "PYTHONPATH": str(ROOT),
                "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1",
                **(extra_env or {}),
            }
        )
        self.procids = list(range(sum(sizes))) if procids is None else procids
        for p in self.procids:
            log = tmp / f"task-{p}.log"
            self.logs.append(log)
            env = {**base, **slurm_env(job, p, sizes, node=f"node-{p % 3}")}
            with open(log, "w") as fh:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, run_py, *argv],
                        env=env,
                        stdout=fh,
                        stderr=subprocess.STDOUT,
                        cwd=tmp,
                    )
                )

    def wait(self, timeout: float = 120.0) -> list[int]:
        return [p.wait(timeout) for p in self.procs]

    def log(self, p: int) -> str:
        return self.logs[self.procids.index(p)].read_text()

    def proc(self, p: int) -> subprocess.Popen:
        return self.procs[self.procids.index(p)]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    made: list[Job] = []
    yield made
    for j in made:
        j.kill()


def chief_params(model: str, argv: list[str]) -> dict:
    """The effective params a run.py task computes from `argv` (YAML + flags)."""
    from cs2sim.runtime.cli.main import _load, build_parser

    return _load(model, build_parser(model).parse_args(argv))[0]
