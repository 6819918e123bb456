"""`jobs show N` (one job in detail), `jobs log N [--task K] [--tail N] [--follow]` over the task
logs, `jobs show --watch`, and `jobs cancel` of a job that does not exist (exit 1, not a usage
error); in process (the dispatcher, `cs -c`, the console), after a real csrun_wse launch, and
`--watch` until Ctrl-C on a terminal under pexpect."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from shell_helpers import console, cs, err, make_context, out, shell_env

from cs2sim.csshell.dispatch import run_line
from cs2sim.system.sched import queue
from cs2sim.system.sched.request import Component, JobRequest
from cs2sim.system.store import Store


def submit(store: Store) -> int:
    nodes = queue.cluster_nodes(store)
    req = JobRequest(
        (Component(1, 2, 1), Component(1, 1, 1)), ("python", "run.py", "CSX"), name="gpt"
    )
    return queue.submit(store, req, user="alice", nodes=nodes)


def write_logs(home: Path, job: int, logs: dict[int, str]) -> Path:
    folder = home / "slurm" / str(job)
    folder.mkdir(parents=True, exist_ok=True)
    for k, text in logs.items():
        (folder / f"task-{k}.log").write_text(text)
    return folder


def run(store: Store, line: str) -> tuple[int, str, str]:
    ctx = make_context(store)
    code = run_line(ctx, line)
    return code, out(ctx), err(ctx)


def test_jobs_show_n_has_command_user_nodes_per_role_times_and_logs(
    store: Store, home: Path
) -> None:
    job = submit(store)
    write_logs(home, job, {0: "a\n", 1: "b\n"})
    code, text, _ = run(store, f"jobs show {job}")
    assert code == 0
    fields = dict(line.split(" : ", 1) for line in text.splitlines())
    fields = {k.strip(): v for k, v in fields.items()}
    assert fields["Job"] == f"{job} (gpt)"
    assert fields["State"].startswith("RUNNING for ")
    assert fields["User"] == "alice" and fields["Command"] == "python run.py CSX"
    assert fields[f"Nodes {job}+0"].endswith(" (1 node(s) x 2 task(s): chief + streamers)")
    assert fields[f"Nodes {job}+1"].endswith("coordinator)")
    assert "2 task log(s)" in fields["Logs"]
    assert fields["Exit code"] == "-"
    code, text, _ = run(store, f"jobs show {job} | display json")
    data = json.loads(text)
    assert data["id"] == job and data["roles"] == ["chief + streamers", "coordinator"]
    assert len(data["logs"]) == 2


def test_jobs_log_all_tasks_labelled_one_task_plain_and_tail(store: Store, home: Path) -> None:
    job = submit(store)
    write_logs(home, job, {0: "c1\nc2\nc3\n", 2: "w1\n"})
    assert run(store, f"jobs log {job}")[1] == "0: c1\n0: c2\n0: c3\n2: w1\n"
    assert run(store, f"jobs log {job} --task 0 --tail 2")[1] == "c2\nc3\n"
    assert run(store, f"jobs log {job} --tail 1")[1] == "0: c3\n2: w1\n"
    code, _, error = run(store, f"jobs log {job} --task 7")
    assert code == 1 and "has no log of task 7 (task logs: 0, 2)" in error


def test_jobs_log_tail_of_a_long_log_reads_its_end(store: Store, home: Path) -> None:
    job = submit(store)
    write_logs(home, job, {0: "".join(f"line {i}\n" for i in range(100_000))})
    assert run(store, f"jobs log {job} --tail 3")[1] == "line 99997\nline 99998\nline 99999\n"


def test_jobs_log_follow_prints_appended_lines_until_the_job_ends(store: Store, home: Path) -> None:
    job = submit(store)
    folder = write_logs(home, job, {0: "start\n"})
    ctx = make_context(store)
    done = threading.Event()
    result: list[int] = []

    def follow() -> None:
        result.append(run_line(ctx, f"jobs log {job} --task 0 --follow"))
        done.set()

    thread = threading.Thread(target=follow)
    thread.start()
    with open(folder / "task-0.log", "a") as f:
        f.write("step 1\n")
        f.flush()
        f.write("step 2\n")
    assert not done.wait(0.5)  # the job runs: still following
    queue.finish(store, job, "COMPLETED", 0, queue.cluster_nodes(store))
    assert done.wait(10)
    thread.join()
    assert result == [0]
    assert out(ctx) == "start\nstep 1\nstep 2\n"


def test_no_such_job_is_not_a_usage_error(store: Store) -> None:
    for line in ("jobs cancel 99", "jobs show 99", "jobs log 99"):
        code, _, error = run(store, line)
        assert code == 1, line
        assert error.startswith("error: No job 99"), error
    assert run(store, "jobs cancel x")[0] == 2  # not a job id at all: usage


def test_cancelling_a_queued_job_does_not_say_its_nodes_are_free(store: Store) -> None:
    nodes = queue.cluster_nodes(store)
    whole = JobRequest((Component(len(nodes), 1, 1),), ("python", "run.py"), name="big")
    queue.submit(store, whole, user="root", nodes=nodes)
    queued = queue.submit(store, whole, user="root", nodes=nodes)
    code, text, _ = run(store, f"jobs cancel {queued}")
    assert code == 0
    assert "nodes are free" not in text and "no nodes were held" in text


def test_jobs_show_n_and_log_after_a_real_launch(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = shell_env(home)
    script = "import os; print('task', os.environ['SLURM_PROCID'])"
    launch = subprocess.run(
        [sys.executable, "-m", "cs2sim.scripts.csrun_wse", "python", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert launch.returncode == 0, launch.stderr
    _, shown, _ = cs(capsys, "-c", "jobs show 1")
    assert "COMPLETED" in shown and "Exit code : 0" in shown
    code, logged, stderr = cs(capsys, "-c", "jobs log 1 --task 0")
    assert code == 0 and logged == "task 0\n", stderr


def test_jobs_show_n_and_log_in_the_console(store: Store) -> None:
    job = submit(store)
    write_logs(store.home, job, {0: "loss 1.5\nloss 1.2\n", 1: "streamer up\n"})
    keys = f"jobs show {job}\rjobs log {job} | match loss\rjobs log {job} --task 1\r"
    code, ctx = console(store, keys, history=False)
    assert code == 0 and err(ctx) == ""
    shown, logged = out(ctx).split("0: loss 1.5\n")
    assert "Command   : python run.py CSX" in shown and "chief + streamers" in shown
    assert logged == "0: loss 1.2\nstreamer up\n"  # the match kept task 0's loss lines only


def test_jobs_show_watch_redraws_until_ctrl_c(spawn, home: Path) -> None:
    store = Store.open(home)
    try:
        job = submit(store)
    finally:
        store.close()
    sh = spawn()
    sh.child.sendline("jobs show --watch")
    sh.expect("Every 2 s: jobs show")
    sh.expect(f"{job}+0")
    sh.expect("Every 2 s: jobs show")  # drawn again
    sh.send("\x03")
    sh.expect("Stopped watching.")
    sh.prompt()
    sh.run("jobs show --watch --output-format=json", "--watch redraws a table")
