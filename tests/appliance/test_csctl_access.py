"""csctl from another process: get / label / log-export / cancel on one's own job; another OS
user lists jobs but is refused someone else's (and the attempt is audited)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "reliability"))
from rel_helpers import other_user, run_as
from test_csx_queue import _submit

from cs2sim.scripts.testkit.appliance import wait_until
from cs2sim.system.appliance.client import RequestFailed, connect

OTHER = other_user()


def test_own_job_get_label_export_cancel_and_another_user_is_refused(shared_cluster, tmp_path):
    cluster, system = shared_cluster, shared_cluster.system
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")  # the job stays QUEUED
    cluster.start()
    conn = connect(system.home)
    name = _submit(conn, model, system, "p2", "mine")
    conn.close()

    assert (
        cluster.csctl("label", "job", name, "team=ml", "name-").check().output
        == f"job/{name} was patched\n"
    )
    job = cluster.job(name)
    assert job["meta"]["labels"] == {"team": "ml"} and job["status"]["phase"] == "QUEUED"
    assert (
        cluster.csctl("get", "jobs", "-l", "team=ml", "-o", "json")
        .check()
        .json()["jobs"][0]["meta"]["name"]
        == name
    )
    assert (
        cluster.csctl("get", "jobs", "-l", "team=other", "-o", "json").check().json()["jobs"] == []
    )
    exported = cluster.csctl("log-export", name, "-p", str(tmp_path)).check()
    zip_path = tmp_path / f"log-export-{name}.zip"
    assert str(zip_path) in exported.output
    with zipfile.ZipFile(zip_path) as z:
        assert f"log-export-{name}/job.json" in z.namelist()

    if OTHER is not None:

        def as_other():
            c = connect(system.home)
            listed = [j["meta"]["name"] for j in c.call("get_jobs")["jobs"]]
            refused = {}
            for op, args in (
                ("cancel", {}),
                ("label", {"set": {"x": "y"}}),
                ("log_export", {}),
                ("get_job", {}),
            ):
                try:
                    c.call(op, name=name, **args)
                    refused[op] = None
                except RequestFailed as e:
                    refused[op] = (str(e), e.exit_code)
            return listed, refused

        listed, refused = run_as(OTHER, as_other, {"CS2_HOME": str(system.home)})
        assert listed == [name]
        for op, answer in refused.items():
            assert answer is not None, op
            text, code = answer
            assert code == 77 and text.startswith(f"Permission denied: {name} belongs to root")
        denied = [e for e in system.audit() if e.outcome == "denied"]
        assert {e.user for e in denied} == {OTHER.pw_name}
        assert {e.command.split()[1] for e in denied} == {
            "cancel",
            "label",
            "log_export",
            "get_job",
        }

    assert cluster.csctl("cancel", "job", name).check().output == "Job canceled successfully\n"
    job = cluster.job(name)
    assert job["status"]["phase"] == "CANCELLED" and "csctl cancel job" in job["status"]["reason"]
    again = cluster.csctl("cancel", "job", name)
    assert again.exit_code == 1 and "already ended (CANCELLED)" in again.errors
    system.release_job(held)


@pytest.mark.skipif(OTHER is None, reason="needs root to act as another OS user")
def test_two_users_jobs_queue_by_priority_then_age(shared_cluster):
    cluster, system = shared_cluster, shared_cluster.system
    model = system.model_copy("fc_mnist")
    held = system.hold_job(name="cs2-1")  # every window of four systems includes it
    cluster.start()

    def submit_as_other(priority: str, name: str) -> str:
        return str(
            run_as(
                OTHER,
                lambda: _submit(connect(system.home), model, system, priority, name),
                {"CS2_HOME": str(system.home)},
            )
        )

    conn = connect(system.home)
    ids = {
        "a": _submit(conn, model, system, "p2", "a"),  # root, p2, oldest
        "b": submit_as_other("p2", "b"),  # nobody, p2
        "c": submit_as_other("p1", "c"),  # nobody, p1: first
        "d": _submit(conn, model, system, "p3", "d"),
    }  # root, p3: last
    try:
        # the server's dispatcher writes a job's note on its next pass after the submission
        notes = wait_until(
            lambda: (n := conn.call("get_jobs")["notes"]).keys() >= set(ids.values()) and n,
            what="a queue note for each of the four jobs",
        )
    except BaseException:
        conn.close()
        raise
    assert notes[ids["c"]].startswith("current job is top of queue")
    assert notes[ids["a"]] == "1 execute job(s) queued before current job"
    assert notes[ids["b"]] == "2 execute job(s) queued before current job"
    assert notes[ids["d"]] == "3 execute job(s) queued before current job"
    rows = [r.split() for r in cluster.csctl("get", "jobs").check().output.splitlines()[1:]]
    assert [(r[0], r[5]) for r in rows] == [
        (ids["c"], OTHER.pw_name),
        (ids["a"], "root"),
        (ids["b"], OTHER.pw_name),
        (ids["d"], "root"),
    ]
    for job_id in ids.values():  # the admin (the server's own user) may cancel anyone's
        conn.call("cancel", name=job_id)
    conn.close()
    system.release_job(held)
