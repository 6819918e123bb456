"""Task placement and the SLURM_* environment: block, cyclic, single-task nodes (heterogeneous)."""

from __future__ import annotations

from launch_helpers import HANG_S, RECORD, records, run, script

from cs2sim.system.sched.hostlist import compress, expand
from cs2sim.system.sched.layout import layout
from cs2sim.system.sched.request import Component, JobRequest


def _req(*comps: Component) -> JobRequest:
    return JobRequest(components=comps, command=("python", "x.py"))


def _nodes(*parts: list[str]) -> list[list[str]]:
    return [list(p) for p in parts]


def test_block_matches_slurm_notes():
    # real Slurm 22.05: srun -N2 --ntasks-per-node=2 -> node1 0 0 0 / node1 0 1 1 / node2 1 2 0 /
    # ...
    tasks = layout(_req(Component(2, 2)), 8, _nodes(["node1", "node2"]), {})
    got = [(t.node, t.nodeid, t.procid, t.localid) for t in tasks]
    assert got == [("node1", 0, 0, 0), ("node1", 0, 1, 1), ("node2", 1, 2, 0), ("node2", 1, 3, 1)]
    env = tasks[0].env
    assert env["SLURM_JOB_NODELIST"] == "node[1-2]" and env["SLURM_NTASKS"] == "4"
    assert "SLURM_HET_JOB_ID" not in env and "SLURM_HET_JOB_OFFSET" not in env


def test_cyclic_matches_slurm_notes():
    # real Slurm 22.05, --distribution=cyclic: node1 0 0 0 / node2 1 1 0 / node1 0 2 1 / node2 1 3 1
    tasks = layout(_req(Component(2, 2, cyclic=True)), 8, _nodes(["node1", "node2"]), {})
    got = [(t.node, t.nodeid, t.procid, t.localid) for t in tasks]
    assert got == [("node1", 0, 0, 0), ("node2", 1, 1, 0), ("node1", 0, 2, 1), ("node2", 1, 3, 1)]


def test_heterogeneous_numbering_is_global():
    comps = (Component(1, 1, gres="g"), Component(1, 1), Component(3, 2, 16, cyclic=True))
    parts = _nodes(["c0"], ["w0"], ["w1", "w2", "w3"])
    tasks = layout(_req(*comps), 40, parts, {"w1": 128})
    assert [t.procid for t in tasks] == list(range(8))
    assert [t.node for t in tasks[:3]] == ["c0", "w0", "w1"]
    assert all(
        "SLURM_HET_JOB_OFFSET" not in t.env and "SLURM_HET_JOB_ID" not in t.env for t in tasks
    )  # real Slurm sets neither in a het step's tasks
    # cyclic inside the last component: tasks 2..7 go w1 w2 w3 w1 w2 w3
    assert [t.node for t in tasks[2:]] == ["w1", "w2", "w3", "w1", "w2", "w3"]
    assert [t.localid for t in tasks[2:]] == [0, 0, 0, 1, 1, 1]
    assert [t.nodeid for t in tasks] == [0, 1, 2, 3, 4, 2, 3, 4]
    env = tasks[5].env
    assert env["SLURM_JOB_ID"] == "40" and env["SLURM_HET_SIZE"] == "3"
    assert env["SLURM_JOB_ID_PACK_GROUP_2"] == "42"
    assert env["SLURM_JOB_NODELIST_PACK_GROUP_2"] == "w[1-3]"
    assert env["SLURM_NTASKS"] == "8" and env["SLURM_NNODES"] == "5"
    assert env["SLURM_CPUS_PER_TASK"] == "16" == tasks[0].env["SLURM_CPUS_PER_TASK"]
    assert env["SLURM_TASKS_PER_NODE"] == "1(x2),2(x3)"
    assert env["SLURM_GTIDS"] == "2,5" and env["SLURM_CPUS_ON_NODE"] == "32"


def test_hostlist_round_trip():
    names = ["chief-0", *[f"worker-{i}" for i in range(13)], "n08", "n09", "n10", "solo"]
    assert compress(names) == "chief-0,worker-[0-12],n[08-10],solo"
    assert expand(compress(names)) == names


