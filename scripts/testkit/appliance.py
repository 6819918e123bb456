"""The Wafer-Scale Cluster in a test: a cluster management server on a throwaway system, and
`python run.py CSX` / `csctl` run as a user runs them.

    cluster = ApplianceCluster(system)          # system: a ThrowawaySystem (its own $CS2_HOME)
    model = system.model_copy("fc_mnist")
    res = cluster.run_csx(model, "-p", "configs/params_small.yaml", "--mode", "train",
                          "--num_csx", "2", "-o", "md", "--max_steps", "20")
    assert res.ok and cluster.jobs()[-1]["status"]["systems"] == ["cs2-1", "cs2-2"]
    cluster.csctl("cancel", "job", name).check()

The `cs2_appliance` fixture (plugin.py) gives one on the four-system example cluster. `close()`
stops the server (and with it any job still running); the system's own close removes the rest.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from cs2sim.scripts.testkit.result import CsResult
from cs2sim.scripts.testkit.system import ThrowawaySystem
from cs2sim.system import procfs

__all__ = ["ApplianceCluster", "SiteCluster", "shared_python", "wait_until"]

T = TypeVar("T")


def wait_until(
    ready: Callable[[], T | None], timeout: float = 60.0, what: str = "a condition"
) -> T:
    """Poll `ready()` until it returns something true; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


