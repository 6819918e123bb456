"""The testing kit's throwaway systems: isolated, set up directly, cleaned up completely."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cs2sim.scripts.testkit import ThrowawaySystem

# A pytest session of a user's project: the kit's plugin loads as installed (its entry point);
# hypothesis' and anyio's plugins, which this venv has for other tests, are not loaded (importing
# them is ~0.8 CPU-s of each session and of each xdist worker, and nothing here uses them)
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-q",
    "-p",
    "no:cacheprovider",
    "-p",
    "no:hypothesispytest",
    "-p",
    "no:anyio",
]


def test_fixture_system_is_fresh_active_and_pipelined(cs2_system):
    assert cs2_system.state == "ACTIVE"
    assert cs2_system.active_mode == "PIPELINED"
    assert cs2_system.home.is_dir()
    assert cs2_system.env["CS2_HOME"] == str(cs2_system.home)
    assert "CS2_HOME" not in os.environ or os.environ["CS2_HOME"] != str(cs2_system.home)


@pytest.mark.parametrize(
    ("state", "mode", "shown"),
    [
        ("STANDBY", "weight-streaming", "WEIGHT_STREAMING"),
        ("ACTIVE", "WEIGHT_STREAMING", "WEIGHT_STREAMING"),
        ("FAULT", None, "PIPELINED"),
        ("ACTIVATING", "ws", "WEIGHT_STREAMING"),
    ],
)
def test_put_in_any_state_is_what_cs_then_sees(cs2_system, state, mode, shown):
    cs2_system.put_in(state, mode, ready_in=60)
    result = cs2_system.cs("config execmode show --output-format=json").check()
    assert result.json()["state"] == state
    assert result.json()["active_execmode"] == shown
    last = cs2_system.audit()[-1]
    assert (last.user, last.command, last.to_state) == ("testkit", "testkit put_in", state)


def test_put_in_configured_mode_is_pending_until_activate(cs2_system):
    cs2_system.put_in("STANDBY", "PIPELINED", configured="WEIGHT_STREAMING")
    shown = cs2_system.cs("config execmode show --output-format=json").json()
    assert shown["execmode"] == "WEIGHT_STREAMING" and shown["pending_mode_change"] is True
    cs2_system.cs("system activate").check()
    assert cs2_system.active_mode == "WEIGHT_STREAMING"


def test_cs_reports_refusals_with_their_exit_code(cs2_cs, cs2_system):
    cs2_system.put_in("FAULT")
    result = cs2_cs("config execmode setup weight-streaming")
    assert result.exit_code == 1
    assert result.errors.startswith("error: ") and "STANDBY" in result.errors
    with pytest.raises(AssertionError, match="exited 1"):
        result.check()


def test_cluster_override_names_the_systems(cs2_systems):
    cluster = {
        "systems": [{"name": "lab-a", "ip": "10.0.0.5"}, {"name": "lab-b", "ip": "10.0.0.6"}],
        "nodes": [{"name": "n", "count": 2, "cpus": 8, "memory_gb": 32, "role": "worker"}],
    }
    system = cs2_systems(cluster=cluster)
    assert (system.name, system.ip) == ("lab-a", "10.0.0.5")
    assert system.status("lab-b").state.value == "ACTIVE"
    shown = system.cs(None, "--system", "lab-b", "system", "show").check().output
    assert "lab-b (10.0.0.6)" in shown


def test_boot_seconds_compress_the_reboot(cs2_systems):
    slow = cs2_systems(boot_seconds=30)
    slow.put_in("STANDBY")
    slow.put_in("ACTIVATING")
    assert slow.state == "ACTIVATING"
    fast = cs2_systems(boot_seconds=0)
    fast.put_in("STANDBY")
    fast.cs("system activate").check()
    assert fast.state == "ACTIVE"


def test_systems_do_not_share_anything(cs2_systems):
    a, b = cs2_systems(), cs2_systems()
    a.put_in("STANDBY")
    assert (a.state, b.state) == ("STANDBY", "ACTIVE")
    assert a.home != b.home
    assert [e.command for e in b.audit()] == []


def test_close_stops_processes_and_their_children_and_removes_files():
    system = ThrowawaySystem()
    # a process that starts a child of its own, both sleeping
    proc = system.start(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(600)']); "
            "print(c.pid, flush=True); time.sleep(600)",
        ]
    )
    child_pid = int(proc.stdout.readline())
    console = system.console()
    root = system.root
    system.close()
    assert not root.exists()
    assert proc.poll() is not None
    assert not console.child.isalive()
    deadline = time.monotonic() + 300  # a hang guard, generous for a loaded host
    while time.monotonic() < deadline and _alive(child_pid):
        time.sleep(0.05)
    assert not _alive(child_pid)
    system.close()  # idempotent


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_kit_never_changes_the_callers_environment(monkeypatch):
    monkeypatch.setenv("CS2_CLUSTER", "/nonexistent/cluster.yaml")
    before = dict(os.environ)
    with ThrowawaySystem() as system:
        assert system.state == "ACTIVE"  # the caller's CS2_CLUSTER is not used ...
        assert "CS2_CLUSTER" not in system.env  # ... nor passed on
    assert dict(os.environ) == before


def test_runs_a_timeout_as_a_failure_with_the_output(cs2_system):
    with pytest.raises(AssertionError, match="did not finish in 0.5 s"):
        cs2_system.run(
            [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(30)"],
            timeout=0.5,
        )


@pytest.mark.slow
def test_two_test_processes_in_parallel_keep_their_stores_apart(tmp_path):
    """pytest-xdist style: two pytest runs at once, each switching its own system's mode."""
    test = tmp_path / "test_parallel_mode.py"
    test.write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('i', range(4))\n"
        "def test_switch(cs2_system, i):\n"
        "    mode = 'weight-streaming' if i % 2 else 'pipelined'\n"
        "    cs2_system.cs(f'system standby --yes; config execmode setup {mode}; "
        "system activate').check()\n"
        "    assert cs2_system.active_mode == ('WEIGHT_STREAMING' if i % 2 else 'PIPELINED')\n"
        "    assert len([e for e in cs2_system.audit() if e.command != 'booted']) == 3\n"
    )
    procs = [
        subprocess.Popen(
            [*PYTEST, "-n", "2", str(test)],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
        assert "4 passed" in out
    assert not list(tmp_path.glob("**/cs2home"))  # nothing left behind


def test_hold_job_shows_as_running_and_release_ends_it(cs2_system):
    job = cs2_system.hold_job(user="alice", command="python-ws run.py --mode train")
    shown = cs2_system.cs("system show --output-format=json").json()["running_jobs"]
    assert [j["id"] for j in shown] == [job.id]
    assert cs2_system.status().running_jobs[0].user == "alice"
    cs2_system.release_job(job)
    deadline = time.monotonic() + 300  # a hang guard, generous for a loaded host
    while cs2_system.status().running_jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cs2_system.status().running_jobs == ()


def test_hold_job_is_refused_like_any_job_when_the_system_cannot_run_it(cs2_system):
    from cs2sim.system.errors import JobRefused

    cs2_system.put_in("STANDBY")
    with pytest.raises(JobRefused):
        cs2_system.hold_job()


@pytest.mark.slow
def test_conftest_overrides_shape_cs2_system(tmp_path):
    """A user's conftest.py overrides cs2_cluster and cs2_boot_seconds; cs2_system follows."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "@pytest.fixture\n"
        "def cs2_cluster():\n"
        "    return {'systems': [{'name': 'lab-cs2', 'ip': '10.9.8.7',\n"
        "                         'execmode': 'WEIGHT_STREAMING'}]}\n"
        "@pytest.fixture\n"
        "def cs2_boot_seconds():\n"
        "    return 30\n"
    )
    (tmp_path / "test_override.py").write_text(
        "def test_it(cs2_system, cs2_cs):\n"
        "    assert (cs2_system.name, cs2_system.ip) == ('lab-cs2', '10.9.8.7')\n"
        "    assert cs2_system.active_mode == 'WEIGHT_STREAMING'\n"
        "    assert cs2_system.env['CS2_BOOT_SECONDS'] == '30'\n"
        "    assert 'lab-cs2 (10.9.8.7)' in cs2_cs('system status').check().output\n"
    )
    proc = subprocess.run(
        PYTEST,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed" in proc.stdout


def test_a_users_script_finds_cs_without_an_activated_venv(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = "/usr/bin:/bin"  # what a CI job has when nobody activated the venv
    script = tmp_path / "switch.sh"
    script.write_text(
        "set -e\ncs -c 'system standby --yes'\n"
        "cs -c 'config execmode setup weight-streaming'\ncs -c 'system activate'\n"
        "python -c 'import cs2sim'\ncommand -v csrun_wse python-ws >/dev/null\n"
    )
    with ThrowawaySystem(env=env) as system:
        result = system.run(["sh", str(script)])
        assert result.ok, result.combined
        assert system.active_mode == "WEIGHT_STREAMING"


def test_combined_output_keeps_the_order_of_both_streams(cs2_system):
    code = (
        "import sys, time\nfor i in range(3):\n    print(f'out {i}', flush=True)\n"
        "    time.sleep(0.2)\n    print(f'err {i}', file=sys.stderr, flush=True)\n"
        "    time.sleep(0.2)"
    )
    result = cs2_system.run([sys.executable, "-c", code])
    assert result.output == "out 0\nout 1\nout 2\n" and result.errors == "err 0\nerr 1\nerr 2\n"
    assert result.combined == "out 0\nerr 0\nout 1\nerr 1\nout 2\nerr 2\n"


def test_running_job_answers_at_once(cs2_system):
    assert cs2_system.running_job() is None
    with pytest.raises(AssertionError, match="no job was RUNNING within 0.2 s"):
        cs2_system.wait_for_running_job(timeout=0.2)
