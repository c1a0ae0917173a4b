"""The asyncio face of Samsa's producer::

    async with AIOProducer({"bootstrap.servers": "localhost:9092", "acks": "all"}) as producer:
        metadata = await producer.send_and_wait("events", b"hello")
        future = await producer.send("events", b"world")   # an asyncio future of RecordMetadata
        await producer.flush()

It is :class:`samsa.client.producer.Producer` — the same interceptors, serializers,
partitioner, accumulator and sender — with the sender run as a task on the caller's event
loop instead of a thread of its own; topic lookups and waiting for ``buffer.memory``
happen here without blocking the loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from samsa.client.producer import Producer, RecordMetadata

__all__ = ["AIOProducer"]


class AIOProducer:
    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self._config = dict(config or {})
        self._kwargs = kwargs
        self._core: Producer | None = None

    @property
    def core(self) -> Producer:
        if self._core is None:
            raise RuntimeError("AIOProducer.start() has not been awaited")
        return self._core

    async def start(self) -> None:
        """Build the producer and start its sender on the running loop; fetch cluster metadata."""
        if self._core is None:
            self._core = Producer(self._config, _loop=asyncio.get_running_loop(), **self._kwargs)
            await self._core.cluster.bootstrap()

    async def __aenter__(self) -> "AIOProducer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
                   timestamp: int | None = None, headers: Any = None,
                   on_delivery: Callable[[RecordMetadata | None, Exception | None], None] | None = None
                   ) -> "asyncio.Future[RecordMetadata]":
        """Queue one record; the returned future completes when the broker has answered."""
        core = self.core
        if topic not in core._partition_counts:
            await core._fetch_partitions(topic)
        approx = len(value) if isinstance(value, (bytes, str)) else 64
        if not core.has_room(approx):
            await core.wait_for_room(approx)
        return asyncio.wrap_future(core.send(topic, value, key=key, partition=partition, timestamp=timestamp,
                                             headers=headers, on_delivery=on_delivery))

    async def send_and_wait(self, topic: str, value: Any = None, **kwargs: Any) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))

    async def flush(self) -> None:
        """Send everything queued now and wait for every answer."""
        core = self.core
        core._flush_now()
        pending = core._all_pending()
        if pending:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in pending), return_exceptions=True)

    async def partitions_for(self, topic: str) -> list[int]:
        return list(range(await self.core._fetch_partitions(topic)))

    async def stop(self) -> None:
        """Flush, stop the sender, close interceptors and connections."""
        if self._core is None or self._core._closed:
            return
        core = self._core
        await self.flush()
        core._closed = True
        core._wake()
        await core._sender
        core._close_interceptors()
        await core._shutdown()

    close = stop
