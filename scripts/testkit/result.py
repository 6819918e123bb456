"""`CsResult`: one finished `cs` (or launcher) process as a test wants to see it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CsResult", "plain"]

# CSI sequences, charset selections, and the carriage returns a terminal adds
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\x1b[=>]|\r")


def plain(text: str) -> str:
    """Terminal output without escape codes and carriage returns."""
    return _ESCAPES.sub("", text)


@dataclass(frozen=True)
class CsResult:
    """The output (stdout), errors (stderr) and exit status of one command.

    `combined` is both streams as a terminal shows them, line by line in the order they were
    written (a launcher's refusal is on stderr, its progress on stdout: read `combined` to see
    what a user saw)."""

    command: str
    output: str
    errors: str
    exit_code: int
    interleaved: str | None = field(default=None, repr=False)

    @property
    def combined(self) -> str:
        """stdout and stderr merged in the order their lines came (else stdout, then stderr)."""
        return self.output + self.errors if self.interleaved is None else self.interleaved

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
                f"`{self.command}` exited {self.exit_code}\n--- output and errors ---\n"
                f"{self.combined}"
            )
        return self
