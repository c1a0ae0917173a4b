"""The asyncio face of Samsa's consumer::

    consumer = AIOConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g"}, "events")
    await consumer.start()
    async for record in consumer:
        ...
    await consumer.stop()

Topics may follow the config (as aiokafka takes them) or be given to :meth:`subscribe`.
It is :class:`~samsa.client.consumer_internals.async_consumer.AsyncConsumer` run on the caller's
event loop — the same core the blocking :class:`samsa.client.consumer.Consumer` runs on a
thread of its own. Rebalance listener methods may be plain functions or coroutines.
"""

from __future__ import annotations

import re
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

from samsa.client.consumer_internals.async_consumer import AsyncConsumer, OffsetAndTimestamp
from samsa.client.consumer_internals.records import ConsumerRecord, FetchedBatch, OffsetAndMetadata
from samsa.client.types import PartitionInfo, TopicPartition

__all__ = ["AIOConsumer"]


class AIOConsumer:
    def __init__(self, config: Mapping[str, Any] | str | None = None, *topics: str, **kwargs: Any):
        if isinstance(config, str):
            topics, config = (config, *topics), None
        self._topics = list(topics)
        self.core = AsyncConsumer(config, **kwargs)
        self._stopped = False

    async def start(self) -> None:
        """Connect, and subscribe to the topics given at construction."""
        core = self.core
        await core.start()
        if self._topics:
            core.subscribe(self._topics)

    async def stop(self) -> None:
        """Commit (with auto-commit), revoke, leave the group, close the connections."""
        self._stopped = True
        await self.core.close()

    close = stop

    async def __aenter__(self) -> "AIOConsumer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ---------------------------------------------------------------- subscribe / assign

    def subscribe(self, topics: Iterable[str] | str | re.Pattern | None = None, pattern: str | re.Pattern | None = None,
                  listener: Any = None) -> None:
        self.core.subscribe(topics, pattern, listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self.core.assign(list(partitions))

    async def unsubscribe(self) -> None:
        await self.core.unsubscribe()

    def assignment(self) -> set[TopicPartition]:
        return self.core.assignment()

    def subscription(self) -> set[str]:
        return self.core.subscription()

    # ---------------------------------------------------------------- reading

    async def poll(self, timeout: float | None = None, max_records: int | None = None) -> list[ConsumerRecord]:
        """As the blocking poll(): a list of records, [] after ``timeout`` seconds."""
        return await self.core.poll(timeout, max_records)

    async def poll_batches(self, timeout: float | None = None, max_records: int | None = None
                           ) -> list[FetchedBatch]:
        """As the blocking poll_batches(): the fetched record batches, undecoded."""
        return await self.core.poll(timeout, max_records, batches=True)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int = 0,
                      max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition (of ``partitions`` only, if given), waiting up to ``timeout_ms``."""
        records = await self.core.poll(timeout_ms / 1000, max_records, partitions or None)
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        last: TopicPartition | None = None
        batch: list[ConsumerRecord] = []
        for r in records:
            if last is None or r.topic != last.topic or r.partition != last.partition:
                last = TopicPartition(r.topic, r.partition)
                batch = out.setdefault(last, [])
            batch.append(r)
        return out

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions`` only, if given), waiting as long as it takes."""
        records = await self.core.poll(None, 1, partitions or None)
        return records[0]

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._stopped:
            for record in await self.core.poll(None):
                yield record

    def wakeup(self) -> None:
        self.core.wakeup()

    # ---------------------------------------------------------------- positions

    async def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        return await self.core.position(partition, timeout)

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self.core.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        self.core.seek_to_beginning(partitions or None)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        self.core.seek_to_end(partitions or None)

    def pause(self, *partitions: TopicPartition) -> None:
        self.core.pause(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.core.resume(partitions)

    def paused(self) -> set[TopicPartition]:
        return self.core.paused()

    def metrics(self) -> dict:
        """Kafka's consumer metrics by :class:`samsa.client.metrics.MetricName` (as ``Consumer.metrics``)."""
        return self.core.metrics()

    def highwater(self, partition: TopicPartition) -> int | None:
        return self.core.highwater(partition)

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await self.core.offsets_for_times(timestamps, timeout)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                                ) -> dict[TopicPartition, int]:
        return await self.core.beginning_offsets(partitions, timeout)

    async def end_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                          ) -> dict[TopicPartition, int]:
        return await self.core.end_offsets(partitions, timeout)

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        return await self.core.partitions_for(topic, timeout)

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        return await self.core.list_topics(timeout)

    # ---------------------------------------------------------------- commits

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None, timeout: float | None = None) -> None:
        await self.core.commit(offsets, timeout)

    def commit_async(self, offsets: Mapping[TopicPartition, Any] | None = None,
                     callback: Callable[[dict, BaseException | None], Any] | None = None):
        """An asyncio.Task of the commit; ``callback(offsets, exception)`` runs when done."""
        return self.core.commit_async(offsets, callback)

    async def committed(self, partitions: Iterable[TopicPartition] | TopicPartition, timeout: float | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if isinstance(partitions, TopicPartition):
            partitions = [partitions]
        return await self.core.committed(partitions, timeout)
