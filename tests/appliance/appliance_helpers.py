"""What the appliance tests share: a tiny training command and the client's lines."""

from __future__ import annotations

import re

from cs2sim.runtime.cli.appliance_lines import LINES

PREFIX = re.compile(r"^\S+ \S+ (?:INFO|WARNING|ERROR):\s+")
TRAIN = ["-p", "configs/params_small.yaml", "--mode", "train", "-o", "md"]


def messages(output: str) -> list[str]:
    """The client's messages, without the logging prefix."""
    return [PREFIX.sub("", line) for line in output.splitlines() if PREFIX.match(line)]


def template_re(template: str) -> re.Pattern[str]:
    """A line's template as a pattern: every {field} matches anything."""
    parts = re.split(r"\{[^}]*\}", template)
    return re.compile("^" + "(.+?)".join(re.escape(p) for p in parts) + "$")


PATTERNS = [(line.key, template_re(line.template)) for line in LINES]


def keys_of(output: str) -> list[str]:
    """Each message's key in the table (messages that are not the table's are skipped)."""
    keys: list[str] = []
    for text in messages(output):
        matching = [key for key, pattern in PATTERNS if pattern.match(text)]
        # two lines of one text (the compile job's "Ingress is ready", then the execute job's):
        # the first the output has not said yet, in the table's order
        fresh = [key for key in matching if key not in keys]
        if matching:
            keys.append((fresh or matching)[0])
    return keys


def losses(output: str) -> dict[int, str]:
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"\| Train Device=[^,]*, Step=(\d+), Loss=([^,\s]+)", output)
    }
