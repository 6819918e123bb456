"""RateTracker against hand-computed values (cerebras.pytorch's RateTracker, docs/sources.md), with
an injected clock."""

from __future__ import annotations

import pytest

from cs2sim.runtime.training.metrics import RateTracker


class Clock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_first_rate_equals_global_rate_then_ema_with_factor_0_4():
    clock = Clock()
    rt = RateTracker(clock=clock)  # reset at t=1000
    clock.t = 1002.0
    rt.add(100)
    rt.add(100)
    # first query: 200 samples / 2 s, no previous rate -> taken as is; GlobalRate the same
    assert rt.rate() == pytest.approx(100.0)
    assert rt.global_rate() == pytest.approx(100.0)
    clock.t = 1003.0
    rt.add(300)
    # local 300/1 = 300 -> 0.6 * 300 + 0.4 * 100 = 220 ; global 500 / 3
    assert rt.rate() == pytest.approx(220.0)
    assert rt.global_rate() == pytest.approx(500 / 3)
    clock.t = 1007.0
    rt.add(40)
    # local 40/4 = 10 -> 0.6 * 10 + 0.4 * 220 = 94 ; global 540 / 7
    assert rt.rate() == pytest.approx(94.0)
    assert rt.global_rate() == pytest.approx(540 / 7)
    assert rt.total_count == 540


def test_rate_updates_only_when_queried():
    clock = Clock()
    rt = RateTracker(clock=clock)
    for t in (1.0, 2.0, 3.0, 4.0):  # four steps, never queried
        clock.t = 1000 + t
        rt.add(10)
    # one interval of 4 s with 40 samples, not four EMA updates
    assert rt.rate() == pytest.approx(10.0)


def test_global_rate_excludes_time_before_reset():
    clock = Clock(0.0)
    rt = RateTracker(clock=clock)
    clock.t = 50.0  # compile + load: 50 s
    rt.reset()
    clock.t = 52.0
    rt.add(64)
    assert rt.global_rate() == pytest.approx(32.0)  # 64 / 2, not 64 / 52
    assert rt.elapsed() == pytest.approx(2.0)


def test_zero_interval_reports_zero_and_keeps_state():
    clock = Clock()
    rt = RateTracker(clock=clock)
    rt.add(5)
    assert rt.rate() == 0.0  # no time has passed
    assert rt.global_rate() == 0.0
    clock.t += 1
    assert rt.rate() == pytest.approx(5.0)
    clock.t += 1
    # a query with no new samples smooths the zero in (0.4 x the previous rate) and
    # starts a new interval, as torch_xla's / cerebras.pytorch's RateTracker
    assert rt.rate() == pytest.approx(0.4 * 5.0)
    assert rt.total_count == 5
    rt.add(10)
    clock.t += 3
    # the new interval is the last 3 s only, smoothed from 2.0
    assert rt.rate() == pytest.approx(0.6 * 10 / 3 + 0.4 * 2.0)


def test_format_rate_as_model_zoo_2x():
    from cs2sim.runtime.training.metrics import format_rate

    assert format_rate(0.123456) == "0.12 samples/sec"
    assert format_rate(0.0004567) == "0.00046 samples/sec"
    assert format_rate(0.0) == "0 samples/sec"
    assert format_rate(1.0) == "1.00 samples/sec"
    assert format_rate(7657.516) == "7657.52 samples/sec"


def test_now_argument_uses_one_clock_reading():
    rt = RateTracker(clock=lambda: 0.0)
    rt.add(30)
    assert rt.rate(now=3.0) == pytest.approx(10.0)
    assert rt.global_rate(now=3.0) == pytest.approx(10.0)


def test_custom_smooth_factor():
    clock = Clock(0.0)
    rt = RateTracker(smooth_factor=0.5, clock=clock)
    clock.t = 1
    rt.add(10)
    rt.rate()
    clock.t = 2
    rt.add(30)
    assert rt.rate() == pytest.approx(0.5 * 30 + 0.5 * 10)
