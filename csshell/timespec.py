"""Times as an administrator types them for `--since` / `--until`: a duration back from now
(`90s`, `15m`, `1h`, `2d`, `1h30m`, `1w`) or a local time (`10:00`, `10:00:30` today;
`2026-11-26`, `2026-11-26 10:00`, `2026-11-26T10:00:30`)."""

from __future__ import annotations

import re
import time
from datetime import datetime

from cs2sim.system.errors import UsageError

__all__ = ["parse_moment"]

UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"(\d+)\s*(min|s|m|h|d|w)")
_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d")
_CLOCKS = ("%H:%M:%S", "%H:%M")


def _duration(text: str) -> float | None:
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.replace(" ", ""):
        return None
    return float(sum(int(n) * UNITS[u] for n, u in parts))


def parse_moment(text: str, option: str, now: float | None = None) -> float:
    """Epoch seconds for `text`; a usage error naming `option` when it is neither form."""
    now = time.time() if now is None else now
    raw = text.strip().lower()
    back = _duration(raw)
    if back is not None:
        return now - back
    raw = raw.replace("t", " ", 1) if re.match(r"\d{4}-\d\d-\d\dt", raw) else raw
    for fmt in _FORMATS:
        try:
            return datetime.strptime(raw, fmt).timestamp()
        except ValueError:
            pass
    today = datetime.fromtimestamp(now)
    for fmt in _CLOCKS:
        try:
            clock = datetime.strptime(raw, fmt)
        except ValueError:
            continue
        return today.replace(
            hour=clock.hour, minute=clock.minute, second=clock.second, microsecond=0
        ).timestamp()
    raise UsageError(
        f"`{option} {text}` is not a time; give a duration back from now (30m, 1h, 2d) or a "
        "local time (10:00, 2026-11-26 10:00)."
    )
