"""Kafka's client metrics, kept by Samsa's Producer and Consumer and returned by ``metrics()``.

A :class:`Sampled` keeps what one sensor recorded in two windows of 30 seconds (Kafka's
``metrics.sample.window.ms`` and ``metrics.num.samples`` defaults) and since the start; a
metric's value (an average, a maximum, a rate per second or a total) is computed when it is
read. Recording is a few additions on the thread that saw the event (the sender's or the
fetcher's loop, or the thread that polls); nothing is locked.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Callable

WINDOW_S = 30.0


@dataclass(frozen=True)
class MetricName:
    """Kafka's MetricName: a name in a group, with tags (``client-id``); the description is not
    part of its identity."""

    name: str
    group: str
    tags: tuple[tuple[str, str], ...] = ()
    description: str = field(default="", compare=False)

    def __str__(self) -> str:
        """As Kafka's tools print it: ``group:name:{tag=value, ...}``."""
        return f"{self.group}:{self.name}:{{{', '.join(f'{k}={v}' for k, v in self.tags)}}}"


class Sampled:
    """Count, sum and maximum of the values recorded in the current and the previous window,
    and the count and sum since the start."""

    __slots__ = ("start", "count", "sum", "max", "prev_start", "prev_count", "prev_sum", "prev_max",
                 "total_count", "total_sum", "created")

    def __init__(self) -> None:
        self.created = self.start = self.prev_start = time.monotonic()
        self.count = self.prev_count = self.total_count = 0
        self.sum = self.prev_sum = self.total_sum = 0.0
        self.max = self.prev_max = float("-inf")

    def record(self, value: float = 1.0) -> None:
        now = time.monotonic()
        if now - self.start >= WINDOW_S:
            self._roll(now)
        self.count += 1
        self.sum += value
        if value > self.max:
            self.max = value
        self.total_count += 1
        self.total_sum += value

    def _roll(self, now: float) -> None:
        if now - self.start < 2 * WINDOW_S:
            self.prev_start, self.prev_count, self.prev_sum, self.prev_max = self.start, self.count, self.sum, self.max
        else:  # the previous window saw nothing either
            self.prev_start, self.prev_count, self.prev_sum, self.prev_max = now - WINDOW_S, 0, 0.0, float("-inf")
        self.start, self.count, self.sum, self.max = now, 0, 0.0, float("-inf")

    def _windows(self) -> tuple[int, float, float, float]:
        """(count, sum, max, seconds covered) of the windows still current."""
        now = time.monotonic()
        if now - self.start >= WINDOW_S:
            self._roll(now)
        return (self.count + self.prev_count, self.sum + self.prev_sum, max(self.max, self.prev_max),
                max(now - self.prev_start, 1e-3))

    def avg(self) -> float:
        count, total, _, _ = self._windows()
        return total / count if count else float("nan")

    def maximum(self) -> float:
        count, _, top, _ = self._windows()
        return top if count else float("nan")

    def rate(self) -> float:
        """The recorded values' sum per second (bytes/s, records/s)."""
        _, total, _, seconds = self._windows()
        return total / seconds

    def count_rate(self) -> float:
        """Recordings per second (requests/s)."""
        count, _, _, seconds = self._windows()
        return count / seconds


Reading = Callable[[], float]


class MetricsRegistry:
    """The metrics of one client: each name with how to read its value."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._readings: dict[MetricName, Reading] = {}

    def add(self, group: str, name: str, description: str, read: Reading) -> None:
        self._readings[MetricName(name, group, (("client-id", self.client_id),), description)] = read

    def sensor(self, group: str, prefix: str, what: str, *, avg: bool = False, maximum: bool = False,
               rate: bool = False, count_rate: bool = False, total: bool = False, count_total: bool = False
               ) -> Sampled:
        """A new sensor and the metrics read from it (``<prefix>-avg``, ``-max``, ``-rate``, ``-total``)."""
        s = Sampled()
        if avg:
            self.add(group, f"{prefix}-avg", f"The average {what}", s.avg)
        if maximum:
            self.add(group, f"{prefix}-max", f"The maximum {what}", s.maximum)
        if rate:
            self.add(group, f"{prefix}-rate", f"The number of {what} per second", s.rate)
        if count_rate:
            self.add(group, f"{prefix}-rate", f"The number of {what} per second", s.count_rate)
        if total:
            self.add(group, f"{prefix}-total", f"The total number of {what}", lambda: s.total_sum)
        if count_total:
            self.add(group, f"{prefix}-total", f"The total number of {what}", lambda: float(s.total_count))
        return s

    def values(self) -> dict[MetricName, float]:
        return {name: float(read()) for name, read in sorted(self._readings.items(), key=lambda kv: str(kv[0]))}


_ids = {"producer": itertools.count(1), "consumer": itertools.count(1)}


def default_client_id(kind: str, group_id: str | None = None) -> str:
    """Kafka's generated client ids: producer-1, consumer-<group>-1, ..."""
    n = next(_ids[kind])
    return f"{kind}-{group_id}-{n}" if group_id else f"{kind}-{n}"


def format_metrics(metrics: dict[MetricName, float]) -> str:
    """The table Kafka's perf tools print with --print-metrics (ToolsUtils.printMetrics)."""
    if not metrics:
        return ""
    rows = sorted((str(name), value) for name, value in metrics.items())
    width = max(len(name) for name, _ in rows)
    lines = ["", f"{'Metric Name':<{width}}   Value"]
    lines += [f"{name:<{width}} : {_java_double(value)}" for name, value in rows]
    return "\n".join(lines)


def _java_double(value: float) -> str:
    """``String.format("%.3f")`` of a Java double, NaN and infinities included."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return f"{value:.3f}"