def test_the_quickstarts_job_every_task_is_a_process_with_its_environment(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    res = run(
        [
            script("csrun_wse"),
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
            "-c",
            RECORD,
            str(out),
        ],
        timeout=HANG_S,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Launching: srun --unbuffered --kill-on-bad-exit --exclusive")
    recs = records(out)
    assert sorted(recs) == list(range(98))
    assert len({r["pid"] for r in recs.values()}) == 98  # 98 distinct processes
    chief, coord = recs[0], recs[1]
    assert chief["SLURMD_NODENAME"] == "chief-0" and coord["SLURMD_NODENAME"] == "worker-0"
    job = chief["SLURM_JOB_ID"]
    workers = [recs[i] for i in range(2, 98)]
    assert all(w["SLURM_JOB_ID"] == job for w in workers)
    assert chief["SLURM_JOB_ID_PACK_GROUP_2"] == str(int(job) + 2)
    assert chief["SLURM_JOB_NODELIST_PACK_GROUP_2"] == "worker-[1-12]"
    # cyclic over worker-1..worker-12: task 2+i is on worker-(1 + i % 12), local id i // 12
    for i, w in enumerate(workers):
        assert w["SLURMD_NODENAME"] == f"worker-{1 + i % 12}"
        assert w["SLURM_LOCALID"] == str(i // 12)
        assert w["SLURM_NODEID"] == str(2 + i % 12)
        assert w["SLURM_CPUS_PER_TASK"] == "16"
        assert w["CS2SIM_FLOW"] == "ws"
    assert chief["SLURM_JOB_NODELIST"] == "chief-0,worker-[0-12]"
    assert chief["SLURM_NTASKS"] == "98" and chief["SLURM_NNODES"] == "14"
    assert chief["SLURM_HET_SIZE"] == "3" and "SLURM_HET_JOB_ID" not in chief


def test_block_layout_end_to_end(tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes=3",
            "--tasks-per-node=2",
            "--cpus-per-task=4",
            "python",
            "-c",
            RECORD,
            str(out),
        ]
    )
    assert res.returncode == 0, res.stderr
    recs = records(out)
    got = [(recs[i]["SLURMD_NODENAME"], recs[i]["SLURM_LOCALID"]) for i in range(6)]
    assert got == [
        ("chief-0", "0"),
        ("chief-0", "1"),
        ("worker-0", "0"),
        ("worker-0", "1"),
        ("worker-1", "0"),
        ("worker-1", "1"),
    ]
    assert "CS2SIM_FLOW" not in recs[0]


def test_per_task_log_files(tmp_path, cs2_home):
    res = run(
        [
            script("csrun_wse"),
            "--total-nodes=2",
            "--tasks-per-node=2",
            "--cpus-per-task=4",
            "python",
            "-c",
            "import os, sys; print('out', os.environ['SLURM_PROCID']); "
            "print('err', os.environ['SLURM_PROCID'], file=sys.stderr)",
        ]
    )
    assert res.returncode == 0
    assert sorted(res.stdout.splitlines()[1:]) == ["out 0", "out 1", "out 2", "out 3"]
    assert sorted(res.stderr.splitlines()) == ["err 0", "err 1", "err 2", "err 3"]
    logs = sorted((cs2_home / "slurm").glob("*/task-*.log"))
    assert len(logs) == 4
    assert logs[0].read_text().splitlines() == ["out 0", "err 0"] or sorted(
        logs[0].read_text().splitlines()
    ) == ["err 0", "out 0"]


def test_dry_run_shows_the_layout_and_allocates_nothing(cs2_home):
    from launch_helpers import queue_state

    res = run(
        [
            script("csrun_wse"),
            "--dry-run",
            "--total-nodes=4",
            "--single-task-nodes=2",
            "--tasks-per-node=3",
            "--cpus-per-task=4",
            "--cyclic",
            "python-ws",
            "run.py",
        ]
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("Launching: srun --unbuffered --kill-on-bad-exit --exclusive")
    assert "8 task(s) on 4 node(s)" in lines[1] and "nothing was allocated" in lines[1]
    assert lines[2].split() == ["component", "0", "chief-0", "tasks", "0"]
    assert lines[4].split() == ["component", "2", "worker-1", "tasks", "2,4,6"]
    assert queue_state(cs2_home) == ([], [])
