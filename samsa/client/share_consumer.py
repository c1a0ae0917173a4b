"""Samsa's share consumer (KIP-932, queues for Kafka), Kafka's ``KafkaShareConsumer`` in Python::

    consumer = ShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "workers"})
    consumer.subscribe(["jobs"])
    while True:
        for record in consumer.poll(1.0):
            handle(record.value)         # accepted by the next poll() (implicit mode)

Many consumers of one share group read the same partitions together; each record goes to one
of them at a time, is redelivered (``delivery_count`` + 1) if released or not acknowledged
within the group's lock duration, and is archived once accepted or rejected. With
``share.acknowledgement.mode=explicit`` each record is acknowledged with
:meth:`ShareConsumer.acknowledge` (``"ACCEPT"``, ``"RELEASE"``, ``"REJECT"``, or
:class:`AcknowledgeType`) and sent with the next poll() or :meth:`commit_sync`.

The work is done by :class:`~samsa.client.consumer_internals.async_share_consumer.AsyncShareConsumer`
on a private event loop in a background thread (:class:`samsa.aio.AIOShareConsumer` runs the
same core on the caller's loop). The acknowledgement commit callback runs in the thread that
calls poll(), commit_sync(), commit_async() or close(). One thread at a time; :meth:`wakeup`
is the one method for other threads.
"""

from __future__ import annotations

import enum
from concurrent.futures import Future
from typing import Any, Callable, Coroutine, Iterable, Mapping, TypeVar

from samsa.client.consumer_internals.async_consumer import WakeupError
from samsa.client.consumer_internals.async_share_consumer import AckCallback, AsyncShareConsumer
from samsa.client.consumer_internals.records import ShareConsumerRecord
from samsa.client.consumer_internals.subscription import IllegalStateError
from samsa.client.loop import LoopClient, LoopThread
from samsa.client.types import TopicPartition

__all__ = ["ShareConsumer", "ShareConsumerRecord", "AcknowledgeType", "IllegalStateError", "WakeupError"]

T = TypeVar("T")


class AcknowledgeType(enum.IntEnum):
    """How a record is acknowledged: Kafka's AcknowledgeType, with its wire values."""

    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


class ShareConsumer(LoopClient):
    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self._closed = False
        self._loop = LoopThread("samsa-share-consumer")
        try:
            self._core: AsyncShareConsumer = self._loop.run(self._make(config, kwargs))
        except BaseException:
            self._loop.stop()
            raise
        self.config = self._core.config

    async def _make(self, config: Mapping[str, Any] | None, kwargs: dict[str, Any]) -> AsyncShareConsumer:
        return AsyncShareConsumer(config, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise IllegalStateError("This consumer has already been closed.")
        try:
            return self._loop.submit(coro).result()
        finally:
            self._run_callbacks()

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        async def run() -> T:
            return fn(*args)
        return self._run(run())

    def _run_callbacks(self) -> None:
        core = self._core
        while core.callbacks_due and core.acknowledgement_callback is not None:
            offsets, error = core.callbacks_due.pop(0)
            core.acknowledgement_callback(offsets, error)

    # ---------------------------------------------------------------- subscription

    def subscribe(self, topics: Iterable[str] | str) -> None:
        """Join the share group for these topics (replacing any earlier subscription)."""
        topics = [topics] if isinstance(topics, str) else list(topics)
        if not topics:
            self.unsubscribe()
            return
        self._call(self._core.subscribe, topics)

    def unsubscribe(self) -> None:
        """Acknowledge what is pending, release what was not handed out, leave the group."""
        self._run(self._core.unsubscribe())

    def subscription(self) -> set[str]:
        return self._call(self._core.subscription)

    def assignment(self) -> set[TopicPartition]:
        """The partitions the share coordinator assigned this member (others read them too)."""
        return self._call(self._core.assignment)

    # ---------------------------------------------------------------- poll and acknowledge

    def poll(self, timeout: float | None = None) -> list[ShareConsumerRecord]:
        """Up to ``max.poll.records`` acquired records; [] if none came within ``timeout`` seconds
        (None: wait until some come)."""
        return self._run(self._core.poll(timeout))

    def __iter__(self):
        while True:
            yield from self.poll(None)

    def acknowledge(self, record: ShareConsumerRecord, type: Any = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        """Explicit mode: ACCEPT, RELEASE or REJECT a record the last poll() returned."""
        self._call(self._core.acknowledge, record, type)

    def acknowledge_offset(self, topic: str, partition: int, offset: int,
                           type: Any = AcknowledgeType.ACCEPT) -> None:  # noqa: A002
        self._call(self._core.acknowledge_offset, topic, partition, offset, type)

    def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send the pending acknowledgements (ShareAcknowledge) and wait: ``{partition: None or error}``."""
        return self._run(self._core.commit_sync(timeout))

    def commit_async(self) -> Future:
        """Start sending the pending acknowledgements; a Future of commit_sync's answer.
        The acknowledgement commit callback runs in a later call's thread."""
        async def start() -> Any:
            return self._core.commit_async()
        return self._loop.future_of(self._run(start()))

    def set_acknowledgement_commit_callback(self, callback: AckCallback | None) -> None:
        """``callback({partition: {offsets}}, exception or None)`` after each acknowledgement's answer."""
        self._core.acknowledgement_callback = callback

    def wakeup(self) -> None:
        """From any thread: the poll() in progress (or the next) raises WakeupError."""
        if not self._closed:
            self._loop.loop.call_soon_threadsafe(self._core.wakeup)

    # ---------------------------------------------------------------- close

    def close(self, timeout: float = 30.0) -> None:
        """Acknowledge what is pending (implicit mode: accept the last poll's records), release
        the rest, close the share sessions and leave the group."""
        if self._closed:
            return
        try:
            self._run(self._core.close(timeout))
        finally:
            self._closed = True
            self._loop.stop()
