"""What the site-server tests share: OS users created for the test (unique uuid-tagged names,
removed afterwards), a two-system cluster in a directory they can reach, and root's site server
for them. Needs root, useradd/groupadd and an interpreter every user may run; the tests skip
with the reason otherwise."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from cs2sim.scripts.testkit.appliance import SiteCluster, shared_python
from cs2sim.scripts.testkit.launch import model_copy
from cs2sim.system.cluster import EXAMPLE_PATH

CAN = os.geteuid() == 0 and bool(shutil.which("useradd")) and bool(shutil.which("groupadd"))
WHY = "needs root and useradd/groupadd to create the OS users of a site server"
TRAIN = ["-p", "configs/params_small.yaml", "--mode", "train"]


def two_systems() -> dict[str, Any]:
    """The example cluster cut to two systems (a chief node wired to each)."""
    cluster = yaml.safe_load(EXAMPLE_PATH.read_text())
    cluster["systems"] = cluster["systems"][:2]
    cluster["swarmx"]["max_systems"] = 2
    for node in cluster["nodes"]:
        if node["role"] == "chief":
            node["count"] = 2
    cluster["site"]["gres_node"] = "chief-0,chief-1"
    return dict(cluster)


@contextmanager
def site_users(count: int) -> Iterator[tuple[str, list[pwd.struct_passwd]]]:
    """`count` fresh users whose SUPPLEMENTARY group is one fresh group (their primary group
    another fresh one): a server that dropped supplementary groups would lose the store."""
    tag = uuid.uuid4().hex[:6]
    group, primary = f"cs2s{tag}", f"cs2p{tag}"
    names = [f"cs2u{tag}{chr(ord('a') + i)}" for i in range(count)]
    for g in (group, primary):
        subprocess.run(["groupadd", g], check=True, capture_output=True)
    try:
        for name in names:
            subprocess.run(
                [
                    "useradd",
                    "-M",
                    "-N",
                    "-g",
                    primary,
                    "-G",
                    group,
                    "-s",
                    "/usr/sbin/nologin",
                    name,
                ],
                check=True,
                capture_output=True,
            )
        yield group, [pwd.getpwnam(n) for n in names]
    finally:
        for name in names:
            subprocess.run(["userdel", name], capture_output=True)
        for g in (group, primary):
            subprocess.run(["groupdel", g], capture_output=True)


def user_dir(top: Path, user: pwd.struct_passwd, mode: int = 0o700) -> Path:
    """The user's own directory under `top` (theirs, `mode`)."""
    path = top / "users" / user.pw_name
    path.mkdir(parents=True)
    os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(mode)
    (top / "users").chmod(0o755)
    return path


def give(path: Path, user: pwd.struct_passwd) -> None:
    """chown -R path to the user."""
    for p in [path, *path.rglob("*")]:
        os.chown(p, user.pw_uid, user.pw_gid, follow_symlinks=False)


def user_model(top: Path, user: pwd.struct_passwd) -> Path:
    """A copy of fc_mnist in the user's own directory, theirs."""
    home = top / "users" / user.pw_name
    model = model_copy(home, "fc_mnist")
    give(model, user)
    return model


@contextmanager
def site(
    cs2_systems: Any, count: int, server_env: dict[str, str] | None = None
) -> Iterator[tuple[SiteCluster, Path, list[pwd.struct_passwd], str]]:
    """root's site server on two systems, its store shared with `count` fresh users' group:
    (site, top directory, users, group). The server is not started yet."""
    top = Path(tempfile.mkdtemp(prefix="cs2sim-site-"))
    top.chmod(0o755)
    python = shared_python(top)
    if python is None:
        shutil.rmtree(top, ignore_errors=True)
        import pytest

        pytest.skip("no interpreter every OS user may run (the jobs run as their users)")
    system = cs2_systems(cluster=two_systems(), root=top)
    system.root.chmod(0o711)
    cluster = SiteCluster(system, python, server_env)
    try:
        with site_users(count) as (group, users):
            for user in users:
                user_dir(top, user)
            cluster.share(group)
            try:
                yield cluster, top, users, group
            finally:
                cluster.close()
                _stop_store_service(system.home)
                for user in users:
                    shutil.rmtree(Path(tempfile.gettempdir()) / f"cs2sim-{user.pw_uid}", True)
    finally:
        system.close()
        shutil.rmtree(top, ignore_errors=True)


def _stop_store_service(home: Path) -> None:
    import signal

    from cs2sim.system.store_remote import service_pid

    pid = service_pid(home)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
