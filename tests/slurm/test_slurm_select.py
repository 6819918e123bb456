"""The Slurm backend's pieces that need no cluster: which scheduler runs a launch, the one srun
line it runs, and how srun's and squeue's output is read. (Not marked `slurm`: they always run.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cs2sim.system.cluster import SiteSpec, load_cluster
from cs2sim.system.errors import ConfigError
from cs2sim.system.sched.backend import EmbeddedBackend, scheduler_name, select_backend
from cs2sim.system.sched.flags import parse_wse
from cs2sim.system.sched.slurm import SlurmBackend, slurm_argv
from cs2sim.system.sched.slurm_client import SQUEUE_FORMAT, parse_error_line, squeue_jobs
from cs2sim.system.store import Store

SITE = SiteSpec(
    def_nodes=4,
    def_tasks_per_node=1,
    def_cpus_per_task=17,
    gres_resource="",
    gres_node="",
    singularity_image="img",
)
BIN = Path(sys.executable).parent


def test_default_is_embedded_and_env_overrides_site(monkeypatch, tmp_path):
    monkeypatch.delenv("CS2_SCHEDULER", raising=False)
    assert scheduler_name(SiteSpec()) == "embedded"
    assert scheduler_name(SiteSpec(scheduler="slurm")) == "slurm"
    monkeypatch.setenv("CS2_SCHEDULER", "embedded")
    assert scheduler_name(SiteSpec(scheduler="slurm")) == "embedded"
    monkeypatch.setenv("CS2_SCHEDULER", "Slurm")
    assert scheduler_name(SiteSpec()) == "slurm"
    monkeypatch.setenv("CS2_SCHEDULER", "pbs")
    with pytest.raises(
        ConfigError,
        match=r"CS2_SCHEDULER=pbs is not a scheduler; use one of: "
        r"embedded, slurm",
    ):
        scheduler_name(SiteSpec())
    monkeypatch.setenv("CS2_HOME", str(tmp_path / "home"))
    store = Store.open()
    monkeypatch.setenv("CS2_SCHEDULER", "slurm")
    assert isinstance(select_backend(store, SiteSpec()), SlurmBackend)
    monkeypatch.setenv("CS2_SCHEDULER", "embedded")
    assert isinstance(select_backend(store, SiteSpec(scheduler="slurm")), EmbeddedBackend)


def _yaml(tmp_path: Path, scheduler: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "systems:\n  - {name: cs2-1, ip: 127.0.1.1, model: CS-2, execmode: PIPELINED}"
        "\nnodes:\n  - {name: node1, cpus: 16, memory_gb: 4, role: chief}\n"
        f"site:\n  scheduler: {scheduler}\n"
    )
    return path


def test_cluster_yaml_site_scheduler(tmp_path):
    assert load_cluster(_yaml(tmp_path, "slurm")).site.scheduler == "slurm"
    assert load_cluster(_yaml(tmp_path, "embedded")).site.scheduler == "embedded"
    with pytest.raises(
        ConfigError,
        match=r"`site.scheduler` is 'lsf'; use one of: embedded, "
        r"slurm; fix that key",
    ):
        load_cluster(_yaml(tmp_path, "lsf"))


@pytest.mark.parametrize(
    "flags",
    [
        ["--total-nodes=1", "--tasks-per-node=2"],
        ["--total-nodes=3", "--tasks-per-node=2", "--cyclic"],
        [
            "--total-nodes=4",
            "--single-task-nodes=2",
            "--tasks-per-node=3",
            "--cyclic",
            "--cpus-per-task=4",
        ],
    ],
)
def test_the_slurm_argv_is_the_printed_line_up_to_the_container(flags):
    """One builder: srun runs exactly the words `Launching:` shows, with `singularity exec -B ...
    <image>` replaced by the command (its words kept apart, so quoting survives)."""
    cmd = ["python", "-c", "print('a b')"]
    launch = parse_wse([*flags, *cmd], SITE, [16] * 4)
    assert launch.srun is not None
    argv = slurm_argv(launch.srun, launch.run_args)
    cut = launch.srun.argv.index("singularity")
    assert argv == (*launch.srun.argv[:cut], *cmd)
    assert " ".join(argv[:cut]) == " ".join(launch.srun.text.split("singularity")[0].split())


def test_srun_error_lines_are_read():
    assert parse_error_line("srun: error: node3: task 2: Exited with exit code 3") == (
        "node3",
        [2],
        "Exited with exit code 3",
    )
    assert parse_error_line("srun: error: node2: tasks 0-1,4: Terminated") == (
        "node2",
        [0, 1, 4],
        "Terminated",
    )
    assert parse_error_line("srun: error: Unable to allocate resources: x") is None


def test_squeue_rows_fold_het_components():
    fmt = SQUEUE_FORMAT  # what SlurmBackend.queue asks squeue for
    widths = [int(f.split(":")[1]) for f in fmt.split(",")]

    def row(*vals: str) -> str:
        return "".join(v.ljust(w) for v, w in zip(vals, widths, strict=True))

    text = "\n".join(
        [
            row(
                "427",
                "427",
                "0",
                "python-ws",
                "ann",
                "RUNNING",
                "None",
                "1",
                "node1",
                "2026-11-23T11:05:10",
                "2026-11-23T11:05:11",
                "N/A",
                "python-ws",
                "2861",
                "cs2-1:1,cs2-2:1",
            ),  # its CS-2 systems, one license each (site.system_licenses)
            row(
                "428",
                "427",
                "1",
                "python-ws",
                "ann",
                "RUNNING",
                "None",
                "2",
                "node[2-3]",
                "2026-11-23T11:05:10",
                "2026-11-23T11:05:11",
                "N/A",
                "python-ws",
                "2861",
                "(null)",
            ),
            row(
                "430",
                "0",
                "0",
                "sleep",
                "bob",
                "PENDING",
                "Resources",
                "4",
                "",
                "2026-11-23T11:06:10",
                "N/A",
                "N/A",
                "sleep",
                "2900",
                "(null)",
            ),
        ]
    )
    jobs = squeue_jobs(text, fmt)
    assert [(j.id, j.het_size, j.state, j.reason, j.nodes, j.systems) for j in jobs] == [
        (427, 2, "RUNNING", "", (("node1",), ("node2", "node3")), ("cs2-1", "cs2-2")),
        (430, 1, "PENDING", "Resources", (), ()),
    ]
    assert [c.nodes for c in jobs[0].components] == [1, 2] and jobs[1].node_count == 4
    assert jobs[0].started_at is not None and jobs[1].started_at is None


def test_without_srun_the_launcher_says_so_in_one_sentence(tmp_path):
    (tmp_path / "cluster.yaml").write_text(
        "systems:\n  - {name: cs2-1, ip: 127.0.1.1, model: CS-2, execmode: PIPELINED}\n"
        "nodes:\n  - {name: node1, cpus: 16, memory_gb: 4, role: chief}\n"
        "site:\n  gres_resource: ''\n  scheduler: slurm\n"
    )
    env = {
        **os.environ,
        "CS2_HOME": str(tmp_path / "home"),
        "CS2_CLUSTER": str(tmp_path / "cluster.yaml"),
        "PATH": "/nonexistent",
    }
    env.pop("CS2_SCHEDULER", None)
    res = subprocess.run(
        [str(BIN / "csrun_wse"), "--total-nodes=1", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert res.returncode != 0
    errs = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert errs == [
        "srun: error: The scheduler is slurm but `srun` is not on PATH; install the "
        "Slurm client (slurm-client) or set CS2_SCHEDULER=embedded."
    ]
    assert "Traceback" not in res.stderr


def test_tasks_of_a_lost_node_follow_slurms_numbering():
    """srun may not report the tasks of a node it lost: they come from the allocation, block or
    cyclic as Slurm numbers them (component 0 first, then cyclic rounds over the last one)."""
    from cs2sim.system.sched.slurm import _tasks_on
    from cs2sim.system.sched.slurm_client import SlurmJobRecord

    nodes = (("node1",), ("node2", "node3"))
    for cyclic, want in ((False, [3, 4]), (True, [2, 4])):
        flags = ["--total-nodes=3", "--single-task-nodes=1", "--tasks-per-node=2"]
        launch = parse_wse([*flags, *(["--cyclic"] if cyclic else []), "true"], SITE, [16] * 4)
        assert launch.request is not None
        record = SlurmJobRecord(("NODE_FAIL", "NODE_FAIL"), nodes)
        assert _tasks_on(["node3"], launch.request, record, 7) == want
