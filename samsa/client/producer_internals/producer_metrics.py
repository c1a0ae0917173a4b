"""The producer's share of Kafka's client metrics (group ``producer-metrics``)."""

from __future__ import annotations

from samsa.client.metrics import MetricsRegistry

GROUP = "producer-metrics"


class ProducerMetrics:
    """The sensors the sender records into, and the buffer gauges read from the accumulator."""

    def __init__(self, client_id: str, accumulator: object) -> None:
        self.registry = r = MetricsRegistry(client_id)
        s = r.sensor
        self.record_send = s(GROUP, "record-send", "records sent", rate=True, total=True)
        self.record_retry = s(GROUP, "record-retry", "retried record sends", rate=True, total=True)
        self.record_error = s(GROUP, "record-error", "record sends that resulted in errors", rate=True, total=True)
        self.request = s(GROUP, "request", "requests sent", count_rate=True, count_total=True)
        self.request_latency = s(GROUP, "request-latency", "request latency in ms", avg=True, maximum=True)
        self.batch_size = s(GROUP, "batch-size", "number of bytes sent per partition per request", avg=True,
                            maximum=True)
        self.records_per_request = s(GROUP, "records-per-request", "number of records sent per request", avg=True)
        self.record_size = s(GROUP, "record-size", "record size in bytes", avg=True)
        self.queue_time = s(GROUP, "record-queue-time", "time in ms record batches spent in the send buffer",
                            avg=True, maximum=True)
        self.outgoing = s(GROUP, "outgoing-byte", "bytes of record batches sent to the brokers", rate=True,
                          total=True)
        self.throttle = s(GROUP, "produce-throttle-time", "throttle time in ms the brokers asked for", avg=True,
                          maximum=True)
        r.add(GROUP, "buffer-total-bytes", "The maximum amount of buffer memory the client can use",
              lambda: float(getattr(accumulator, "buffer_memory")))
        r.add(GROUP, "buffer-available-bytes", "The total amount of buffer memory that is not being used",
              lambda: float(getattr(accumulator, "buffer_memory") - getattr(accumulator, "buffered")))
