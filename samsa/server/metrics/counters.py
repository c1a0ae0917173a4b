"""What the request paths count while metrics are on, kept as cheaply as Python allows.

Each produce or fetch adds to plain integers of a per-topic :class:`TopicCounters`, and each
request appends one tuple of timings to :class:`RequestTimes`; nothing on those paths takes a
lock, builds a label set or sorts into buckets. The timings are folded into histograms when
the endpoint is scraped (or when a few thousand are pending), off the request's path.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass, field

#: Histogram bucket bounds, in milliseconds, for the RequestMetrics *TimeMs families.
BUCKETS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000,
                                 30000)

#: The RequestMetrics times, in the order :meth:`RequestTimes.record` takes them.
TIME_NAMES = ("RequestQueueTimeMs", "LocalTimeMs", "RemoteTimeMs", "ResponseSendTimeMs", "TotalTimeMs")

_FOLD_AT = 4096

# Kafka also times fetches as FetchConsumer or FetchFollower (RequestMetrics' request names):
# recorded under these stand-in keys beside Fetch's own.
FETCH_CONSUMER, FETCH_FOLLOWER = -1, -2
EXTRA_REQUEST_NAMES = {FETCH_CONSUMER: "FetchConsumer", FETCH_FOLLOWER: "FetchFollower"}


class TopicCounters:
    """BrokerTopicMetrics of one topic (or, under the name ``""``, of all topics)."""

    __slots__ = ("messages_in", "bytes_in", "bytes_out", "bytes_rejected", "failed_produce", "failed_fetch",
                 "total_produce", "total_fetch", "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_rejected = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.total_produce = 0
        self.total_fetch = 0
        self.replication_bytes_out = 0


class BrokerTopicStats:
    """Kafka's BrokerTopicStats: counters per topic and for all topics."""

    def __init__(self) -> None:
        self.all = TopicCounters()
        self.topics: dict[str, TopicCounters] = {}

    def topic(self, name: str) -> TopicCounters:
        c = self.topics.get(name)
        if c is None:
            c = self.topics[name] = TopicCounters()
        return c

    def produced(self, topic: str, messages: int, size: int) -> None:
        """A partition's records were appended."""
        c = self.topic(topic)
        c.total_produce += 1
        c.messages_in += messages
        c.bytes_in += size
        a = self.all
        a.total_produce += 1
        a.messages_in += messages
        a.bytes_in += size

    def produce_failed(self, topic: str, size: int) -> None:
        """A partition's records were refused."""
        c = self.topic(topic)
        c.total_produce += 1
        c.failed_produce += 1
        c.bytes_rejected += size
        a = self.all
        a.total_produce += 1
        a.failed_produce += 1
        a.bytes_rejected += size

    def fetched(self, responses: list, follower: bool) -> None:
        """A Fetch response is going out: count its bytes and failures per topic."""
        a = self.all
        for t in responses:
            name = t["topic"]
            c = self.topic(name) if name is not None else TopicCounters()  # an unknown topic id: totals only
            for p in t["partitions"]:
                size = len(p["records"] or b"")
                c.total_fetch += 1
                a.total_fetch += 1
                if p["error_code"]:
                    c.failed_fetch += 1
                    a.failed_fetch += 1
                elif follower:
                    c.replication_bytes_out += size
                    a.replication_bytes_out += size
                else:
                    c.bytes_out += size
                    a.bytes_out += size

    def forget(self, topic: str) -> None:
        """The topic was deleted: its series go away (the all-topics totals stay)."""
        self.topics.pop(topic, None)


@dataclass
class Histogram:
    """Counts per bucket (not cumulative), and the sum, in milliseconds."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_MS) + 1))
    total: float = 0.0

    def add(self, value_ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, value_ms)] += 1
        self.total += value_ms


class RequestTimes:
    """RequestMetrics: requests per API and version, and each API's five times as histograms."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int, float, float, float, float, float]] = []
        self.requests: dict[tuple[int, int], int] = {}
        self.histograms: dict[tuple[int, str], Histogram] = {}

    def record(self, api_key: int, version: int, arrived: float, started: float, local_done: float,
               remote_done: float, sent: float) -> None:
        """One answered request's instants (``time.perf_counter()``): appended, folded later."""
        self.pending.append((api_key, version, arrived, started, local_done, remote_done, sent))
        if len(self.pending) >= _FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Move the pending timings into the counts and histograms."""
        pending, self.pending = self.pending, []
        requests = self.requests
        histograms = self.histograms
        for api_key, version, arrived, started, local_done, remote_done, sent in pending:
            requests[api_key, version] = requests.get((api_key, version), 0) + 1
            times = ((started - arrived) * 1000, (local_done - started) * 1000, (remote_done - local_done) * 1000,
                     (sent - remote_done) * 1000, (sent - arrived) * 1000)
            for name, ms in zip(TIME_NAMES, times):
                h = histograms.get((api_key, name))
                if h is None:
                    h = histograms[api_key, name] = Histogram()
                h.add(ms)


class LoopBusy:
    """How busy the event loop is: the share of wall time not spent waiting in ``select()``.

    Installed by wrapping the loop's selector, so it costs two clock reads per loop turn.
    ``ratio`` is the busy share over the last completed window of ``window_s`` seconds.
    """

    def __init__(self, window_s: float = 5.0) -> None:
        self.window_s = window_s
        self.idle_s = 0.0
        self.ratio = 0.0
        self._window_start = time.perf_counter()
        self._idle_at_start = 0.0

    def install(self, loop: object) -> bool:
        selector = getattr(loop, "_selector", None)
        if selector is None or not hasattr(selector, "select"):
            return False
        setattr(loop, "_selector", _TimedSelector(selector, self))
        return True

    def tick(self) -> None:
        """Close the window if it is over (called after each select)."""
        now = time.perf_counter()
        elapsed = now - self._window_start
        if elapsed >= self.window_s:
            idle = self.idle_s - self._idle_at_start
            self.ratio = min(max(1.0 - idle / elapsed, 0.0), 1.0)
            self._window_start = now
            self._idle_at_start = self.idle_s


class _TimedSelector:
    """A selector that adds the time spent blocked in ``select()`` to a :class:`LoopBusy`."""

    def __init__(self, inner: object, busy: LoopBusy) -> None:
        self._inner = inner
        self._busy = busy

    def select(self, timeout: float | None = None):  # noqa: ANN201 - the selector's own type
        t0 = time.perf_counter()
        try:
            return self._inner.select(timeout)  # type: ignore[attr-defined]
        finally:
            self._busy.idle_s += time.perf_counter() - t0
            self._busy.tick()

    def __getattr__(self, name: str):  # noqa: ANN204 - register, unregister, get_map, close ...
        return getattr(self._inner, name)
