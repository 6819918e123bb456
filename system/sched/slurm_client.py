"""Slurm's client commands and what they print, read: `scontrol show job`, `squeue -O`, and the
lines srun writes to its stderr as a job runs (its job id, task and node errors, the stop).

The Slurm backend (system/sched/slurm.py) runs srun and records the run; this module only runs a
client command with a deadline and turns its text into values. The formats are those of Slurm
22.05 (the srun, squeue and scontrol manual pages, https://slurm.schedmd.com/man_index.html),
checked against a real cluster's output by tests/slurm/.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from cs2sim.system.errors import ConfigError
from cs2sim.system.sched import queue
from cs2sim.system.sched.hostlist import expand
from cs2sim.system.sched.request import Component

__all__ = [
    "CLIENT_TIMEOUT_S",
    "SQUEUE_FORMAT",
    "SlurmJobRecord",
    "SrunWatch",
    "exit_of",
    "parse_error_line",
    "run_client",
    "show_job",
    "squeue_jobs",
]

CLIENT_TIMEOUT_S = 10.0  # sinfo / squeue / scontrol / scancel answer well within this

QUEUED = re.compile(r"^srun: job (\d+) queued and waiting for resources")
ALLOCATED = re.compile(r"^srun: job (\d+) has been allocated resources")
TASK_ERROR = re.compile(r"^srun: error: (\S+): tasks? ([\d,\-]+): (.+)$")
NODE_FAIL = re.compile(r"^srun: error: Node failure on (\S+)")
EXIT_CODE = re.compile(r"Exited with exit code (\d+)")
SIGNALS = {
    "Terminated": signal.SIGTERM,
    "Killed": signal.SIGKILL,
    "Interrupt": signal.SIGINT,
    "Aborted": signal.SIGABRT,
    "Segmentation fault": signal.SIGSEGV,
}
STOP_MARKERS = ("Terminating StepId", "CANCELLED AT", "Job step aborted", "Force Terminated")


# squeue -O: fixed-width fields (wide enough never to cut a value we show)
SQUEUE_FORMAT = (
    "JobID:20,HetJobID:20,HetJobOffset:8,Name:200,UserName:64,State:20,Reason:64,"
    "NumNodes:8,NodeList:400,SubmitTime:24,StartTime:24,EndTime:24,Command:400,"
    "AllocSID:12,Licenses:400"
)


def run_client(
    args: list[str], timeout: float = CLIENT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client command; ConfigError (one sentence) when it cannot answer."""
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError as e:
        raise ConfigError(
            f"`{args[0]}` is not installed; install the Slurm client or set CS2_SCHEDULER=embedded."
        ) from e
    except subprocess.TimeoutExpired as e:
        raise ConfigError(
            f"Slurm did not answer `{' '.join(args)}` within {timeout:.0f} s; "
            "check that slurmctld is running (sinfo)."
        ) from e
    return proc


@dataclass(frozen=True)
class SlurmJobRecord:
    """What `scontrol show job <base>` says about each component, in component order."""

    states: tuple[str, ...]
    nodes: tuple[tuple[str, ...], ...]

    @property
    def state(self) -> str:
        """The whole job's state: CANCELLED if any component was, else FAILED if any, else the
        first component's."""
        for s in ("CANCELLED", "FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY"):
            if s in self.states:
                return s
        return self.states[0] if self.states else "UNKNOWN"


def show_job(job_id: int) -> SlurmJobRecord | None:
    """`scontrol show job`: every component's state and nodes (None once Slurm forgot it)."""
    proc = run_client(["scontrol", "-o", "show", "job", str(job_id)])
    if proc.returncode != 0:
        return None
    comps: list[tuple[int, str, tuple[str, ...]]] = []
    for line in proc.stdout.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "JobId" not in fields:
            continue
        offset = int(fields.get("HetJobOffset", "0"))
        nodes = fields.get("NodeList", "(null)")
        comps.append(
            (
                offset,
                fields.get("JobState", "UNKNOWN"),
                tuple(expand(nodes)) if nodes and nodes != "(null)" else (),
            )
        )
    comps.sort()
    return SlurmJobRecord(tuple(c[1] for c in comps), tuple(c[2] for c in comps))


