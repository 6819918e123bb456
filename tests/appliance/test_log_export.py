"""`csctl log-export` as the real tool has it: --num-lines, --tasks, --timeout; every task's log
in the archive, the input workers' included; one cap for the whole archive; a missing -p
directory named in one sentence."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path

import pytest
from appliance_helpers import TRAIN


@pytest.mark.slow
def test_log_export_tasks_num_lines_cap_and_a_missing_directory(cs2_appliance, tmp_path):
    model = cs2_appliance.system.model_copy("fc_mnist")
    argv = [*TRAIN, "--num_csx", "1", "--max_steps", "10", "--num_workers_per_csx", "2"]
    argv += ["--compile_dir", "compiles"]
    res = cs2_appliance.run_csx(model, *argv)
    assert res.exit_code == 0, res.combined
    name = cs2_appliance.jobs()[-1]["meta"]["name"]
    job = cs2_appliance.job(name)
    base = f"log-export-{name}"
    zip_path = tmp_path / f"{base}.zip"

    def export(*flags: str) -> dict[str, bytes]:
        cs2_appliance.csctl("log-export", name, "-p", str(tmp_path), *flags).check()
        with zipfile.ZipFile(zip_path) as z:
            return {n.removeprefix(base + "/"): z.read(n) for n in z.namelist()}

    # the job's logs are its user's alone: 0700 directories, 0600 files
    log_dir = Path(job["status"]["logPath"])
    task_dir = cs2_appliance.home / "slurm" / job["status"]["schedulerJob"]
    for d in (log_dir, task_dir):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in d.iterdir()}
        assert modes and set(modes.values()) == {0o600}, modes

    whole = export()
    replicas = [r["name"].removeprefix(name + "-") for r in job["status"]["replicas"]]
    assert replicas[-2:] == ["worker-0", "worker-1"]
    tasks = {n: data for n, data in whole.items() if n.startswith("tasks/")}
    assert len(tasks) == len(replicas)
    workers = [tasks[f"tasks/task-{i}.log"] for i in (len(replicas) - 2, len(replicas) - 1)]
    for data in workers:  # the input workers say what they did
        assert b"streaming batches" in data and b"done (exit code 0)" in data

    only = export("--tasks", "worker-1,chief-0")
    assert sorted(n for n in only if n.startswith("tasks/")) == [
        "tasks/task-0.log",
        f"tasks/task-{len(replicas) - 1}.log",
    ]
    tail = export("--num-lines", "2")
    assert tail["launch.log"].count(b"\n") == 2
    assert whole["launch.log"].endswith(tail["launch.log"])
    assert whole["launch.log"].count(b"\n") > 2

    bad = cs2_appliance.csctl("log-export", name, "--tasks", "worker-7", "-p", str(tmp_path))
    assert bad.exit_code == 2 and bad.errors.strip().splitlines()[-1] == (
        "error: found invalid task(s): ['worker-7']. Please use `csctl -d2 get job` to "
        "check the tasks"
    )
    missing = cs2_appliance.csctl("log-export", name, "-p", str(tmp_path / "missing"))
    assert missing.exit_code == 1 and missing.errors.strip() == (
        f"error: the export's directory {tmp_path / 'missing'} does not exist or is not a "
        "directory; create it or pass another with -p."
    )
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind

    # one cap for the whole archive: a compile directory over it is refused from its sizes
    compiled = next((model / "compiles").glob("cs_*"))
    with open(compiled / "huge.bin", "wb") as f:
        f.truncate(70 * 1024 * 1024)  # sparse: nothing written to disk
    over = cs2_appliance.csctl("log-export", name, "-c", "-p", str(tmp_path))
    assert over.exit_code == 1
    assert "the export would hold 70." in over.errors and "over the cap of 64 MiB" in over.errors
    assert not [n for n in export() if n.startswith("compile/")]  # without -c it is small
