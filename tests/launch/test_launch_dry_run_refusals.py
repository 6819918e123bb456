"""`csrun_wse --dry-run` refuses what the real launch refuses, with the same exit code (a job
larger than the cluster 1, a CS-2 in the other mode 69, an unknown --cs_ip 2), exits 141 when
its reader leaves (`| head`), and a number of CS-2 systems the run would refuse once started
(`--num_csx 0`, several for a pipelined run) is refused before anything is allocated (69)."""

from __future__ import annotations

import subprocess

import pytest
from launch_helpers import HANG_S, queue_state, run, script

SEED_WS = [
    "--total-nodes",
    "14",
    "--tasks-per-node",
    "8",
    "--cpus-per-task",
    "16",
    "--single-task-nodes",
    "2",
    "--cyclic",
    "python-ws",
    "run.py",
    "--model_dir",
    "model_dir",
    "--cs_ip",
    "127.0.1.1",
    "--params",
    "configs/params.yaml",
    "--mode",
    "train",
    "--max_steps",
    "10",
]


@pytest.mark.parametrize(
    ("argv", "code", "words"),
    [
        (
            ["--total-nodes", "100", "python", "run.py", "CSX"],
            1,
            "srun: error: Unable to allocate resources",
        ),
        (SEED_WS, 69, "is ACTIVE in PIPELINED mode but this job needs WEIGHT_STREAMING"),
        (
            ["python", "run.py", "CSX", "--cs_ip", "10.0.0.9"],
            2,
            "--cs_ip 10.0.0.9 names no CS-2 system",
        ),
    ],
    ids=["larger-than-the-cluster", "python-ws-on-pipelined", "unknown-cs_ip"],
)
def test_dry_run_refuses_what_the_launch_refuses(cs2_home, argv, code, words) -> None:
    res = run([script("csrun_wse"), "--dry-run", *argv])
    assert res.returncode == code, res.stdout + res.stderr
    assert words in res.stderr
    assert queue_state(cs2_home) == ([], [])


@pytest.mark.parametrize(
    ("flow", "num_csx", "words"),
    [
        ("python", "0", "a run needs at least one CS-2 system"),
        ("python-ws", "0", "a run needs at least one CS-2 system"),
        ("python", "2", "a pipelined run uses one CS-2 system"),
    ],
)
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "launch"])
def test_num_csx_the_run_would_refuse_is_refused_before_allocation(
    cs2_home, flow, num_csx, words, dry
) -> None:
    nodes = ["--total-nodes", "3", "--single-task-nodes", "2"] if flow == "python-ws" else []
    argv = [
        script("csrun_wse"),
        *(["--dry-run"] if dry else []),
        *nodes,
        flow,
        "run.py",
        "CSX",
        "--num_csx",
        num_csx,
        "--cs_ip",
        "127.0.1.1",
    ]
    res = run(argv)
    assert res.returncode == 69, res.stdout + res.stderr
    assert words in res.stderr and "nothing was allocated" in res.stderr
    assert queue_state(cs2_home) == ([], [])  # no job row, no node taken


def test_dry_run_into_head_and_into_a_closed_pipe_exits_141(cs2_home) -> None:
    head = f"{script('csrun_wse')} --dry-run python run.py CSX | head -1"
    res = subprocess.run(["bash", "-c", head], capture_output=True, text=True, timeout=HANG_S)
    assert res.stdout.splitlines() == [res.stdout.splitlines()[0]]
    assert res.stdout.startswith("Launching: srun") and "Traceback" not in res.stderr
    # whether head is gone before the launcher's last write is a race; a reader that has
    # already gone (`true`, and the launcher starting a moment later) is not
    closed = (
        f"{{ sleep 0.3; {script('csrun_wse')} --dry-run python run.py CSX; }} | true; "
        'echo "status=${PIPESTATUS[0]}"'
    )
    res = subprocess.run(["bash", "-c", closed], capture_output=True, text=True, timeout=HANG_S)
    assert res.stdout.splitlines()[-1] == "status=141", res.stdout + res.stderr
    assert "Traceback" not in res.stderr