def parse_error_line(line: str) -> tuple[str, list[int], str] | None:
    """`srun: error: node3: tasks 0-1: Terminated` -> ("node3", [0, 1], "Terminated")."""
    m = TASK_ERROR.match(line)
    if m is None:
        return None
    ids: list[int] = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            ids.extend(range(int(lo), int(hi or lo) + 1))
    return m.group(1), ids, m.group(3).strip()


class SrunWatch:
    """srun's stderr as it passes through: the job id, and the task/node error lines."""

    def __init__(self) -> None:
        self.job_id: int | None = None
        self.allocated_at: float | None = None
        self.errors: list[tuple[str, list[int], str, bool]] = []  # node, ids, text, after stop
        self.failed_nodes: list[str] = []
        self.stopping = False
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        with self.lock:
            if (m := QUEUED.match(line)) is not None:
                self.job_id = int(m.group(1))
            elif (m := ALLOCATED.match(line)) is not None:
                self.job_id = int(m.group(1))
                self.allocated_at = time.perf_counter()
            elif (m := NODE_FAIL.match(line)) is not None:
                self.failed_nodes.append(m.group(1))
            elif (parsed := parse_error_line(line)) is not None:
                self.errors.append((*parsed, self.stopping))
            if any(marker in line for marker in STOP_MARKERS):
                self.stopping = True


def exit_of(text: str) -> tuple[int | None, int | None]:
    """("Exited with exit code 3") -> (3, None); ("Terminated") -> (None, 15)."""
    if (m := EXIT_CODE.search(text)) is not None:
        return int(m.group(1)), None
    for word, sig in SIGNALS.items():
        if text.startswith(word):
            return None, int(sig)
    return 1, None


def _epoch(text: str) -> float | None:
    """squeue's local ISO time ('2026-11-23T11:05:11', 'N/A', 'Unknown') as seconds."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


SQUEUE_STATES = {
    "COMPLETING": "RUNNING",
    "CONFIGURING": "RUNNING",
    "NODE_FAIL": "FAILED",
    "TIMEOUT": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "BOOT_FAIL": "FAILED",
    "PREEMPTED": "CANCELLED",
    "DEADLINE": "FAILED",
    "SUSPENDED": "RUNNING",
}


def squeue_jobs(text: str, fmt: str) -> list[queue.QueueJob]:
    """Parse `squeue -h -O <fmt>` (fixed-width fields) into QueueJobs, components folded."""
    widths = [(f.split(":")[0], int(f.split(":")[1])) for f in fmt.split(",")]
    rows: list[dict[str, str]] = []
    for line in text.splitlines():
        row, pos = {}, 0
        for name, width in widths:
            row[name] = line[pos : pos + width].strip()
            pos += width
        if row.get("JobID"):
            rows.append(row)
    groups: dict[int, list[dict[str, str]]] = {}
    for row in rows:
        het = row["HetJobID"]
        base = int(het) if het.isdigit() and het != "0" else int(row["JobID"])
        groups.setdefault(base, []).append(row)
    jobs: list[queue.QueueJob] = []
    for base, parts in sorted(groups.items()):
        parts.sort(key=lambda r: int(r["HetJobOffset"]) if r["HetJobOffset"].isdigit() else 0)
        head = parts[0]
        state = head["State"]
        state = SQUEUE_STATES.get(state, state)
        reason = head["Reason"] if head["Reason"] not in ("None", "") else ""
        nodes = tuple(tuple(expand(p["NodeList"])) if p["NodeList"] else () for p in parts)
        # site.system_licenses: one license per CS-2 system, named as the system (cs2-1:1,...)
        held = head.get("Licenses", "")
        systems = tuple(
            w.split(":", 1)[0] for w in held.split(",") if w and held not in ("(null)", "N/A")
        )
        jobs.append(
            queue.QueueJob(
                id=base,
                het_size=len(parts),
                name=head["Name"],
                user=head["UserName"],
                state=state,
                reason=reason,
                components=tuple(Component(int(p["NumNodes"] or 0), 1) for p in parts),
                command=head["Command"],
                pid=0,
                host="",
                submitted_at=_epoch(head["SubmitTime"]) or 0.0,
                started_at=_epoch(head["StartTime"]) if state != "PENDING" else None,
                ended_at=_epoch(head["EndTime"]) if state not in ("PENDING", "RUNNING") else None,
                nodes=nodes if state != "PENDING" else (),
                exit_code=None,
                systems=systems,
            )
        )
    return jobs
