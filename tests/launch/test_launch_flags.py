"""csrun_wse / csrun_cpu command lines against the real scripts' texts (Model Zoo's user scripts,
docs/sources.md)."""

from __future__ import annotations

import pytest
from launch_helpers import run, script

from cs2sim.system.cluster import SiteSpec
from cs2sim.system.sched.flags import (
    LaunchError,
    cs_ip_of,
    parse_cpu,
    parse_wse,
    wse_help,
)
from cs2sim.system.sched.request import Component

SITE = SiteSpec(
    def_nodes=5,
    def_tasks_per_node=8,
    def_cpus_per_task=16,
    mount_dirs="",
    singularity_image="/img.sif",
    gres_resource="cs:cerebras:1",
    gres_node="chief-0",
)
WORKERS = [128] * 15
QUICKSTART = [
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
    "--mode",
    "train",
]


def test_the_quickstarts_command_line_and_components():
    w = parse_wse(QUICKSTART, SITE, WORKERS)
    assert w.srun is not None and w.request is not None
    assert w.srun.text == (
        "srun --unbuffered --kill-on-bad-exit --exclusive --nodes=1 --tasks-per-node=1 "
        "--gres=cs:cerebras:1 : --nodes=1 --tasks-per-node=1 --exclusive : --nodes=12 "
        "--tasks-per-node=8 --cpus-per-task=16 --distribution=cyclic --exclusive singularity "
        "exec  /img.sif python-ws run.py --mode train"
    )
    assert w.request.components == (
        Component(1, 1, None, False, "cs:cerebras:1"),
        Component(1, 1),
        Component(12, 8, 16, True),
    )
    assert w.request.ntasks == 98 and w.messages == []
    assert w.srun.argv[:3] == ("srun", "--unbuffered", "--kill-on-bad-exit")
    assert w.srun.argv[-4:] == ("python-ws", "run.py", "--mode", "train")


def test_both_spellings_give_the_same_launch():
    eq = [
        a + "=" + b for a, b in zip(QUICKSTART[0:8:2], QUICKSTART[1:8:2], strict=True)
    ] + QUICKSTART[8:]
    assert parse_wse(eq, SITE, WORKERS).srun == parse_wse(QUICKSTART, SITE, WORKERS).srun


def test_no_single_task_nodes_and_one_node_shapes():
    two = parse_wse(
        ["--total-nodes=3", "--tasks-per-node=2", "--cpus-per-task=4", "python", "x.py"],
        SITE,
        WORKERS,
    )
    assert two.srun is not None
    assert two.srun.text == (
        "srun --unbuffered --kill-on-bad-exit --nodes=1 --tasks-per-node=2 --cpus-per-task=4 "
        "--gres=cs:cerebras:1 : --nodes=2 --tasks-per-node=2 --cpus-per-task=4  --exclusive "
        "singularity exec  /img.sif python x.py"
    )
    one = parse_wse(
        ["--total-nodes", "1", "--mount-dirs", "/data", "python", "x.py"], SITE, WORKERS
    )
    assert one.srun is not None
    assert one.srun.text == (
        "srun --unbuffered --kill-on-bad-exit --exclusive --nodes=1 --tasks-per-node=8 "
        "--cpus-per-task=16 --gres=cs:cerebras:1 singularity exec -B /data /img.sif python x.py"
    )


def test_defaults_come_from_the_site():
    w = parse_wse(["python", "x.py"], SITE, WORKERS)
    assert (w.nodes, w.tasks_per_node, w.cpus_per_task) == (5, 8, 16)


@pytest.mark.parametrize(
    "flag", ["--total-nodes", "--tasks-per-node", "--cpus-per-task", "--single-task-nodes"]
)
@pytest.mark.parametrize("bad", [None, "", "abc", "2.5"])
def test_integer_flags_need_an_integer(flag, bad):
    argv = [flag] if bad is None else ([flag, bad] if bad == "" else [f"{flag}={bad}"])
    with pytest.raises(LaunchError) as e:
        parse_wse([*argv, "python", "x.py"] if bad is not None else argv, SITE, WORKERS)
    assert str(e.value) == f'ERROR: "{flag}" requires a non-empty integer argument'
    assert e.value.exit_code == 1


def test_mount_dirs_needs_a_value():
    with pytest.raises(LaunchError) as e:
        parse_wse(["--mount-dirs"], SITE, WORKERS)
    assert str(e.value) == (
        'ERROR: "--mount-dirs" requires a non-empty argument (directories to mount)'
    )


def test_single_task_nodes_must_be_less_than_nodes():
    with pytest.raises(LaunchError) as e:
        parse_wse(["--total-nodes=2", "--single-task-nodes=2", "python", "x.py"], SITE, WORKERS)
    assert str(e.value) == (
        "ERROR: ''--single-task-nodes'' (2) must be less than the number of nodes (2)"
    )


