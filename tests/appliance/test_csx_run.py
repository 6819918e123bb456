"""`python run.py CSX` end to end on the four-system example cluster: the client's lines in the
table's order, the execute job on the systems csctl names, losses equal to the host run's, and a
second run that finds the compile cached and submits no compile job."""

from __future__ import annotations

import sys
import zipfile

import pytest
from appliance_helpers import TRAIN, keys_of, losses, messages

from cs2sim.runtime.cli.appliance_lines import LINES

pytestmark = pytest.mark.slow  # each test runs whole wsjobs through a cluster server


def test_two_systems_lines_in_order_losses_equal_host_and_cached_compile(cs2_appliance):
    system = cs2_appliance.system
    model = system.model_copy("fc_mnist")
    res = cs2_appliance.run_csx(
        model, *TRAIN, "--num_csx", "2", "--max_steps", "100", "--job_labels", "name=two"
    )
    assert res.exit_code == 0, res.combined
    keys = keys_of(res.output)
    order = [line.key for line in LINES]
    assert [order.index(k) for k in keys] == sorted(order.index(k) for k in keys)  # table order
    expected = [
        "effective_batch",
        "compiling",
        "compile_init",
        "compile_id",
        "compile_ingress",
        "compile_written",
        "compile_ok",
        "programming",
        "execute_init",
        "execute_id",
        "ingress_ready",
        "preparing",
        "weights",
        "weights_done",
        "finalizing",
        "programming_wait",
        "programming_done",
        "network",
        "priming",
        "streaming",
        "staging_done",
        "beginning",
        "train",
        "train",
        "checkpoint_saving",  # params_small: checkpoint_steps 100
        "checkpoint_saved",
        "completed",
        "processed",
    ]
    assert keys == expected, messages(res.output)
    assert "Preparing to execute using 2 CSX" in res.output
    assert "Processed 6400 sample(s) in" in res.output  # 100 steps of 64

    jobs = cs2_appliance.jobs()
    assert [j["meta"]["type"] for j in jobs] == ["compile", "execute"]
    assert all(j["status"]["phase"] == "SUCCEEDED" for j in jobs)
    assert jobs[1]["status"]["systems"] == ["cs2-1", "cs2-2"]
    table = cs2_appliance.csctl("get", "jobs", "-a").check().output
    head, *rows = table.splitlines()
    assert head.split() == [
        "NAME",
        "AGE",
        "DURATION",
        "PHASE",
        "SYSTEMS",
        "USER",
        "LABELS",
        "DASHBOARD",
    ]
    row = next(r.split() for r in rows if r.startswith(jobs[1]["meta"]["name"]))
    assert row[3:5] == ["SUCCEEDED", "cs2-1,cs2-2"] and row[6] == "name=two"

    host = system.run(
        [sys.executable, str(model / "run.py"), "CPU", *TRAIN[:-1], "host", "--max_steps", "100"],
        cwd=model,
    )
    assert host.exit_code == 0, host.combined
    assert losses(res.output) == losses(host.combined) != {}

    again = cs2_appliance.run_csx(model, *TRAIN, "--num_csx", "2", "--max_steps", "100")
    assert again.exit_code == 0, again.combined
    keys = keys_of(again.output)
    assert keys[:5] == ["effective_batch", "compiling", "cached", "programming", "execute_init"]
    compile_hash = next(m for m in messages(res.output) if m.startswith("Compile artifacts"))
    assert compile_hash.rsplit(" ", 1)[1] in messages(again.output)[2]
    assert [j["meta"]["type"] for j in cs2_appliance.jobs()] == ["compile", "execute", "execute"]

    # the execute job's logs, every task's own and (-c) its compile artifacts, in one zip
    name = jobs[1]["meta"]["name"]
    cs2_appliance.csctl("log-export", name, "-c", "-p", str(system.root)).check()
    with zipfile.ZipFile(system.root / f"log-export-{name}.zip") as z:
        names = z.namelist()
        base = f"log-export-{name}/"
        assert {base + "launch.log", base + "job.json", base + "compile/COMPLETE"} <= set(names)
        tasks = [n for n in names if n.startswith(base + "tasks/task-")]
        assert len(tasks) >= 3  # chief, coordinator, input worker(s)
        assert "| Train Device=CSX, Step=100" in z.read(base + "launch.log").decode()


def test_compile_only_runs_a_compile_job_alone_and_then_finds_it_cached(cs2_appliance):
    model = cs2_appliance.system.model_copy("fc_mnist")
    argv = [*TRAIN, "--compile_only", "--compile_dir", "compiles", "--job_labels", "stage=c"]
    first = cs2_appliance.run_csx(model, *argv)
    assert first.exit_code == 0, first.combined
    assert keys_of(first.output) == [
        "effective_batch",
        "compiling",
        "compile_init",
        "compile_id",
        "compile_ingress",
        "compile_written",
        "compile_ok",
    ]
    assert list((model / "compiles").glob("cs_*/COMPLETE"))
    second = cs2_appliance.run_csx(model, *argv)
    assert keys_of(second.output) == ["effective_batch", "compiling", "cached"]
    jobs = cs2_appliance.jobs()
    assert [(j["meta"]["type"], j["meta"]["labels"]) for j in jobs] == [("compile", {"stage": "c"})]
