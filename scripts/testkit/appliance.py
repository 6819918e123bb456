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
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cs2sim.scripts.testkit.result import CsResult
from cs2sim.scripts.testkit.system import ThrowawaySystem
from cs2sim.system import procfs

__all__ = ["ApplianceCluster", "wait_until"]


def wait_until(ready: Callable[[], Any], timeout: float = 60.0, what: str = "a condition") -> Any:
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

    def start_csx(self, model_dir: Path, *argv: str) -> Any:
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
