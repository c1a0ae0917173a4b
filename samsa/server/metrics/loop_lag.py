"""The event loop's lag: how long a callback due at some instant waited past it.

A probe schedules itself every ``interval_s`` with ``loop.call_at`` and, when it runs, adds how
late it ran to a histogram (milliseconds, the RequestMetrics buckets) and to the largest lag
of the current window. Anything that holds the loop (a handler computing for long, a file
operation on the loop) shows up as lag: every other client's request waited as long.
It costs one timer per interval; nothing on the request paths.
"""

from __future__ import annotations

import asyncio

from samsa.server.metrics.counters import Histogram


class LoopLag:
    """``histogram``: every probe's lag in ms; ``max_ms``: the largest of the last completed
    window of ``window_s`` seconds (the current window's, when it is larger)."""

    def __init__(self, interval_s: float = 0.1, window_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.histogram = Histogram()
        self.last_ms = 0.0
        self._window_max = 0.0
        self._previous_max = 0.0
        self._window_end = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def max_ms(self) -> float:
        return max(self._previous_max, self._window_max)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        now = loop.time()
        self._window_end = now + self.window_s
        self._schedule(now + self.interval_s)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _schedule(self, due: float) -> None:
        self._handle = self._loop.call_at(due, self._fire, due)

    def _fire(self, due: float) -> None:
        now = self._loop.time()
        self.record((now - due) * 1000)
        if now >= self._window_end:
            self._previous_max, self._window_max = self._window_max, 0.0
            self._window_end = now + self.window_s
        self._schedule(now + self.interval_s)

    def record(self, lag_ms: float) -> None:
        lag_ms = max(lag_ms, 0.0)
        self.last_ms = lag_ms
        self.histogram.add(lag_ms)
        if lag_ms > self._window_max:
            self._window_max = lag_ms
