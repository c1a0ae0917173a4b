"""The asyncio face of Samsa's producer::

    async with AIOProducer({"bootstrap.servers": "localhost:9092", "acks": "all"}) as producer:
        metadata = await producer.send_and_wait("events", b"hello")
        future = await producer.send("events", b"world")   # an asyncio future of RecordMetadata
        await producer.flush()

It is :class:`~samsa.client.producer_internals.producer_core.ProducerCore` — the same interceptors,
serializers, partitioner, accumulator and sender as :class:`samsa.client.producer.Producer`
— with the sender run as a task on the caller's event loop instead of a thread of its
own; topic lookups and waiting for ``buffer.memory`` happen here without blocking the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

from samsa.client.producer_internals.producer_core import OnDelivery, ProducerCore
from samsa.client.types import RecordMetadata

__all__ = ["AIOProducer"]


class AIOProducer:
    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self._config = dict(config or {})
        self._kwargs = kwargs
        self._core: ProducerCore | None = None

    @property
    def core(self) -> ProducerCore:
        if self._core is None:
            raise RuntimeError("AIOProducer.start() has not been awaited")
        return self._core

    async def start(self) -> None:
        """Build the producer and start its sender on the running loop; fetch cluster metadata."""
        if self._core is None:
            self._core = ProducerCore(self._config, asyncio.get_running_loop(), lookup=_not_fetched,
                                      sender_idle=None, **self._kwargs)
            self._core.start()
            await self._core.cluster.bootstrap()

    def metrics(self) -> dict:
        """Kafka's producer metrics by :class:`samsa.client.metrics.MetricName` (as ``Producer.metrics``)."""
        return self.core.metrics()

    async def __aenter__(self) -> "AIOProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp: int | None = None, headers: Any = None, on_delivery: OnDelivery | None = None
                   ) -> "asyncio.Future[RecordMetadata]":
        """Queue one record; the returned future completes when the broker has answered."""
        core = self.core
        if topic not in core.partition_counts:
            await core.fetch_partitions(topic)
        approx = len(value) if isinstance(value, (bytes, str)) else 64
        if not core.accumulator.has_room(approx):
            await core.accumulator.wait_for_room(approx)
        result: asyncio.Future = asyncio.get_running_loop().create_future()

        def delivered(metadata: RecordMetadata | None, error: Exception | None) -> None:  # on this loop
            if not result.done():
                if error is None:
                    result.set_result(metadata)
                else:
                    result.set_exception(error)
            if on_delivery is not None:
                on_delivery(metadata, error)
        core.send(topic, value, key, partition, timestamp, headers, delivered)
        return result

    async def send_and_wait(self, topic: str, value: Any = None, **kwargs: Any) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))

    async def flush(self) -> None:
        """Send everything queued now and wait for every answer."""
        core = self.core
        pending = [f for f in core.accumulator.pending_futures() if not f.done()]
        core.flush_now()
        if not pending:
            return
        all_done = asyncio.get_running_loop().create_future()
        left = len(pending)

        def one_done(_: Any) -> None:  # the sender completes records on this loop's thread
            nonlocal left
            left -= 1
            if not left and not all_done.done():
                all_done.set_result(None)
        for f in pending:
            f.add_done_callback(one_done)
        await all_done

    # ---------------------------------------------------------------- transactions (KIP-98)

    async def init_transactions(self) -> None:
        """Get this transactional id's producer id and epoch, fencing any older producer of it."""
        await self.core.init_transactions()

    def begin_transaction(self) -> None:
        self.core.begin_transaction()

    async def send_offsets_to_transaction(self, offsets: dict, group_metadata: Any) -> None:
        await self.core.send_offsets_to_transaction(offsets, group_metadata)

    async def commit_transaction(self) -> None:
        """Send what is queued, then commit (a failed send raises here: abort then)."""
        await self.flush()
        await self.core.end_transaction(True)

    async def abort_transaction(self) -> None:
        await self.flush()
        await self.core.end_transaction(False)

    async def partitions_for(self, topic: str) -> list[int]:
        return list(range(await self.core.fetch_partitions(topic)))

    async def stop(self) -> None:
        """Flush, stop the sender, close interceptors and connections."""
        if self._core is None or self._core.closed:
            return
        await self.flush()
        await self._core.close()

    close = stop


def _not_fetched(topic: str) -> int:
    raise RuntimeError(f"the partitions of {topic} are fetched by AIOProducer.send before the core's send")
