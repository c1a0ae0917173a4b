"""Samsa's producer, Kafka's producer API in Python::

    with Producer({"bootstrap.servers": "localhost:9092", "acks": "all", "linger.ms": 5}) as producer:
        future = producer.send("events", b"hello", key=b"k")    # a concurrent.futures.Future
        metadata = future.result()                               # RecordMetadata(topic, partition, offset, timestamp)

``send()`` runs the seeds' pipeline in the caller's thread (interceptors, serializers,
partitioner) and appends to a batch; the sender, on a private event loop thread, sends
batches that are full or have waited ``linger.ms`` and completes each record's future and
``on_delivery(metadata, error)`` callback (in the sender's thread, as Java's I/O thread
does). The work is :class:`~samsa.client.producer_internals.producer_core.ProducerCore`'s, the
same core :class:`samsa.aio.AIOProducer` runs on the caller's loop.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Future
from typing import Any

from samsa.client.connection import KafkaTimeoutError
from samsa.client.loop import IdleSignal, LoopThread
from samsa.client.metrics import MetricName
from samsa.client.producer_internals.producer_core import OnDelivery, ProducerCore
from samsa.client.types import RecordMetadata

__all__ = ["Producer", "RecordMetadata"]


class Producer:
    """``Producer({"bootstrap.servers": "localhost:9092", "acks": "all"})``; ``send()`` returns a
    :class:`concurrent.futures.Future` of :class:`RecordMetadata`. Safe to share between threads."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any):
        idle = IdleSignal()
        self._thread = LoopThread("samsa-producer-sender", idle)
        try:
            self._core = ProducerCore(config, self._thread.loop, lookup=self._partitions, sender_idle=idle, **kwargs)
        except BaseException:
            self._thread.stop()
            raise
        self.config = self._core.config
        self.send = self._core.send  # type: ignore[method-assign]  # the same call, one frame less per record
        self._thread.loop.call_soon_threadsafe(self._core.start)

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             timestamp: int | None = None, headers: Any = None, on_delivery: OnDelivery | None = None) -> Future:
        """Queue one record. Blocks only for the topic's metadata or for ``buffer.memory``, up to
        ``max.block.ms``; a bad record (serializer error, over ``max.request.size``) raises here."""
        return self._core.send(topic, value, key, partition, timestamp, headers, on_delivery)

    def _partitions(self, topic: str) -> int:
        count = self._core.partition_counts.get(topic)
        if count is None:
            try:
                count = self._thread.run(self._core.fetch_partitions(topic))
            except (asyncio.TimeoutError, TimeoutError):
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.config['max.block.ms']} ms.") from None
        return count

    def metrics(self) -> dict[MetricName, float]:
        """Kafka's producer metrics (record-send-rate, request-latency-avg, batch-size-avg, ...) by
        :class:`MetricName`; rates are per second, times in ms, over the last 30 to 60 s."""
        return self._core.metrics()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._partitions(topic)))

    def flush(self, timeout: float | None = None) -> int:
        """Send everything buffered and wait for the answers; returns the records still pending."""
        futures = self._core.accumulator.pending_futures()
        self._thread.loop.call_soon_threadsafe(self._core.flush_now)
        end = None if timeout is None else time.monotonic() + timeout
        for f in futures:
            try:
                f.exception(None if end is None else max(end - time.monotonic(), 0))
            except Exception:
                break
        return sum(1 for f in self._core.accumulator.pending_futures() if not f.done())

    # ---------------------------------------------------------------- transactions (KIP-98)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get this transactional id's producer id and epoch, fencing any older producer of it
        (and aborting its open transaction). Once, before the first transaction."""
        self._thread.run(self._core.init_transactions(), timeout)

    def begin_transaction(self) -> None:
        self._core.begin_transaction()

    def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any, timeout: float | None = None) -> None:
        """Commit a consumer group's ``offsets`` ({TopicPartition: offset or OffsetAndMetadata})
        with the transaction; ``group_metadata`` is the consumer's ``group_metadata()``."""
        self._thread.run(self._core.send_offsets_to_transaction(offsets, group_metadata), timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send what is buffered, then commit. If a send failed the commit raises its error,
        and the application must abort the transaction."""
        self.flush(timeout)
        self._thread.run(self._core.end_transaction(True), timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Wait for the sends in flight, then abort: none of the transaction's records or offsets count."""
        self.flush(timeout)
        self._thread.run(self._core.end_transaction(False), timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout`` seconds), then stop the sender and close the connections."""
        if self._core.closed:
            return
        self.flush(timeout)
        try:
            self._thread.run(self._core.close(), 30 if timeout is None else max(timeout, 1))
        except Exception:
            pass
        self._thread.stop()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
