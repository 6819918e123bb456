"""csrun_wse / csrun_cpu with the Slurm backend (CS2_SCHEDULER=slurm) on the real test cluster:
the same job as under the embedded scheduler, numbered and placed the same way; srun's own lines
pass through; kill-on-bad-exit, scancel and the console's queue view."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from layout_cases import CASES, LayoutCase
from layout_model import layout_view, predict
from slurm_helpers import Cluster
from slurmbe_helpers import (
    CLUSTER_YAML,
    HERE,
    gone_from_squeue,
    launcher_env,
    script,
    squeue_ids,
    store_row,
    wait_all_idle,
)

pytestmark = pytest.mark.slurm

TEST_NODES = ("node1", "node2", "node3", "node4")
# block and cyclic; 0, 1, 2 single-task nodes; 1 and several nodes; with --cpus-per-task
LAYOUT_CASES = (
    "n1_t2",
    "n2_s0_t2",
    "n3_s0_t2_cyclic",
    "n3_s1_t2",
    "n3_s1_t2_cyclic",
    "n4_s2_t3",
    "n4_s2_t3_cyclic",
    "n4_s0_t2_c8_cyclic",
)


@pytest.fixture
def site(slurm: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A store and a cluster description for the 4-node test cluster; the launcher's env."""
    if slurm.nodes != TEST_NODES:
        pytest.skip(f"these tests assume the 4-node test cluster, not {slurm.nodes}")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    monkeypatch.chdir(tmp_path)
    wait_all_idle()
    return launcher_env(tmp_path / "home", cluster, "slurm")


def _job_id(stderr: str) -> int:
    m = re.search(r"srun: job (\d+) (queued|has been allocated)", stderr)
    assert m, stderr
    return int(m.group(1))


def _views(directory: Path) -> list[dict[str, object]]:
    envs = [json.loads(p.read_text())["env"] for p in directory.glob("task-*.json")]
    return [layout_view(e) for e in sorted(envs, key=lambda e: int(e["SLURM_PROCID"]))]


