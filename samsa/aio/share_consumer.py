"""The asyncio face of Samsa's share consumer (KIP-932)::

    consumer = AIOShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "workers"}, "jobs")
    await consumer.start()
    async for record in consumer:
        await handle(record)            # accepted by the next poll (implicit mode)
    await consumer.stop()

It is :class:`~samsa.client.consumer_internals.async_share_consumer.AsyncShareConsumer` on the
caller's event loop — the core the blocking :class:`samsa.client.share_consumer.ShareConsumer`
runs on a thread of its own. The acknowledgement commit callback may be a coroutine function.
"""

from __future__ import annotations

import inspect
from typing import Any, AsyncIterator, Iterable, Mapping

from samsa.client.consumer_internals.async_share_consumer import AckCallback, AsyncShareConsumer
from samsa.client.consumer_internals.records import ShareConsumerRecord
from samsa.client.consumer_internals.share_fetcher import ACCEPT
from samsa.client.types import TopicPartition

__all__ = ["AIOShareConsumer"]


class AIOShareConsumer:
    def __init__(self, config: Mapping[str, Any] | str | None = None, *topics: str, **kwargs: Any):
        if isinstance(config, str):
            topics, config = (config, *topics), None
        self._topics = list(topics)
        self.core = AsyncShareConsumer(config, **kwargs)
        self._stopped = False

    async def start(self) -> None:
        await self.core.start()
        if self._topics:
            self.core.subscribe(self._topics)

    async def stop(self) -> None:
        self._stopped = True
        await self.core.close()
        await self._run_callbacks()

    close = stop

    async def __aenter__(self) -> "AIOShareConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run_callbacks(self) -> None:
        core = self.core
        while core.callbacks_due and core.acknowledgement_callback is not None:
            offsets, error = core.callbacks_due.pop(0)
            result = core.acknowledgement_callback(offsets, error)
            if inspect.isawaitable(result):
                await result

    def subscribe(self, topics: Iterable[str] | str) -> None:
        self.core.subscribe(topics)

    async def unsubscribe(self) -> None:
        await self.core.unsubscribe()

    def subscription(self) -> set[str]:
        return self.core.subscription()

    def assignment(self) -> set[TopicPartition]:
        return self.core.assignment()

    async def poll(self, timeout: float | None = None) -> list[ShareConsumerRecord]:
        try:
            return await self.core.poll(timeout)
        finally:
            await self._run_callbacks()

    def __aiter__(self) -> AsyncIterator[ShareConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ShareConsumerRecord]:
        while not self._stopped:
            for record in await self.poll(None):
                yield record

    def acknowledge(self, record: ShareConsumerRecord, type: Any = ACCEPT) -> None:  # noqa: A002
        self.core.acknowledge(record, type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, type: Any = ACCEPT) -> None:  # noqa: A002
        self.core.acknowledge_offset(topic, partition, offset, type)

    async def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, BaseException | None]:
        try:
            return await self.core.commit_sync(timeout)
        finally:
            await self._run_callbacks()

    def commit_async(self):
        """An asyncio.Task of the answers, as commit_sync's."""
        return self.core.commit_async()

    def set_acknowledgement_commit_callback(self, callback: AckCallback | None) -> None:
        self.core.acknowledgement_callback = callback

    def wakeup(self) -> None:
        self.core.wakeup()