def test_weight_streaming_needs_two_single_task_nodes():
    with pytest.raises(LaunchError) as e:
        parse_wse(
            ["--total-nodes=4", "--single-task-nodes=1", "python-ws", "run.py"], SITE, WORKERS
        )
    assert "python-ws (weight streaming) needs at least 2 single-task nodes" in str(e.value)
    assert "--single-task-nodes=2" in str(e.value)
    parse_wse(["--total-nodes=4", "--single-task-nodes=1", "python", "run.py"], SITE, WORKERS)


def test_unknown_option_is_warned_and_ignored():
    w = parse_wse(["--total_nodes=5", "--bogus", "--", "python", "x.py"], SITE, WORKERS)
    assert w.messages == [
        ("err", "WARN: Unknown option (ignored): --total_nodes=5"),
        ("err", "WARN: Unknown option (ignored): --bogus"),
    ]
    assert w.nodes == 5 and w.run_args == ("python", "x.py")


def test_tasks_without_cpus_uses_default_when_compatible():
    w = parse_wse(["--tasks-per-node=8", "python", "x.py"], SITE, WORKERS)
    assert [m for _, m in w.messages] == [
        "INFO: --tasks-per-node specified but --cpus-per-task is not specified",
        "    Will first attempt to use default value for cpus-per-task.",
        "    If incompatible, will let Slurm resolve this.",
        "    Using default value for cpus_per_task",
    ]
    assert w.cpus_per_task == 16


def test_tasks_without_cpus_lets_slurm_choose_when_incompatible():
    w = parse_wse(["--tasks-per-node=9", "python", "x.py"], SITE, WORKERS)
    assert w.messages[-1] == (
        "out",
        "    Slurm will choose value for cpus-per-task as default "
        "value is not compatible with given value of tasks-per-node.",
    )
    assert w.cpus_per_task is None and w.srun is not None
    assert "--cpus-per-task" not in w.srun.text


def test_cpus_without_tasks_computes_the_maximum():
    w = parse_wse(["--cpus-per-task", "32", "python", "x.py"], SITE, WORKERS)
    assert [m for _, m in w.messages] == [
        "INFO: cpus_per_task specified but tasks-per-node is not specified",
        "    Attempting to determine the maximum number of tasks possible",
    ]
    assert w.tasks_per_node == 128 // 32


def test_help_has_the_defaults_filled_in():
    text = wse_help(SITE)
    assert text.splitlines()[0].startswith("Usage: csrun_wse [--help] [--mount-dirs]")
    assert "               total-nodes:     5\n" in text
    assert "               tasks-per-node:  8\n" in text
    assert "               cpus-per-task:   16\n" in text


def test_cs_ip_is_found_in_both_spellings():
    assert cs_ip_of(("python", "run.py", "--cs_ip", "1.2.3.4")) == "1.2.3.4"
    assert cs_ip_of(("python", "run.py", "--cs_ip=1.2.3.4:9000")) == "1.2.3.4:9000"
    assert cs_ip_of(("python", "run.py")) is None


def test_cpu_flags_and_lines():
    c = parse_cpu(["--mount-dirs=/data", "python", "run.py"], SITE, {"PYTHONPATH": "/x"})
    assert c.srun is not None and c.request is not None
    assert c.srun.text == (
        "srun --pty --nodes=1 --exclude=chief-0 --exclusive singularity exec "
        "-B ,/data /img.sif python run.py"
    )
    assert c.messages == [("out", "Unsetting PYTHONPATH within the singularity container scope")]
    assert c.request.exclude == ("chief-0",)
    c2 = parse_cpu(["--alloc-node", "False", "--logging=false", "python"], SITE, {})
    assert c2.srun is not None and not c2.alloc_node and not c2.logging
    assert c2.srun.text == "singularity exec -B , /img.sif python"
    with pytest.raises(LaunchError) as e:
        parse_cpu(["--exclude_gres"], SITE, {})
    assert str(e.value) == 'ERROR: "--alloc-node" requires a non-empty argument ("True"/"False")'
    assert parse_cpu(["--def_gres_node"], SITE, {}).query == "chief-0"


def test_query_flags_print_the_cluster_configuration():
    for flag, value in [
        ("--def_nodes", "5"),
        ("--def_tasks", "8"),
        ("--def_cpus", "16"),
        ("--def_gres", "cs:cerebras:1"),
        ("--def_gres_node", "chief-0"),
        ("--singularity", "/opt/cerebras/cbcore_latest.sif"),
    ]:
        res = run([script("csrun_cpu"), flag])
        assert res.returncode == 0 and res.stdout == value + "\n", (flag, res)


def test_csrun_wse_help_and_errors_end_to_end():
    res = run([script("csrun_wse"), "--help"])
    assert res.returncode == 0 and "total-nodes:     5" in res.stdout
    res = run([script("csrun_wse"), "--oops", "--total-nodes"])
    assert res.returncode == 1
    assert res.stderr == (
        "WARN: Unknown option (ignored): --oops\n"
        'ERROR: "--total-nodes" requires a non-empty integer argument\n'
    )
