"""A site server: root runs the cluster server, its store shared (`cs-store share GROUP`) with
OS users created here, who reach it and run jobs to the end, each job as its own user with its
own groups, every file it leaves theirs. Needs root and useradd; skipped otherwise."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from site_helpers import CAN, TRAIN, WHY, site, user_model

from cs2sim.scripts.testkit.appliance import wait_until

pytestmark = [pytest.mark.skipif(not CAN, reason=WHY), pytest.mark.slow]


def _owned(path: Path, uid: int) -> list[str]:
    """Every file and directory under `path` (itself included) NOT owned by `uid`."""
    return [str(p) for p in [path, *path.rglob("*")] if p.lstat().st_uid != uid]


def _private(path: Path) -> list[str]:
    """Every entry under `path` others (group or world) may read."""
    return [
        f"{p} {stat.S_IMODE(p.lstat().st_mode):04o}"
        for p in [path, *path.rglob("*")]
        if not p.is_symlink() and p.lstat().st_mode & 0o077
    ]


def test_a_member_of_the_shared_store_runs_a_job_to_the_end_through_roots_server(cs2_systems):
    with site(cs2_systems, 1) as (cluster, top, users, group):
        member = users[0]
        model = user_model(top, member)

        # no server yet: the member cannot start one in root's home, and is told so at once
        early = cluster.csctl_as(member, model, "get", "jobs")
        assert early.exit_code != 0
        assert early.errors.strip().splitlines()[-1] == (
            f"error: no cluster server runs for {cluster.home}, and only root may start one "
            "there; ask them to (`cs-cluster-server start`), or set CS2_HOME to a home of "
            "your own."
        ), early.errors
        cluster.start()
        wsjob = cluster.home / "wsjob"
        assert wsjob.stat().st_gid == cluster.home.stat().st_gid  # the store's group
        assert stat.S_IMODE(wsjob.stat().st_mode) & 0o050 == 0o050
        assert stat.S_IMODE((wsjob / "server.log").stat().st_mode) == 0o600

        res = cluster.run_csx_as(
            member, model, *TRAIN, "-o", "md", "--num_csx", "1", "--max_steps", "10"
        )
        assert res.exit_code == 0, res.combined
        jobs = cluster.jobs()
        assert {(j["meta"]["type"], j["status"]["phase"]) for j in jobs} == {
            ("compile", "SUCCEEDED"),
            ("execute", "SUCCEEDED"),
        }
        assert {j["spec"]["user"]["uid"] for j in jobs} == {member.pw_uid}
        assert _owned(model, member.pw_uid) == []
        for job in jobs:
            log_dir = Path(job["status"]["logPath"])
            assert _owned(log_dir, member.pw_uid) == [] and _private(log_dir) == []
        execute = next(j for j in jobs if j["meta"]["type"] == "execute")
        tasks = Path(tempfile.gettempdir()) / f"cs2sim-{member.pw_uid}" / "slurm"
        task_dir = tasks / execute["status"]["schedulerJob"]
        assert list(task_dir.glob("task-*.log"))
        assert _owned(task_dir, member.pw_uid) == [] and _private(task_dir) == []

        exported = cluster.csctl_as(member, model, "log-export", execute["meta"]["name"])
        assert exported.exit_code == 0, exported.combined
        zip_path = model / f"log-export-{execute['meta']['name']}.zip"
        assert zip_path.stat().st_uid == member.pw_uid
