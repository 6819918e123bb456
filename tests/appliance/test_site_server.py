"""A site server: root runs the cluster server, its store shared (`cs-store share GROUP`) with
OS users created here, who reach it and run jobs to the end, each job as its own user with its
own groups, every file it leaves theirs. Needs root and useradd; skipped otherwise."""

from __future__ import annotations

import grp
import os
import pwd
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
        # a user outside the store's group is told at once what to do
        outsider = cluster.csctl_as(pwd.getpwnam("nobody"), top, "get", "jobs")
        assert outsider.exit_code != 0
        assert outsider.errors.strip() == (
            f"error: you may not reach the cluster server of {cluster.home} (Permission "
            "denied); ask root to share it with your group (`cs-store share GROUP`), or set "
            "CS2_HOME to a home of your own."
        ), outsider.errors

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

        # the server's directory follows the store's sharing both ways
        py = cluster.python
        cluster.system.run([py, "-m", "cs2sim.scripts.store_service", "unshare"]).check()
        assert stat.S_IMODE(wsjob.stat().st_mode) == 0o700
        cluster.share(group)
        assert stat.S_IMODE(wsjob.stat().st_mode) == 0o750
        assert wsjob.stat().st_gid == grp.getgrnam(group).gr_gid


def _records(home: Path) -> list[dict]:
    """The server's job records, as its book keeps them (times as floats)."""
    import sqlite3

    db = sqlite3.connect(f"file:{home / 'wsjob' / 'server.db'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT id, kind, user, uid, created, started, ended, phase, spec FROM wsjobs"
        ).fetchall()
    finally:
        db.close()
    keys = ("id", "kind", "user", "uid", "created", "started", "ended", "phase", "spec")
    return [dict(zip(keys, r, strict=True)) for r in rows]


HEARTBEAT_S = 0.2  # the server's heartbeat period in this test (its knob)


def test_three_users_queue_behind_each_other_on_two_systems_and_finish_as_themselves(
    cs2_systems,
):
    env = {"CS2_HEARTBEAT_SECONDS": f"{HEARTBEAT_S:g}"}
    with site(cs2_systems, 3, env) as (cluster, top, users, group):
        cluster.start()
        models = {u.pw_name: user_model(top, u) for u in users}
        flags = [*TRAIN, "--compile_dir", "compiles"]
        # each user's compile first (the three side by side): the nine jobs then find it cached
        compiles = [
            cluster.start_csx_as(u, models[u.pw_name], *flags, "-o", "md0", "--compile_only")
            for u in users
        ]
        for proc in compiles:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, out + err
        system = cluster.system
        held = [system.hold_job(name=n) for n in ("cs2-1", "cs2-2")]  # both systems busy
        clients = [
            (
                u,
                k,
                cluster.start_csx_as(
                    u,
                    models[u.pw_name],
                    *flags,
                    "-o",
                    f"md{k}",
                    "--num_csx",
                    "1",
                    "--max_steps",
                    "10",
                ),
            )
            for k in (1, 2, 3)
            for u in users
        ]

        def queued() -> list[dict]:
            return [r for r in _records(cluster.home) if r["kind"] == "execute"]

        wait_until(
            lambda: len(queued()) == 9 and all(r["phase"] == "QUEUED" for r in queued()),
            timeout=300,
            what="nine execute jobs QUEUED",
        )
        # the queue lasts at least ten heartbeat periods by the server's own clock
        from cs2sim.system.appliance.client import connect

        def waited() -> bool:
            conn = connect(cluster.home)
            try:
                now = conn.call("get_jobs")["now"]
            finally:
                conn.close()
            return now - max(r["created"] for r in queued()) >= 10 * HEARTBEAT_S + 0.5

        wait_until(waited, timeout=120, what="ten heartbeat periods of queueing")
        for job in held:
            system.release_job(job)
        for user, k, proc in clients:
            out, err = proc.communicate(timeout=900)
            assert proc.returncode == 0, f"{user.pw_name} md{k}: {out}{err}"

        jobs = queued()
        assert len(jobs) == 9 and {r["phase"] for r in jobs} == {"SUCCEEDED"}
        by_user = {u.pw_name: [r for r in jobs if r["uid"] == u.pw_uid] for u in users}
        for user in users:
            mine = by_user[user.pw_name]
            assert len(mine) == 3 and {r["user"] for r in mine} == {user.pw_name}
            # queued at least ten heartbeat periods, from the records' own times
            assert max(r["started"] - r["created"] for r in mine) >= 10 * HEARTBEAT_S
        # two systems for nine jobs: each user has a job that waited for another user's to end
        for user in users:
            others_ended = [r["ended"] for r in jobs if r["uid"] != user.pw_uid]
            assert any(r["started"] >= min(others_ended) for r in by_user[user.pw_name]), (
                user.pw_name
            )
        # every file the jobs left is its user's: model dirs with their checkpoints, logs
        for user in users:
            model = models[user.pw_name]
            for k in (1, 2, 3):
                md = model / f"md{k}"
                assert list(md.rglob("*checkpoint*")) or list(md.rglob("*.mdl")), md
                assert _owned(md, user.pw_uid) == []
            for r in by_user[user.pw_name]:
                log_dir = cluster.home / "wsjob" / "workdir" / "job-operator" / r["id"]
                assert _owned(log_dir, user.pw_uid) == [] and _private(log_dir) == []
            tasks = Path(tempfile.gettempdir()) / f"cs2sim-{user.pw_uid}" / "slurm"
            assert _owned(tasks, user.pw_uid) == [] and _private(tasks) == []
            assert os.stat(tasks).st_uid == user.pw_uid
