"""The asyncio share consumer (KIP-932) both faces run: :class:`AsyncShareConsumer`.

A member of a share group (``group.id``): records of the partitions the coordinator assigns
are *acquired* for this member for the group's lock duration and must be acknowledged —
ACCEPT (done), RELEASE (hand it out again, to anyone) or REJECT (never again). With
``share.acknowledgement.mode=implicit`` (the default) every record a poll() returned is
accepted by the next poll(), commit or close; with ``explicit`` the application calls
:meth:`acknowledge` for each, and poll() refuses to go on while one of the last batch is
unacknowledged. Acknowledgements travel on the next ShareFetch to the partition's leader, or
at once with :meth:`commit_sync`/:meth:`commit_async` (ShareAcknowledge).

poll() fetches on demand, as Java's share consumer does: records are acquired only when the
application asks for more, so a slow worker does not sit on locks others could use. Records
fetched and never handed out (close, unsubscribe) are released.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Awaitable, Callable, Iterable, Mapping

from samsa.client.config import SHARE_CONSUMER_KEYS, SHARE_CONSUMER_REFUSED, ClientConfig, ConfigError
from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.client.consumer_internals.async_consumer import WakeupError, _deserializer, consumer_cluster
from samsa.client.consumer_internals.records import ShareConsumerRecord
from samsa.client.consumer_internals.share_fetcher import ACCEPT, REJECT, RELEASE, ShareFetcher
from samsa.client.consumer_internals.share_member import ShareMember
from samsa.client.consumer_internals.subscription import IllegalStateError
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.timeouts import within

log = logging.getLogger(__name__)

_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError)
ACK_TYPES = {"ACCEPT": ACCEPT, "RELEASE": RELEASE, "REJECT": REJECT}
AckCallback = Callable[[dict[TopicPartition, set[int]], BaseException | None], Any]


def ack_type(kind: Any) -> int:
    """ACCEPT/RELEASE/REJECT as 1/2/3, a name, or an enum with one of those values or names
    (confluent-kafka's AcknowledgeType, Java's AcknowledgeType)."""
    if isinstance(kind, str) and kind.upper() in ACK_TYPES:
        return ACK_TYPES[kind.upper()]
    name = getattr(kind, "name", None)
    if isinstance(name, str) and name.upper() in ACK_TYPES:
        return ACK_TYPES[name.upper()]
    value = getattr(kind, "value", kind)
    if isinstance(value, int) and not isinstance(value, bool) and value in (ACCEPT, RELEASE, REJECT):
        return value
    raise ValueError(f"Unknown acknowledge type {kind!r}: one of ACCEPT, RELEASE, REJECT")


class AsyncShareConsumer:
    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any):
        self.config = c = ClientConfig(SHARE_CONSUMER_KEYS, dict(config or {}), **kwargs)
        for key in SHARE_CONSUMER_REFUSED:
            if key in c.originals:
                raise ConfigError(f"{key} is not supported for share consumers (share groups take their offsets, "
                                  f"isolation and timing from the group's share.* configs)")
        self.group_id: str | None = c["group.id"] or None
        if self.group_id is None:
            raise errors.InvalidGroupIdError("A share consumer needs a group.id")
        self.explicit = c["share.acknowledgement.mode"] == "explicit"
        self.max_poll_records = c["max.poll.records"]
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        configs = dict(c.originals)
        self.key_deserializer = _deserializer(c["key.deserializer"], configs, True)
        self.value_deserializer = _deserializer(c["value.deserializer"], configs, False)
        request_timeout = c["request.timeout.ms"]
        self.cluster = consumer_cluster(c, "samsa-share-consumer")
        self._wake = asyncio.Event()
        self._metadata_needed = asyncio.Event()
        self.max_poll_interval = c["max.poll.interval.ms"] / 1000
        self._last_poll: float | None = None
        self._polling = 0
        self.member = ShareMember(self.cluster, self.group_id, rack=c["client.rack"],
                                  request_timeout_ms=request_timeout, retry_backoff_ms=c["retry.backoff.ms"],
                                  on_change=self._changed, poll_expired=self._poll_expired,
                                  before_leaving=self._release_and_close_sessions)
        self.fetcher = ShareFetcher(self.cluster, self.group_id, lambda: self.member.member_id, c,
                                    self._metadata_needed.set, self._acked)
        self._buffer: deque[ShareConsumerRecord] = deque()
        self._handed: dict[tuple[str, int, int], ShareConsumerRecord] = {}  # handed out, not acknowledged
        self._fetches: dict[int, asyncio.Task] = {}
        self._background: set[asyncio.Task] = set()
        self._metadata_task: asyncio.Task | None = None
        self._ready = False
        self._start_lock = asyncio.Lock()
        self._closed = False
        self._wakeup = False
        self.acknowledgement_callback: AckCallback | None = None
        self.callbacks_due: list[tuple[dict[TopicPartition, set[int]], BaseException | None]] = []

    # ---------------------------------------------------------------- lifecycle

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")

    async def start(self) -> None:
        """Connect (once), and heartbeat if subscribed."""
        self._check_open()
        if not self._ready:
            async with self._start_lock:
                if not self._ready:
                    await self.cluster.bootstrap()
                    self._metadata_task = asyncio.get_running_loop().create_task(self._metadata_loop())
                    self._ready = True
        self.member.ensure_running()

    def _changed(self) -> None:
        self._wake.set()

    async def _release_and_close_sessions(self) -> None:
        """Leaving for want of poll(): everything held is released, the share sessions closed."""
        tasks = [t for t in self._fetches.values() if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._release_all(handed=True)
        await self.fetcher.close_sessions()

    def _poll_expired(self) -> bool:
        """More than ``max.poll.interval.ms`` since the application last called poll()."""
        return not self._polling and self._last_poll is not None and \
            asyncio.get_running_loop().time() - self._last_poll > self.max_poll_interval

    def wakeup(self) -> None:
        self._wakeup = True
        self._wake.set()

    def _acked(self, tp: TopicPartition, offsets: set[int], error: BaseException | None) -> None:
        if self.acknowledgement_callback is not None and offsets:
            self.callbacks_due.append(({tp: offsets}, error))

    async def _metadata_loop(self) -> None:
        max_age = self.config["metadata.max.age.ms"] / 1000
        while True:
            interval = max_age
            if any(t not in self.cluster.topics for t in self.member.topics):
                interval = min(interval, max(self.retry_backoff, 0.2))
            try:
                await within(self._metadata_needed.wait(), interval)
            except asyncio.TimeoutError:
                pass
            self._metadata_needed.clear()
            topics = set(self.member.topics) | {tp.topic for tp in self.member.assignment}
            try:
                await self.cluster.refresh(sorted(topics))
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("Metadata refresh failed: %s", e)
                await asyncio.sleep(self.retry_backoff)
                self._metadata_needed.set()
                continue
            self._wake.set()

    # ---------------------------------------------------------------- subscription

    def subscribe(self, topics: Iterable[str] | str) -> None:
        self._check_open()
        topics = [topics] if isinstance(topics, str) else list(topics)
        if any(not isinstance(t, str) or not t.strip() for t in topics):
            raise ValueError("Topic names must be non-empty strings")
        if not topics:
            raise ValueError("subscribe() needs at least one topic: use unsubscribe()")
        self.member.subscribe(topics)
        self._metadata_needed.set()
        if self._ready:
            self.member.ensure_running()

    def subscription(self) -> set[str]:
        return set(self.member.topics)

    def assignment(self) -> set[TopicPartition]:
        return set(self.member.assignment)

    async def unsubscribe(self) -> None:
        self._check_open()
        await self._settle()
        await self.fetcher.close_sessions()
        await self.member.unsubscribe()

    # ---------------------------------------------------------------- acknowledging

    def acknowledge(self, record: Any, kind: Any = ACCEPT) -> None:
        """Mark a record poll() returned (explicit mode): sent with the next poll or commit."""
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        self.acknowledge_offset(record.topic, record.partition, record.offset, kind)

    def acknowledge_offset(self, topic: str, partition: int, offset: int, kind: Any = ACCEPT) -> None:
        self._check_open()
        if not self.explicit:
            raise IllegalStateError("acknowledge() needs share.acknowledgement.mode=explicit")
        code = ack_type(kind)
        if self._handed.pop((topic, partition, offset), None) is None:
            raise IllegalStateError(f"The record at offset {offset} of {topic}-{partition} is not in flight "
                                    f"(not returned by poll(), or already acknowledged)")
        self.fetcher.acknowledge(TopicPartition(topic, partition), offset, code)

    def _accept_handed(self) -> None:
        """Implicit mode: what the last poll() returned is accepted."""
        if not self.explicit:
            for (topic, partition, offset) in self._handed:
                self.fetcher.acknowledge(TopicPartition(topic, partition), offset, ACCEPT)
            self._handed.clear()

    def _release_all(self, *, handed: bool) -> None:
        for r in self._buffer:
            self.fetcher.acknowledge(TopicPartition(r.topic, r.partition), r.offset, RELEASE)
        self._buffer.clear()
        if handed:
            for (topic, partition, offset) in self._handed:
                self.fetcher.acknowledge(TopicPartition(topic, partition), offset, RELEASE)
            self._handed.clear()

    async def commit_sync(self, timeout: float | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send every pending acknowledgement now (ShareAcknowledge) and wait for the answers:
        ``{partition: None or the error}``."""
        self._check_open()
        await self.start()
        self._accept_handed()
        timeout = self.config["default.api.timeout.ms"] / 1000 if timeout is None else timeout
        return await within(self.fetcher.acknowledge_now(), timeout)

    def commit_async(self) -> asyncio.Task:
        """Start sending the pending acknowledgements; the task's result as commit_sync's."""
        self._check_open()
        self._accept_handed()
        task = asyncio.get_running_loop().create_task(self.fetcher.acknowledge_now())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # ---------------------------------------------------------------- poll

    async def poll(self, timeout: float | None = None) -> list[ShareConsumerRecord]:
        """Up to ``max.poll.records`` acquired records; [] if none came within ``timeout`` s."""
        self._check_open()
        if not self.member.topics:
            raise IllegalStateError("Consumer is not subscribed to any topics.")
        loop = asyncio.get_running_loop()
        if self.member.left_for_poll:  # it left the group: what it held is no longer its own
            self.member.left_for_poll = False
            self._buffer.clear()
            self._handed.clear()
            self.fetcher.pending.clear()
        if self.explicit and self._handed:
            raise IllegalStateError("All records must be acknowledged in explicit acknowledgement mode "
                                    f"({len(self._handed)} of the last poll are not)")
        self._accept_handed()
        await self.start()
        self._polling += 1
        try:
            return await self._poll(loop, None if timeout is None else loop.time() + max(timeout, 0))
        finally:
            self._polling -= 1
            self._last_poll = loop.time()

    async def _poll(self, loop: asyncio.AbstractEventLoop, deadline: float | None) -> list[ShareConsumerRecord]:
        while True:
            if self.member.fatal is not None:
                raise self.member.fatal
            if self._wakeup:
                self._wakeup = False
                raise WakeupError()
            if self._buffer:
                return self._hand_out()
            self._wake.clear()
            self._start_fetches()
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return []
            try:
                await within(self._wake.wait(), left)
            except asyncio.TimeoutError:
                pass

    def _hand_out(self) -> list[ShareConsumerRecord]:
        out: list[ShareConsumerRecord] = []
        while self._buffer and len(out) < self.max_poll_records:
            r = self._buffer.popleft()
            out.append(r)
            self._handed[(r.topic, r.partition, r.offset)] = r
        return out

    def _start_fetches(self) -> None:
        assignment = self.member.assignment
        by_node = self.fetcher.leaders(assignment)
        for node, wanted in by_node.items():
            task = self._fetches.get(node)
            if task is None or task.done():
                self._fetches[node] = asyncio.get_running_loop().create_task(self._fetch(node, wanted))
        # Acknowledgements of partitions no longer read from anywhere go alone.
        fetched = set().union(*by_node.values()) if by_node else set()
        if any(tp not in fetched and acks for tp, acks in self.fetcher.pending.items()):
            task = asyncio.get_running_loop().create_task(self.fetcher.acknowledge_now())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _fetch(self, node: int, wanted: set[TopicPartition]) -> None:
        try:
            acquired = await self.fetcher.fetch(node, wanted)
        except errors.KafkaError as e:
            log.error("ShareFetch to node %d failed: %s", node, e)
            if isinstance(e, errors.UnsupportedVersionError) and self.member.fatal is None:
                self.member.fatal = e
            self._wake.set()
            await asyncio.sleep(self.retry_backoff)
            return
        for a in acquired:
            for r in a.records:
                record = self._deserialize(a.tp, r, a.delivery[r.offset])
                if record is not None:
                    self._buffer.append(record)
        self._wake.set()

    def _deserialize(self, tp: TopicPartition, r: Any, count: int) -> ShareConsumerRecord | None:
        key, value = r.key, r.value
        try:
            if self.key_deserializer is not None:
                key = self.key_deserializer.deserialize(r.topic, key, r.headers)
            if self.value_deserializer is not None:
                value = self.value_deserializer.deserialize(r.topic, value, r.headers)
        except Exception as e:  # noqa: BLE001 - any deserializer failure
            log.error("Record at offset %d of %s cannot be deserialized (%s): rejected", r.offset, tp, e)
            self.fetcher.acknowledge(tp, r.offset, REJECT)
            return None
        return ShareConsumerRecord(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, key, value,
                                   r.headers, r.leader_epoch, count)

    # ---------------------------------------------------------------- close

    async def _settle(self) -> None:
        """Wait for fetches in flight (what they bring is released), accept or release what
        was handed out."""
        tasks = [t for t in self._fetches.values() if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._fetches.clear()
        self._accept_handed()
        self._release_all(handed=True)

    async def close(self, timeout: float = 30.0) -> None:
        """Accept (implicit mode) what the last poll returned, release everything else,
        close the share sessions, leave the group, close the connections."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ready:
                await within(self._close(), timeout)
        except (asyncio.TimeoutError, *_NETWORK, errors.KafkaError) as e:
            log.warning("Closing the share consumer of group %s: %s", self.group_id, e)
        finally:
            await self.member.stop()
            for task in [self._metadata_task, *self._fetches.values(), *self._background]:
                if task is not None:
                    task.cancel()
            await asyncio.gather(*[t for t in [self._metadata_task, *self._fetches.values(), *self._background]
                                   if t is not None], return_exceptions=True)
            await self.member.close()
            await self.cluster.aclose()

    async def _close(self) -> None:
        await self.member.stop()
        await self._settle()
        await self.fetcher.close_sessions()
        if self.member.topics:
            await self.member.leave("the consumer is being closed")
