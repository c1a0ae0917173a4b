"""The consumer's share of Kafka's client metrics (``consumer-fetch-manager-metrics`` and
``consumer-coordinator-metrics``)."""

from __future__ import annotations

from typing import Callable

from samsa.client.metrics import MetricsRegistry

FETCH = "consumer-fetch-manager-metrics"
COORDINATOR = "consumer-coordinator-metrics"


class ConsumerMetrics:
    """The sensors the fetcher and the group membership record into."""

    def __init__(self, client_id: str, assigned: Callable[[], int]) -> None:
        self.registry = r = MetricsRegistry(client_id)
        s = r.sensor
        self.fetch_latency = s(FETCH, "fetch-latency", "time taken for a fetch request in ms", avg=True, maximum=True)
        self.fetch = s(FETCH, "fetch", "fetch requests", count_rate=True, count_total=True)
        self.fetch_size = s(FETCH, "fetch-size", "number of bytes fetched per request", avg=True, maximum=True)
        self.bytes_consumed = s(FETCH, "bytes-consumed", "bytes consumed", rate=True, total=True)
        self.records_consumed = s(FETCH, "records-consumed", "records consumed", rate=True, total=True)
        self.records_lag = s(FETCH, "records-lag", "number of messages the consumer is behind the high watermark "
                             "of a partition", avg=True, maximum=True)
        self.throttle = s(FETCH, "fetch-throttle-time", "throttle time in ms the brokers asked for", avg=True,
                          maximum=True)
        self.commit_latency = s(COORDINATOR, "commit-latency", "time taken for a commit request in ms", avg=True,
                                maximum=True)
        self.commit = s(COORDINATOR, "commit", "commit calls", count_rate=True, count_total=True)
        self.rebalance = s(COORDINATOR, "rebalance", "rebalances (joins of the group) completed", count_rate=True,
                           count_total=True)
        r.add(COORDINATOR, "assigned-partitions", "The number of partitions currently assigned to this consumer",
              lambda: float(assigned()))
