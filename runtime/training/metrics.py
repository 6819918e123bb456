"""Throughput metrics: `Rate` and `GlobalRate`, exactly as Model Zoo computes them.

This is the torch_xla / cerebras.pytorch `RateTracker` algorithm (docs/sources.md):

* `add(count)` accumulates samples (the batch size of every step whose output arrived);
* `rate()` is the smoothed local rate, updated ONLY when queried (i.e. at log steps):
  ``current = count_since_last_query / (now - last_query_time)``, the first value is taken as is,
  later ones are ``(1 - 0.4) * current + 0.4 * previous``, and every query then folds the count
  into the total and starts a new interval. A query with no samples since the last one is no
  exception: current is 0, so it reports 0.4 x the previous rate and starts a new interval,
  exactly as torch_xla's and cerebras.pytorch's trackers do; only a query at the very instant
  of the last one (no time elapsed, which would divide by zero) reports 0 and changes nothing;
* `global_rate()` is ``total_count / (now - start_time)``, not smoothed.

`reset()` is called when the executable has been loaded (after compile and programming), so
neither counts in GlobalRate; a resumed run resets too, so it counts only its own samples.

Both queries take an optional `now` so the caller can use one clock reading for a log step's
Rate, GlobalRate and the TensorBoard event wall time (the tests recompute the rates from the
event files). The default clock is `time.time`, the clock TensorBoard's wall times use.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["RateTracker", "format_rate"]


def format_rate(rate: float) -> str:
    """A rate as Model Zoo 2.x prints it: 2 significant digits below 1, else 2 decimals."""
    return f"{rate:.2g} samples/sec" if rate < 1.0 else f"{rate:.2f} samples/sec"


class RateTracker:
    """Smoothed local rate and global rate of samples per second."""

    def __init__(self, smooth_factor: float = 0.4, clock: Callable[[], float] = time.time) -> None:
        self.smooth_factor = smooth_factor
        self.clock = clock
        self.reset()

    def reset(self, now: float | None = None) -> None:
        """Start counting from zero at `now` (the moment the executable is loaded)."""
        now = self.clock() if now is None else now
        self.start_time = now
        self._partial_time = now
        self._partial_count = 0.0
        self._partial_rate: float | None = None
        self._count = 0.0

    def add(self, count: float) -> None:
        """Count `count` more samples whose outputs have been received."""
        self._count += count

    @property
    def total_count(self) -> float:
        """Samples counted since the last reset."""
        return self._partial_count + self._count

    def rate(self, now: float | None = None) -> float:
        """The 0.4-smoothed rate over the intervals between queries (updates the state)."""
        now = self.clock() if now is None else now
        delta = now - self._partial_time
        if delta <= 0:  # no time since the last query: 0, state kept (torch_xla: `if delta > 0`)
            return 0.0
        current = self._count / delta  # 0 when nothing arrived: smoothed in like any value
        if self._partial_rate is None:
            report_rate = current
        else:
            f = self.smooth_factor
            report_rate = (1 - f) * current + f * self._partial_rate
        # fold this interval's count into the total and start a new interval
        self._partial_count += self._count
        self._count = 0.0
        self._partial_time = now
        self._partial_rate = report_rate
        return report_rate

    def global_rate(self, now: float | None = None) -> float:
        """Samples since the reset divided by the time since the reset."""
        now = self.clock() if now is None else now
        delta = now - self.start_time
        return self.total_count / delta if delta > 0 else 0.0

    def elapsed(self, now: float | None = None) -> float:
        """Seconds since the reset."""
        now = self.clock() if now is None else now
        return now - self.start_time
