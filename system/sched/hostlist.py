"""Slurm hostlist expressions: ``w-[1-3,7]`` <-> ["w-1", "w-2", "w-3", "w-7"].

SLURM_JOB_NODELIST and squeue's NODELIST use this compressed form; tasks and tests expand it.
Names are grouped by their prefix (everything before the trailing digits) in the order given;
runs of consecutive numbers with the same zero-padding become ranges, as `scontrol show hostnames`
/ `hostlist` do.
"""

from __future__ import annotations

import re

__all__ = ["compress", "expand"]

_TAIL = re.compile(r"^(.*?)(\d+)$")
_GROUP = re.compile(r"([^,\[]*)(?:\[([^\]]*)\])?(?:,|$)")


def compress(names: list[str] | tuple[str, ...]) -> str:
    """The hostlist expression of `names` (order of first appearance of each prefix kept)."""
    groups: dict[str, list[str]] = {}
    plain: list[str] = []
    order: list[tuple[str, str]] = []
    for name in names:
        m = _TAIL.match(name)
        if not m:
            plain.append(name)
            order.append(("plain", name))
            continue
        prefix = m.group(1)
        if prefix not in groups:
            groups[prefix] = []
            order.append(("group", prefix))
        groups[prefix].append(m.group(2))
    out: list[str] = []
    for kind, key in order:
        if kind == "plain":
            out.append(key)
            continue
        nums = groups[key]
        if len(nums) == 1:
            out.append(key + nums[0])
            continue
        out.append(f"{key}[{_ranges(nums)}]")
    return ",".join(out)


def _ranges(nums: list[str]) -> str:
    """"1,2,3,7" -> "1-3,7" (numbers kept with their own zero-padding, sorted)."""
    items = sorted(set(nums), key=lambda s: (int(s), len(s)))
    parts: list[str] = []
    start = prev = items[0]
    for cur in items[1:]:
        padded = cur.startswith("0") or prev.startswith("0")
        if int(cur) == int(prev) + 1 and (len(cur) == len(prev) or not padded):
            prev = cur
            continue
        parts.append(start if start == prev else f"{start}-{prev}")
        start = prev = cur
    parts.append(start if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def expand(expr: str) -> list[str]:
    """The node names of a hostlist expression ("" -> [])."""
    out: list[str] = []
    pos = 0
    while pos < len(expr):
        m = _GROUP.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError(f"bad hostlist expression {expr!r}")
        prefix, inner = m.group(1), m.group(2)
        if inner is None:
            if prefix:
                out.append(prefix)
        else:
            for part in inner.split(","):
                lo, _, hi = part.partition("-")
                hi = hi or lo
                width = len(lo)
                out.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi) + 1))
        pos = m.end()
    return out
