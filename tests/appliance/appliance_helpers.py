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
    """Each message's key in the table (messages that are not the table's are skipped). Lines
    with one text under two keys (the compile job's and the execute job's "Ingress is ready",
    their queue notes) take the first key at or after the previous message's place."""
    keys: list[str] = []
    at = 0
    for text in messages(output):
        places = [i for i, (_, pattern) in enumerate(PATTERNS) if pattern.match(text)]
        if places:
            at = next((i for i in places if i >= at), places[0])
            keys.append(PATTERNS[at][0])
    return keys


def losses(output: str) -> dict[int, str]:
    return {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"\| Train Device=[^,]*, Step=(\d+), Loss=([^,\s]+)", output)
    }
