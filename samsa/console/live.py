"""Live figures from the brokers' Prometheus endpoints: messages and bytes per second."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "messages_in": "kafka_server_brokertopicmetrics_messagesin_total",
    "bytes_in": "kafka_server_brokertopicmetrics_bytesin_total",
    "bytes_out": "kafka_server_brokertopicmetrics_bytesout_total",
}


@dataclass
class Sample:
    at: float
    totals: dict[str, float]                                  # figure -> all topics
    topics: dict[str, dict[str, float]] = field(default_factory=dict)  # figure -> topic -> value


def _scrape(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def parse(texts: list[str]) -> Sample:
    """Sum the BrokerTopicMetrics counters of every broker's scrape."""
    names = {v: k for k, v in COUNTERS.items()}
    totals = {k: 0.0 for k in COUNTERS}
    topics: dict[str, dict[str, float]] = {k: {} for k in COUNTERS}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                figure = names.get(s.name)
                if figure is None:
                    continue
                topic = s.labels.get("topic")
                if topic is None:
                    totals[figure] += s.value
                else:
                    topics[figure][topic] = topics[figure].get(topic, 0.0) + s.value
    return Sample(time.monotonic(), totals, topics)


class LiveFigures:
    """Rates between the last two scrapes of every broker's /metrics."""

    def __init__(self, urls: list[str], timeout: float = 3.0):
        self.urls = urls
        self.timeout = timeout
        self._last: Sample | None = None
        self._lock = asyncio.Lock()

    async def rates(self) -> dict:
        if not self.urls:
            return {"available": False, "error": "no --metrics-url given"}
        async with self._lock:
            try:
                texts = await asyncio.gather(*(asyncio.to_thread(_scrape, u, self.timeout) for u in self.urls))
            except Exception as e:  # noqa: BLE001 - shown on the page, not raised
                return {"available": False, "error": f"could not read the broker metrics: {e}"}
            now = parse(list(texts))
            last, self._last = self._last, now
        if last is None or now.at - last.at <= 0:
            return {"available": True, "warming": True, "totals": {k: None for k in COUNTERS}, "topics": {}}
        seconds = now.at - last.at
        totals = {k: max(now.totals[k] - last.totals[k], 0) / seconds for k in COUNTERS}
        topics: dict[str, dict[str, float]] = {}
        for figure in COUNTERS:
            for topic, value in now.topics[figure].items():
                before = last.topics[figure].get(topic, 0.0)
                topics.setdefault(topic, {})[figure] = max(value - before, 0) / seconds
        return {"available": True, "warming": False, "totals": totals, "topics": topics}
