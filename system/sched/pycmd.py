"""Which commands a launcher can run in a forked, preloaded interpreter instead of a cold exec.

`python`, `python3`, `python-ws`, `python-pt` (Cerebras' reference implementations and Model Zoo,
docs/sources.md) or this interpreter's own path, followed by a script, `-c CODE` or `-m MODULE`: the
task is this Python, so it can be a fork of the launcher that runs the code with runpy (sharing the
launcher's already-imported modules copy-on-write) instead of a fresh interpreter start-up (~50 ms
CPU and ~10 MB each; 98 of them would not start in 2 s on 2 cores). Anything else (another program,
interpreter options such as `-u`, an interactive `python`) is exec'ed for real.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

__all__ = ["PyCommand", "FLOW_WORDS", "classify", "exec_argv"]

FLOW_ENV = "CS2SIM_FLOW"  # runtime/job/flow.py reads it; system/ may not import runtime
# The job's secret (hex), a fresh one per job in every task's environment: the chief's channel
# (runtime/job/channel.py) admits only peers that prove they hold it. A process's environment
# is readable by its own user only (/proc/<pid>/environ is 0400).
SECRET_ENV = "CS2SIM_JOB_SECRET"


def secret_env() -> dict[str, str]:
    """The environment entry that gives one job its secret."""
    import secrets

    return {SECRET_ENV: secrets.token_hex(32)}


FLOW_WORDS = {"python": "", "python3": "", "python-ws": "ws", "python-pt": "pt"}


@dataclass(frozen=True)
class PyCommand:
    """A Python command run in-process: kind "script" | "code" | "module", target, argv tail."""

    kind: str
    target: str
    args: tuple[str, ...]
    flow: str  # "" | "ws" | "pt": the CS2SIM_FLOW the wrapper word sets

    @property
    def argv0(self) -> str:
        return {"script": self.target, "code": "-c", "module": self.target}[self.kind]


def _is_python(word: str) -> bool:
    if word in FLOW_WORDS:
        return True
    if "/" not in word:
        return False
    try:
        return os.path.realpath(word) == os.path.realpath(sys.executable)
    except OSError:
        return False


def flow_of(word: str) -> str:
    """The flow a command word selects ("" for plain python or anything else)."""
    return FLOW_WORDS.get(os.path.basename(word), "")


def classify(argv: tuple[str, ...]) -> PyCommand | None:
    """The in-process form of `argv`, or None when it must be exec'ed."""
    if len(argv) < 2 or not _is_python(argv[0]):
        return None
    flow = flow_of(argv[0])
    first = argv[1]
    if first == "-c" and len(argv) >= 3:
        return PyCommand("code", argv[2], argv[3:], flow)
    if first == "-m" and len(argv) >= 3:
        return PyCommand("module", argv[2], argv[3:], flow)
    if first.startswith("-"):
        return None
    return PyCommand("script", first, argv[2:], flow)


def exec_argv(argv: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """What to exec for `argv`: python words become this interpreter (+ the flow variable)."""
    word = argv[0] if argv else ""
    if word in FLOW_WORDS:
        extra = {FLOW_ENV: FLOW_WORDS[word]} if FLOW_WORDS[word] else {}
        return [sys.executable, *argv[1:]], extra
    return list(argv), {}