@pytest.mark.parametrize("name", LAYOUT_CASES)
@pytest.mark.slow
def test_same_numbering_and_placement_as_embedded(site, tmp_path, name):
    """csrun_wse with these flags on real Slurm and on the embedded scheduler: every task's
    SLURM_* layout view is equal (and equal to the rules of layout_model.py)."""
    case: LayoutCase = next(c for c in CASES if c.name == name)
    views = {}
    for scheduler in ("slurm", "embedded"):
        out = tmp_path / scheduler
        out.mkdir()
        wait_all_idle()
        res = subprocess.run(
            [
                script("csrun_wse"),
                *case.csrun_wse_flags(),
                "python3",
                str(HERE / "task_env.py"),
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env={**site, "CS2_SCHEDULER": scheduler},
            stdin=subprocess.DEVNULL,
        )
        assert res.returncode == 0, (scheduler, res.stderr)
        assert "Launching: srun --unbuffered --kill-on-bad-exit" in res.stdout
        views[scheduler] = _views(out)
        if scheduler == "slurm" and case.total_nodes > 1:  # Slurm's own lines pass through
            assert re.search(r"srun: job \d+ queued and waiting for resources", res.stderr)
    assert len(views["slurm"]) == case.total_nodes * case.tasks_per_node - (
        case.single_task_nodes * (case.tasks_per_node - 1)
    )
    assert views["slurm"] == views["embedded"]
    assert views["slurm"] == predict(case, TEST_NODES, 16)


@pytest.mark.slow
def test_bad_exit_fails_the_job_naming_task_and_node(site, tmp_path):
    """Global task 3 (srun's `task 2` of component 1, on node3) exits 3: srun stops the rest,
    its lines pass through, our line names SLURM_PROCID 3 on node3; the store says FAILED."""
    res = subprocess.run(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--single-task-nodes=1",
            "--tasks-per-node=2",
            "bash",
            "-c",
            "if [ $SLURM_PROCID = 3 ]; then sleep 0.5; exit 3; fi; sleep 60",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 143, res.stderr  # srun's: the killed tasks' 128 + SIGTERM
    assert "srun: error: node3: task 2: Exited with exit code 3" in res.stderr
    job = _job_id(res.stderr)
    assert (
        f"csrun: job {job} failed: task 3 (SLURM_PROCID) on node3 exited with exit code 3"
        in res.stderr
    )
    row = store_row(Path(site["CS2_HOME"]), job)
    assert row is not None and row["state"] == "FAILED" and row["exit_code"] == 143
    assert json.loads(str(row["nodes"])) == [["node1"], ["node2", "node3"]]
    assert gone_from_squeue(job)


def test_scancel_of_the_base_id_stops_the_whole_job(site, tmp_path):
    proc = subprocess.Popen(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--single-task-nodes=1",
            "--tasks-per-node=2",
            "sleep",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    try:
        first = proc.stderr.readline() if proc.stderr else ""
        job = _job_id(first)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # both components running
            states = subprocess.run(
                ["squeue", "-h", "-j", f"{job},{job + 1}", "-o", "%i %t"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.split("\n")
            if sorted(s for s in states if s) == [f"{job}+0 R", f"{job}+1 R"]:
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"job {job} did not start: {states}")
        row = store_row(Path(site["CS2_HOME"]), job)
        assert row is not None and row["state"] == "RUNNING"
        subprocess.run(["scancel", str(job)], check=True, timeout=10)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", str(job)], timeout=10)
    assert proc.returncode == 143, err
    assert f"csrun: job {job} was cancelled (scancel); every task was stopped." in err
    row = store_row(Path(site["CS2_HOME"]), job)
    assert row is not None and row["state"] == "CANCELLED"
    assert gone_from_squeue(job)


def test_ctrl_c_cancels_the_job_on_slurm(site, tmp_path):
    """SIGINT to the launcher (srun runs in its own session): the launcher scancels the job."""
    proc = subprocess.Popen(
        [script("csrun_wse"), "--total-nodes=2", "--tasks-per-node=1", "sleep", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    try:
        job = _job_id(proc.stderr.readline() if proc.stderr else "")
        assert "has been allocated" in (proc.stderr.readline() if proc.stderr else "")
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode in (130, 143), err
    assert (
        f"csrun: job {job} was cancelled (the launcher was interrupted and scancelled it); "
        "every task was stopped."
    ) in err
    row = store_row(Path(site["CS2_HOME"]), job)
    assert row is not None and row["state"] == "CANCELLED"
    assert gone_from_squeue(job)


@pytest.mark.slow
def test_console_jobs_show_is_squeue_with_the_same_columns(site, tmp_path):
    proc = subprocess.Popen(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--single-task-nodes=1",
            "--tasks-per-node=2",
            "sleep",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    try:
        job = _job_id(proc.stderr.readline() if proc.stderr else "")
        assert "has been allocated" in (proc.stderr.readline() if proc.stderr else "")
        shown = subprocess.run(
            [script("cs"), "-c", "jobs show"], capture_output=True, text=True, env=site, timeout=60
        )
        js = subprocess.run(
            [script("cs"), "-c", "jobs show --output-format json"],
            capture_output=True,
            text=True,
            env=site,
            timeout=60,
        )
        detail = subprocess.run(
            [script("cs"), "-c", f"jobs show {job}"],
            capture_output=True,
            text=True,
            env=site,
            timeout=60,
        )
        cancelled = subprocess.run(
            [script("cs"), "-c", f"jobs cancel {job}"],
            capture_output=True,
            text=True,
            env=site,
            timeout=60,
        )
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", str(job)], timeout=10)
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[0].split()
    assert header == ["JOBID", "NAME", "USER", "ST", "TIME", "NODES", "NODELIST(REASON)"]
    rows = [ln.split() for ln in shown.stdout.splitlines()[2:] if ln.strip()]
    mine = [r for r in rows if r[0].split("+")[0] == str(job)]
    assert [(r[0], r[1], r[3], r[5], r[6]) for r in mine] == [
        (f"{job}+0", "sleep", "R", "1", "node1"),
        (f"{job}+1", "sleep", "R", "2", "node[2-3]"),
    ]
    data = [j for j in json.loads(js.stdout) if j["id"] == job]
    assert (
        data and data[0]["components"] == 2 and data[0]["nodes"] == [["node1"], ["node2", "node3"]]
    )
    # `jobs show N`: the one job from squeue, its components' nodes and roles
    assert detail.returncode == 0, detail.stderr
    fields = {k.strip(): v for k, v in (ln.split(" : ", 1) for ln in detail.stdout.splitlines())}
    assert fields["Job"] == f"{job} (sleep)" and fields["State"].startswith("RUNNING")
    assert fields[f"Nodes {job}+0"].startswith("node1 (1 node(s)")
    assert fields[f"Nodes {job}+0"].endswith(": chief)")
    assert fields[f"Nodes {job}+1"].startswith("node[2-3] (2 node(s)")
    assert fields[f"Nodes {job}+1"].endswith(": streamers)")
    assert cancelled.returncode == 0 and f"Cancelled Slurm job {job}" in cancelled.stdout
    assert proc.returncode == 143
    assert store_row(Path(site["CS2_HOME"]), job)["state"] == "CANCELLED"  # type: ignore[index]


def test_csrun_cpu_runs_on_one_slurm_node_without_a_terminal(site, tmp_path):
    """`srun --pty` without a terminal: srun says so in its own two lines and runs the command
    anyway (no pty); the node wired to the CS-2 (node1) is excluded."""
    res = subprocess.run(
        [script("csrun_cpu"), "bash", "-c", "echo on $SLURMD_NODENAME; tty; exit 4"],
        capture_output=True,
        text=True,
        timeout=60,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    assert res.stdout.splitlines()[0].startswith(
        "Running: srun --pty --nodes=1 --exclude=node1 --exclusive singularity exec"
    )
    node = re.search(r"^on (\S+)$", res.stdout, re.M)
    assert node and node.group(1) in ("node2", "node3", "node4"), res.stdout  # never node1
    assert "not a tty" in res.stdout
    assert "srun: error: Not using a pseudo-terminal, disregarding --pty option" in res.stderr
    assert res.returncode == 4


def test_a_job_larger_than_the_cluster_is_refused_not_left_pending(site, tmp_path):
    """Real Slurm would leave `1 + 4` nodes pending forever (rule 13): the launcher refuses."""
    res = subprocess.run(
        [
            script("csrun_wse"),
            "--total-nodes=5",
            "--single-task-nodes=1",
            "--tasks-per-node=1",
            "true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 1
    assert (
        "srun: error: Unable to allocate resources: Requested node configuration is not "
        "available" in res.stderr
    )
    assert "this Slurm cluster has 4" in res.stderr
    assert squeue_ids() == [] or all("true" not in i for i in squeue_ids())


def test_csrun_cpu_on_slurm_gets_a_terminal(site, tmp_path):
    """Under a terminal, srun --pty gives the task a pseudo-terminal of its own (pexpect)."""
    import pexpect

    child = pexpect.spawn(
        script("csrun_cpu"), ["bash", "-c", "tty; exit 4"], env=site, encoding="utf-8", timeout=60
    )
    child.delaybeforesend = None
    child.expect(pexpect.EOF)  # srun's lines and the task's share the terminal: any order
    text = child.before
    child.close()
    assert "Running: srun --pty --nodes=1 --exclude=node1 --exclusive" in text
    assert re.search(r"/dev/pts/\d+", text), text
    assert re.search(r"srun: error: node[234]: task 0: Exited with exit code 4", text), text
    assert child.exitstatus == 4, text


@pytest.mark.slow
def test_a_node_failure_fails_the_job_naming_node_and_tasks(site, tmp_path):
    """Slurm marks node3 DOWN under a running job (as when its slurmd stops answering): srun's
    `Node failure on node3` lines pass through and our line names the node and the global task
    ids that ran there (srun's `tasks 2-3` of component 1 = SLURM_PROCID 3-4)."""
    proc = subprocess.Popen(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--single-task-nodes=1",
            "--tasks-per-node=2",
            "sleep",
            "120",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=site,
        stdin=subprocess.DEVNULL,
    )
    try:
        job = _job_id(proc.stderr.readline() if proc.stderr else "")
        assert "has been allocated" in (proc.stderr.readline() if proc.stderr else "")
        time.sleep(0.5)
        subprocess.run(
            [
                "scontrol",
                "update",
                "nodename=node3",
                "state=down",
                "reason=cs2sim-node-failure-test",
            ],
            check=True,
            timeout=10,
        )
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            subprocess.run(["scancel", str(job)], timeout=10)
        subprocess.run(
            ["scontrol", "update", "nodename=node3", "state=resume"],
            timeout=10,
            capture_output=True,
        )  # refused when Slurm already returned it to service
        wait_all_idle()
    assert proc.returncode == 143, err
    assert "srun: error: Node failure on node3" in err
    assert (
        f"csrun: job {job} failed: node node3 failed under task(s) 3-4 (SLURM_PROCID) "
        "(Slurm: Node failure)"
    ) in err
    row = store_row(Path(site["CS2_HOME"]), job)
    assert row is not None and row["state"] == "NODE_FAIL", row


def test_kill_9_of_the_launcher_ends_the_job_and_its_tasks_processes(site, tmp_path):
    """srun dies with its launcher (PR_SET_PDEATHSIG) and cancels the step: Slurm ends the
    tasks and what they started while they run (docs/security.md: what escapes
    proctrack/linuxproc)."""
    tag = str(time.time_ns() % 10**8).zfill(8)
    body = f"sleep 600.{tag}1 & touch {tmp_path}/ready.$SLURM_PROCID; sleep 600.{tag}2"
    proc = subprocess.Popen(
        [
            script("csrun_wse"),
            "--total-nodes=1",
            "--tasks-per-node=2",
            "--cpus-per-task=1",
            "bash",
            "-c",
            body,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=site,
        stdin=subprocess.DEVNULL,
    )

    def tagged() -> list[int]:
        out = subprocess.run(
            ["pgrep", "-f", f"^sleep 600.{tag}"], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split()]

    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready.*"))) < 2 or len(tagged()) < 4:
            assert time.monotonic() < deadline, "the tasks did not start"
            time.sleep(0.1)
        job = None
        while job is None:  # the launcher records the job once srun or squeue named its id
            assert time.monotonic() < deadline, "the launcher recorded no Slurm job"
            with (
                contextlib.suppress(sqlite3.Error),
                sqlite3.connect(Path(site["CS2_HOME"]) / "cs2sim.db") as db,
            ):
                job = db.execute("SELECT max(id) FROM slurm_jobs").fetchone()[0]
            time.sleep(0.1)
        proc.kill()
        proc.communicate(timeout=10)
        deadline = time.monotonic() + 40  # srun's KillWait may apply
        while tagged():
            assert time.monotonic() < deadline, f"left running: {tagged()}"
            time.sleep(0.2)
        assert gone_from_squeue(job)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
        for pid in tagged():  # only this test's own, by pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
