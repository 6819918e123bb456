"""Run every layout case on the real Slurm test cluster and record each task's SLURM_* view.

Usage: python3 tests/slurm/record_layout.py [OUT.json ...]
(default: tests/slurm/ground_truth/layout.json). Needs a running cluster (.ci/slurm/start.sh).
This is the ground truth the embedded scheduler's layout is compared with.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from layout_cases import CASES, LayoutCase  # noqa: E402

TASK = HERE / "task_env.py"
DEFAULT_OUT = HERE / "ground_truth" / "layout.json"


def wait_all_idle(timeout: float = 30.0) -> None:
    """Wait until every node is idle. Slurm places a job on the lowest-numbered FREE nodes, and a
    node still completing the previous job (state `comp`) is not free: the layout would shift."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%t"],
            capture_output=True,
            text=True,
            timeout=10,
            stdin=subprocess.DEVNULL,
        ).stdout.split()
        if out and set(out) == {"idle"}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the nodes did not all become idle within {timeout:.0f} s: {out}")
        time.sleep(0.05)


def run_case(case: LayoutCase, timeout: float = 120.0) -> dict[str, object]:
    """Run one case's srun line on an idle cluster; return the line, srun's exit and stderr, and
    every task's record sorted by (het component, PROCID)."""
    wait_all_idle()
    with tempfile.TemporaryDirectory(prefix="slurm-layout-") as tmp:
        argv = ["srun", *case.srun_args(), sys.executable, str(TASK), tmp]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
            rc, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:  # e.g. a request the cluster can never satisfy
            rc = None
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
            stderr += f"\n(record_layout: srun did not finish within {timeout:.0f} s)"
        seconds = time.monotonic() - t0
        tasks = [json.loads(p.read_text()) for p in Path(tmp).glob("task-*.json")]
    tasks.sort(
        key=lambda t: (int(t["env"].get("SLURM_HET_JOB_OFFSET", 0)), int(t["env"]["SLURM_PROCID"]))
    )
    return {
        "case": case.as_dict(),
        "csrun_wse_flags": case.csrun_wse_flags(),
        "srun_line": case.srun_line(),
        "srun_argv": argv[: len(argv) - 3] + ["<task>"],
        "task_command": "python3 tests/slurm/task_env.py OUT_DIR",
        "rc": rc,
        "srun_stderr": stderr.splitlines(),
        "seconds": round(seconds, 3),
        "tasks": tasks,
    }


def slurm_version() -> str:
    return subprocess.run(["srun", "--version"], capture_output=True, text=True).stdout.strip()


def record(cases: list[LayoutCase] = CASES) -> dict[str, object]:
    return {
        "about": "Real Slurm task layout of csrun_wse's heterogeneous srun lines "
        "(Model Zoo's csrun_wse, docs/sources.md) "
        "on the 4-node x 16-CPU test cluster of .ci/slurm/start.sh; recorded by "
        "tests/slurm/record_layout.py.",
        "slurm_version": slurm_version(),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cases": [run_case(c) for c in cases],
    }


def main() -> None:
    outs = [Path(a) for a in sys.argv[1:]] or [DEFAULT_OUT]
    data = record()
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    for out in outs:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.rename(out)
    for case in data["cases"]:
        print(
            f"{case['case']['name']:<20} rc={case['rc']} tasks={len(case['tasks'])} "
            f"{case['seconds']:.2f}s  {case['srun_line']}"
        )


if __name__ == "__main__":
    main()
