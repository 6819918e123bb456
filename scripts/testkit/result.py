"""`CsResult`: one finished `cs` (or launcher) process as a test wants to see it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["CsResult", "plain"]

# CSI sequences, charset selections, and the carriage returns a terminal adds
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r")


def plain(text: str) -> str:
    """Terminal output without escape codes and carriage returns."""
    return _ESCAPES.sub("", text)


@dataclass(frozen=True)
class CsResult:
    """The output (stdout), errors (stderr) and exit status of one command."""

    command: str
    output: str
    errors: str
    exit_code: int

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    def json(self) -> Any:
        """The output parsed as JSON (for `--output-format=json`)."""
        return json.loads(self.output)

    def check(self) -> CsResult:
        """This result if it succeeded; else AssertionError showing what the command printed."""
        if not self.ok:
            raise AssertionError(
                f"`{self.command}` exited {self.exit_code}\n--- output ---\n{self.output}"
                f"--- errors ---\n{self.errors}"
            )
        return self