class ApplianceCluster:
    """A cluster server for `system` (started on first use, as the client does)."""

    def __init__(self, system: ThrowawaySystem) -> None:
        self.system = system
        self.home = Path(system.home)

    # --- the server ---------------------------------------------------------------------------
    def start(self) -> int:
        """Start the server (if none runs); its pid."""
        self.system.run([sys.executable, "-m", "cs2sim.scripts.cluster_server", "start"]).check()
        return self.pid()

    def pid(self) -> int:
        return int((self.home / "wsjob" / "server.pid").read_text())

    def running(self) -> bool:
        """Whether the server process runs (one that exited is not running, reaped or not)."""
        try:
            stat = procfs.read_stat(self.pid())
        except (OSError, ValueError):
            return False
        return stat is not None and not stat.ended

    def kill(self) -> None:
        """SIGKILL the server (a crash): its jobs' launches die with it."""
        os.kill(self.pid(), signal.SIGKILL)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the server, waiting for it to exit (SIGKILL after `timeout`)."""
        try:
            pid = self.pid()
        except (OSError, ValueError):
            return
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # ended once it exits: the server is no child of ours, so init reaps it, in its own
            # time (seconds under some inits), and a signal still reaches the zombie till then
            stat = procfs.read_stat(pid)
            if stat is None or stat.ended:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    # --- the user's commands ------------------------------------------------------------------
    def csctl(self, *argv: str, timeout: float = 120) -> CsResult:
        return self.system.run(
            [sys.executable, "-m", "cs2sim.scripts.csctl", *argv],
            timeout=timeout,
            label="csctl " + " ".join(argv),
        )

    def run_csx(self, model_dir: Path, *argv: str, timeout: float = 600) -> CsResult:
        """`python run.py CSX ARGV...` in `model_dir` (a copy of a Model Zoo model)."""
        return self.system.run(
            [sys.executable, str(Path(model_dir) / "run.py"), "CSX", *argv],
            cwd=model_dir,
            timeout=timeout,
            label="python run.py CSX " + " ".join(argv),
        )

    def start_csx(self, model_dir: Path, *argv: str) -> subprocess.Popen[str]:
        """The same in the background: a Popen (text pipes)."""
        return self.system.start(
            [sys.executable, str(Path(model_dir) / "run.py"), "CSX", *argv], cwd=model_dir
        )

    def jobs(self, *, all_states: bool = True) -> list[dict[str, Any]]:
        """`csctl get jobs [-a] -o json`: the jobs, oldest first."""
        res = self.csctl(
            "get",
            "jobs",
            *(["-a"] if all_states else []),
            "-o",
            "json",
            "--sort",
            "age",
            "--order",
            "desc",
        ).check()
        return list(json.loads(res.output)["jobs"])

    def job(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.csctl("get", "job", name, "-o", "json").check().output))

    def wait_for(self, kind: str, phase: str, timeout: float = 120) -> dict[str, Any]:
        """The newest job of `kind` (compile | execute) once it is in `phase`."""

        def ready() -> dict[str, Any] | None:
            mine = [j for j in self.jobs() if j["meta"]["type"] == kind]
            return mine[-1] if mine and mine[-1]["status"]["phase"] == phase else None

        return dict(wait_until(ready, timeout, f"a {kind} job {phase}"))


# --- a site server: root's, shared with OS users the test creates -----------------------------
def shared_python(where: Path) -> str | None:
    """An interpreter every OS user may run, with this one's packages: this one when its every
    directory lets others in, else a venv of the system's python of the same minor version made
    in `where` (world-readable) whose .pth adds this environment's site-packages; None when
    there is neither (a site server's jobs run as their users, who must exec the launchers)."""
    import sysconfig

    def others_may_run(path: str) -> bool:
        real = Path(os.path.realpath(path))
        return all(os.stat(p).st_mode & 0o001 for p in [real, *real.parents]) and bool(
            os.stat(real).st_mode & 0o001
        )

    if others_may_run(sys.executable):
        return sys.executable
    system_python = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    ours = sysconfig.get_paths()["purelib"]
    if not system_python.exists() or not others_may_run(str(system_python)):
        return None
    if not others_may_run(ours) or not os.stat(ours).st_mode & 0o004:
        return None  # this environment's packages are not theirs to read
    import subprocess

    venv = Path(where) / "python"
    subprocess.run(
        [str(system_python), "-m", "venv", "--without-pip", str(venv)],
        check=True,
        capture_output=True,
    )
    site = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    (site / "cs2sim_site.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    for p in [venv, *venv.rglob("*")]:
        if not p.is_symlink():
            p.chmod(0o755 if p.is_dir() else 0o644)
    return str(venv / "bin" / "python")


class SiteCluster(ApplianceCluster):
    """A site's cluster server: run as root (this process's user) with `python` (one every
    user may exec, see shared_python), its $CS2_HOME shared with the users' group; the users'
    commands run as them (their own groups, as `runuser -l` would give), from their own dirs.

        site = SiteCluster(system, python, server_env={"CS2_HEARTBEAT_SECONDS": "0.2"})
        site.share(group)                       # cs-store share GROUP, as root
        site.start()
        res = site.run_csx_as(user, model, *TRAIN, "--num_csx", "1")
    """

    def __init__(
        self, system: ThrowawaySystem, python: str, server_env: dict[str, str] | None = None
    ) -> None:
        super().__init__(system)
        self.python = python
        self.server_env = dict(server_env or {})

    def share(self, group: str) -> None:
        self.system.run([self.python, "-m", "cs2sim.scripts.store_service", "share", group]).check()

    def start(self) -> int:
        env = {**self.system.env, **self.server_env}
        env["PATH"] = f"{Path(self.python).parent}:{env.get('PATH', '')}"
        proc = subprocess.run(
            [self.python, "-m", "cs2sim.scripts.cluster_server", "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(f"the site server did not start: {proc.stderr.strip()}")
        return self.pid()

    def user_env(self, user: pwd.struct_passwd, home: Path) -> dict[str, str]:
        return {
            "CS2_HOME": str(self.home),
            "CS2_BOOT_SECONDS": "0",
            "PATH": f"{Path(self.python).parent}:/usr/bin:/bin",
            "HOME": str(home),
            "USER": user.pw_name,
            "LOGNAME": user.pw_name,
        }

    def start_as(
        self, user: pwd.struct_passwd, argv: list[str], cwd: Path
    ) -> subprocess.Popen[str]:
        """`argv` as `user` (initgroups, then setuid), entering `cwd` as them."""
        groups = os.getgrouplist(user.pw_name, user.pw_gid)

        def become() -> None:  # pragma: no cover - runs in the child
            os.setgroups(groups)
            os.setresgid(user.pw_gid, user.pw_gid, user.pw_gid)
            os.setresuid(user.pw_uid, user.pw_uid, user.pw_uid)
            os.chdir(cwd)

        proc = subprocess.Popen(
            argv,
            env=self.user_env(user, cwd),
            text=True,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=become,
        )
        self.system._processes.append(proc)  # stopped with the system, as its own are
        return proc

    def run_as(
        self, user: pwd.struct_passwd, argv: list[str], cwd: Path, timeout: float = 600
    ) -> CsResult:
        from cs2sim.scripts.testkit.procs import communicate

        label = f"{user.pw_name}$ " + " ".join(argv)
        proc = self.start_as(user, argv, cwd)
        out, err, both = communicate(proc, None, timeout, label)
        return CsResult(label, out, err, proc.returncode, both)

    def run_csx_as(
        self, user: pwd.struct_passwd, model_dir: Path, *argv: str, timeout: float = 600
    ) -> CsResult:
        return self.run_as(user, [self.python, "run.py", "CSX", *argv], model_dir, timeout)

    def start_csx_as(
        self, user: pwd.struct_passwd, model_dir: Path, *argv: str
    ) -> subprocess.Popen[str]:
        return self.start_as(user, [self.python, "run.py", "CSX", *argv], model_dir)

    def csctl_as(
        self, user: pwd.struct_passwd, cwd: Path, *argv: str, timeout: float = 120
    ) -> CsResult:
        return self.run_as(user, [self.python, "-m", "cs2sim.scripts.csctl", *argv], cwd, timeout)
