"""Every exit code the product gives is in docs/launchers.md's table: each CsError class's code,
and the launchers' own (127 for a command csrun_cpu --alloc-node False cannot start)."""

from __future__ import annotations

import re
from pathlib import Path

from launch_helpers import run, script

import cs2sim.runtime.job.cs_run
import cs2sim.system.paths  # noqa: F401 - defines the exit-77 path refusals
from cs2sim.system.errors import CsError

DOC = Path(__file__).resolve().parents[2] / "docs" / "launchers.md"


def documented() -> set[str]:
    text = DOC.read_text().split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| (\d+\+?N?) \|", text, re.M))


def _classes(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _classes(sub)
    return out


def test_every_error_class_code_is_documented() -> None:
    codes = {str(c.exit_code) for c in _classes(CsError)}
    assert codes >= {"1", "2", "69", "75", "77"}
    assert codes <= documented(), codes - documented()
    assert {"0", "70", "127", "128+N", "130", "143"} <= documented()


def test_csrun_cpu_here_gives_127_for_a_command_it_cannot_start() -> None:
    res = run([script("csrun_cpu"), "--alloc-node", "False", "no-such-command-i28b"])
    assert res.returncode == 127
    assert res.stderr.strip().splitlines()[-1] == (
        "csrun_cpu: cannot run no-such-command-i28b: No such file or directory; check the command."
    )
    assert "127" in documented()
