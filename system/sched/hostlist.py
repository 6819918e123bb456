"""Slurm hostlist expressions: ``w-[1-3,7]`` <-> ["w-1", "w-2", "w-3", "w-7"].

SLURM_JOB_NODELIST and squeue's NODELIST use this compressed form; tasks and tests expand it,
and the real-Slurm backend expands whatever a site's slurm.conf names (``n[1-2]-ib``,
``rack[1-2]-n[01-02]``): the whole grammar is in `expand`.
Names are grouped by their prefix (everything before the trailing digits) in the order given;
runs of consecutive numbers with the same zero-padding become ranges, as `scontrol show hostnames`
/ `hostlist` do.
"""

from __future__ import annotations

import re

__all__ = ["compress", "expand"]

_TAIL = re.compile(r"^(.*?)(\d+)$")


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
    """ "1,2,3,7" -> "1-3,7" (numbers kept with their own zero-padding, sorted)."""
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
    """The node names of a hostlist expression ("" -> []), in Slurm's order.

    The grammar of Slurm's hostlist expressions (hostlist.c; `scontrol show hostnames`):
      list   := host (("," | whitespace) host)*      commas inside brackets do not separate
      host   := (text | "[" ranges "]")+             e.g. n[1-2]-ib, rack[1-2]-n[01-02]
      ranges := range ("," range)*
      range  := digits | digits "-" digits           lo <= hi; "01-10" keeps lo's width
    Several bracket groups in one host are a product, the first group varying slowest
    (rack1-n01, rack1-n02, rack2-n01, ...), as `scontrol show hostnames` lists two groups (with
    three or more, Slurm 22.05 lists the same names in another order). A host yields at most
    MAX_HOSTS names, as Slurm bounds a range, so a hostile expression cannot exhaust memory.
    """
    out: list[str] = []
    for host in _split_hosts(expr):
        names = [""]
        for text, ranges in _pieces(host, expr):
            if ranges is None:
                names = [n + text for n in names]
                continue
            numbers = _numbers(ranges, expr)
            if len(names) * len(numbers) > MAX_HOSTS:
                raise ValueError(f"hostlist expression {expr!r} names more than {MAX_HOSTS} hosts")
            names = [n + k for n in names for k in numbers]
        out.extend(names)
        if len(out) > MAX_HOSTS:
            raise ValueError(f"hostlist expression {expr!r} names more than {MAX_HOSTS} hosts")
    return out


MAX_HOSTS = 65536  # Slurm's MAX_RANGE: the most hosts one range may name


def _split_hosts(expr: str) -> list[str]:
    """Split at commas and whitespace outside brackets; brackets must balance, not nest."""
    hosts, current, depth = [], "", 0
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if depth not in (0, 1):
            raise ValueError(f"bad hostlist expression {expr!r}: unbalanced or nested brackets")
        if depth == 0 and (ch == "," or ch.isspace()):
            hosts.append(current)
            current = ""
        else:
            current += ch
    if depth:
        raise ValueError(f"bad hostlist expression {expr!r}: a '[' is not closed")
    hosts.append(current)
    return [h for h in hosts if h]


def _pieces(host: str, expr: str) -> list[tuple[str, str | None]]:
    """`n[1-2]-ib` -> [("n", None), ("", "1-2"), ("-ib", None)]: text and bracket contents."""
    out: list[tuple[str, str | None]] = []
    for text, ranges in _PIECE.findall(host):
        out.append((text, None) if text else ("", ranges))
    if "".join(t if r is None else f"[{r}]" for t, r in out) != host:
        raise ValueError(f"bad hostlist expression {expr!r}")
    return out


_PIECE = re.compile(r"([^\[\]]+)|\[([^\[\]]*)\]")


def _numbers(ranges: str, expr: str) -> list[str]:
    """ "1-3,07" -> ["1", "2", "3", "07"]: each range's numbers with its low end's width."""
    out: list[str] = []
    for part in ranges.split(","):
        lo, dash, hi = part.strip().partition("-")
        hi = hi if dash else lo
        if not (lo.isdigit() and hi.isdigit() and lo.isascii() and hi.isascii()):
            raise ValueError(f"bad hostlist expression {expr!r}: bad range {part!r}")
        if int(lo) > int(hi):
            raise ValueError(f"bad hostlist expression {expr!r}: range {part!r} runs backwards")
        if int(hi) - int(lo) >= MAX_HOSTS:
            raise ValueError(f"hostlist expression {expr!r} names more than {MAX_HOSTS} hosts")
        out.extend(f"{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1))
    return out
