"""Samsa's consumer, Kafka's consumer API in Python::

    consumer = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["events"])
    while True:
        for record in consumer.poll(1.0):
            print(record.offset, record.key, record.value)

Config is Kafka's dotted consumer keys with Kafka's defaults. The work is done by
:class:`~samsa.client.consumer_internals.async_consumer.AsyncConsumer` on a private event loop in a
background thread (the same core :class:`samsa.aio.AIOConsumer` runs on the caller's
loop); rebalance listener and commit callbacks run in the thread that calls poll().
Like Java's, a Consumer is meant for one thread at a time; :meth:`wakeup` is the one
method for other threads.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import re
import time
from concurrent.futures import Future
from typing import Any, Callable, Coroutine, Iterable, Mapping, TypeVar

from samsa.client.consumer_internals.assignors import (Assignment, CooperativeStickyAssignor, RangeAssignor,
                                                       RoundRobinAssignor, Subscription)
from samsa.client.consumer_internals.async_consumer import AsyncConsumer, OffsetAndTimestamp, WakeupError
from samsa.client.consumer_internals.fetcher import NoOffsetForPartitionError
from samsa.client.consumer_internals.group import CommitFailedError
from samsa.client.consumer_internals.records import (CREATE_TIME, LOG_APPEND_TIME, ConsumerRecord, OffsetAndMetadata,
                                                     FetchedBatch, RecordDeserializationError)
from samsa.client.consumer_internals.subscription import IllegalStateError
from samsa.client.loop import LoopClient, LoopThread
from samsa.client.types import PartitionInfo, TopicPartition

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition",
           "ConsumerRebalanceListener", "NoOffsetForPartitionError", "CommitFailedError", "IllegalStateError",
           "WakeupError", "RecordDeserializationError", "FetchedBatch", "CREATE_TIME", "LOG_APPEND_TIME",
           "RangeAssignor", "RoundRobinAssignor", "CooperativeStickyAssignor", "Subscription", "Assignment"]

T = TypeVar("T")
_DONE = object()


class ConsumerRebalanceListener:
    """Override what you need. ``on_partitions_lost`` defaults to ``on_partitions_revoked``."""

    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None:
        pass

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        pass

    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None:
        self.on_partitions_revoked(partitions)


class Consumer(LoopClient):
    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self._callbacks: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._loop = LoopThread("samsa-consumer")
        try:
            self._core: AsyncConsumer = self._loop.run(self._make(config, kwargs))
        except BaseException:
            self._loop.stop()
            raise
        self.config = self._core.config

    async def _make(self, config: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> AsyncConsumer:
        return AsyncConsumer(config, invoke=self._in_caller, **kwargs)

    async def _in_caller(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a listener or commit callback in the thread that is inside poll()."""
        fut = asyncio.get_running_loop().create_future()
        self._callbacks.put((fn, args, fut))
        return await fut

    def _run(self, coro: Coroutine[Any, Any, T], *, callbacks: bool = False) -> T:
        if self._closed:
            coro.close()
            raise IllegalStateError("This consumer has already been closed.")
        done = self._loop.submit(coro)
        if not callbacks:
            return done.result()
        done.add_done_callback(lambda _f: self._callbacks.put(_DONE))
        while True:
            item = self._callbacks.get()
            if item is _DONE:
                if done.done():
                    return done.result()
                continue  # left by an earlier call
            self._call_back(*item)

    def _call_back(self, fn: Callable[..., Any], args: tuple, fut: asyncio.Future) -> None:
        try:
            result: Any = fn(*args)
            if inspect.isawaitable(result):
                raise TypeError(f"{fn!r} is a coroutine function: use samsa.aio.AIOConsumer for async callbacks")
        except BaseException as e:  # noqa: BLE001 - handed back to the loop
            error = e
            self._loop.loop.call_soon_threadsafe(lambda: fut.done() or fut.set_exception(error))
        else:
            self._loop.loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(result))

    def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A plain core method, run on the loop (the core is not thread-safe)."""
        async def run() -> T:
            return fn(*args, **kwargs)
        return self._run(run())

    # ---------------------------------------------------------------- subscribe / assign

    def subscribe(self, topics: Iterable[str] | str | re.Pattern | None = None, pattern: str | re.Pattern | None = None,
                  listener: Any = None) -> None:
        """Subscribe to topic names or a ``re`` pattern, as a member of ``group.id``.
        ``listener`` has ``on_partitions_revoked/assigned/lost(partitions)``. No topics and
        no pattern: as unsubscribe()."""
        if topics is not None and not isinstance(topics, (str, re.Pattern)):
            topics = list(topics)
            if not topics and pattern is None:
                self.unsubscribe()
                return
        self._call(self._core.subscribe, topics, pattern, listener)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (no group rebalancing); [] is as unsubscribe()."""
        partitions = list(partitions)
        if not partitions:
            self.unsubscribe()
            return
        self._call(self._core.assign, partitions)

    def unsubscribe(self) -> None:
        self._run(self._core.unsubscribe(), callbacks=True)

    def assignment(self) -> set[TopicPartition]:
        return self._call(self._core.assignment)

    def subscription(self) -> set[str]:
        return self._call(self._core.subscription)

    def group_metadata(self) -> Any:
        """What ``Producer.send_offsets_to_transaction`` needs of this consumer's group membership."""
        return self._call(self._core.group_metadata)

    # ---------------------------------------------------------------- poll

    def poll(self, timeout: float | None = None, max_records: int | None = None) -> list[ConsumerRecord]:
        """Up to ``max.poll.records`` records; [] if none came within ``timeout`` seconds
        (None: wait until some come)."""
        return self._poll(timeout, max_records, False)

    def poll_batches(self, timeout: float | None = None, max_records: int | None = None) -> list[FetchedBatch]:
        """As :meth:`poll`, but the fetched record batches themselves, CRC-checked and
        decompressed, control batches and aborted transactions left out: for readers that
        decode records into columns (the Spark connector). A batch may start before the
        position; its records before it are the caller's to skip. Interceptors are not run."""
        return self._poll(timeout, max_records, True)

    def _poll(self, timeout: float | None, max_records: int | None, batches: bool) -> list[Any]:
        if not self._closed and self._callbacks.empty():
            # Let the loop thread take the GIL if it waits for it (a fetch response to read),
            # instead of waiting for the interpreter's switch interval.
            time.sleep(0)
            found = self._core.poll_nowait(max_records, self._kick, batches)
            if found:
                return found
        return self._run(self._core.poll(timeout, max_records, batches=batches), callbacks=True)

    def _kick(self) -> None:
        self._loop.loop.call_soon_threadsafe(self._core.fetcher.kick)

    def __iter__(self):
        while True:
            yield from self.poll(None)

    def wakeup(self) -> None:
        """From any thread: the poll() in progress (or the next) raises WakeupError."""
        if not self._closed:
            self._loop.loop.call_soon_threadsafe(self._core.wakeup)

    # ---------------------------------------------------------------- positions

    def position(self, partition: TopicPartition, timeout: float | None = None) -> int:
        return self._run(self._core.position(partition, timeout))

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._call(self._core.seek, partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._call(self._core.seek_to_beginning, None if partitions is None else list(partitions))

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._call(self._core.seek_to_end, None if partitions is None else list(partitions))

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._core.pause, list(partitions))

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        self._call(self._core.resume, list(partitions))

    def paused(self) -> set[TopicPartition]:
        return self._call(self._core.paused)

    def metrics(self) -> dict:
        """Kafka's consumer metrics (records-lag-max, fetch-latency-avg, records-consumed-rate, ...) by
        :class:`samsa.client.metrics.MetricName`; rates per second, times in ms, over the last 30 to 60 s."""
        return self._core.metrics()

    def highwater(self, partition: TopicPartition) -> int | None:
        return self._call(self._core.highwater, partition)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._run(self._core.offsets_for_times(dict(timestamps), timeout))

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                          ) -> dict[TopicPartition, int]:
        return self._run(self._core.beginning_offsets(list(partitions), timeout))

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                    ) -> dict[TopicPartition, int]:
        return self._run(self._core.end_offsets(list(partitions), timeout))

    def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        return self._run(self._core.partitions_for(topic, timeout))

    def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        return self._run(self._core.list_topics(timeout))

    # ---------------------------------------------------------------- commits

    def commit(self, offsets: Mapping[TopicPartition, Any] | None = None, timeout: float | None = None) -> None:
        """Commit ``{tp: offset | OffsetAndMetadata(offset, metadata)}``, or every position
        when None; blocks until the coordinator answers."""
        self._run(self._core.commit(None if offsets is None else dict(offsets), timeout))

    def commit_async(self, offsets: Mapping[TopicPartition, Any] | None = None,
                     callback: Callable[[dict, BaseException | None], Any] | None = None) -> Future:
        """Start a commit and return at once: a Future of the offsets committed;
        ``callback(offsets, exception)`` runs in the thread of a later poll()."""
        async def start() -> Any:
            return self._core.commit_async(None if offsets is None else dict(offsets), callback)
        return self._loop.future_of(self._run(start()))

    def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return self._run(self._core.committed(list(partitions), timeout))

    # ---------------------------------------------------------------- close

    def close(self, timeout: float = 30.0) -> None:
        """Commit (with auto-commit), revoke, leave the group and release everything."""
        if self._closed:
            return
        try:
            self._run(self._core.close(timeout), callbacks=True)
        finally:
            self._closed = True
            self._loop.stop()
