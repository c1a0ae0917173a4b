"""The loop-lag probe (samsa/server/metrics/loop_lag) on a stand-in loop whose clock the test moves."""

from __future__ import annotations

from samsa.server.metrics.counters import BUCKETS_MS
from samsa.server.metrics.loop_lag import LoopLag


class FakeLoop:
    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[tuple[float, object, tuple]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when, fn, *args):
        self.timers.append((when, fn, args))
        return self

    def cancel(self) -> None:
        self.timers.clear()

    def run_next(self, late_s: float) -> None:
        """Run the next timer ``late_s`` seconds after its due time (the loop was held that long)."""
        when, fn, args = self.timers.pop(0)
        self.now = when + late_s
        fn(*args)


def test_lag_is_how_late_the_probe_ran():
    loop = FakeLoop()
    lag = LoopLag(interval_s=0.1, window_s=5.0)
    lag.start(loop)
    loop.run_next(0.0)
    loop.run_next(0.002)
    loop.run_next(12.5)  # the loop held for 12.5 s
    assert sum(lag.histogram.counts) == 3
    assert abs(lag.histogram.total - 12502.0) < 1e-6
    assert lag.histogram.counts[-2] == 1 and BUCKETS_MS[-1] == 30000  # 12,500 ms: the bucket up to 30 s
    assert abs(lag.max_ms - 12500.0) < 1e-6
    # the next probe is due an interval after the late one ran, not at once
    assert abs(loop.timers[0][0] - (loop.now + 0.1)) < 1e-9


def test_max_covers_the_last_whole_window():
    loop = FakeLoop()
    loop.now = 0.0  # times a binary fraction can hold exactly
    lag = LoopLag(interval_s=0.125, window_s=1.0)
    lag.start(loop)
    loop.run_next(0.75)  # at 0.875: 750 ms late, in the window ending at 1
    assert lag.max_ms == 750.0
    loop.run_next(0.0)  # at 1.0: a new window; the stall is the last whole window's
    assert loop.now == 1.0 and lag.max_ms == 750.0
    for _ in range(7):
        loop.run_next(0.0)
    assert loop.now == 1.875 and lag.max_ms == 750.0
    loop.run_next(0.0)  # at 2.0: a whole quiet window since, the stall is forgotten
    assert lag.max_ms == 0.0


def test_stop_cancels_the_probe():
    loop = FakeLoop()
    lag = LoopLag()
    lag.start(loop)
    lag.stop()
    assert loop.timers == []
