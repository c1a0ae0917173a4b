"""The asyncio consumer both faces run: :class:`AsyncConsumer`.

poll() drives the consumer as Java's does: it joins (or rejoins) the group when needed,
looks up missing positions (committed offsets, else ``auto.offset.reset``), commits
automatically every ``auto.commit.interval.ms``, then returns buffered records or waits
for the fetcher to bring some. Heartbeats, fetches and metadata refreshes run as
background tasks on the same event loop.

Rebalance listener callbacks go through ``invoke(fn, partitions)``: the asyncio face
calls them on the loop (awaiting coroutines), the blocking face hands them to the thread
that called poll(), so a callback may itself call the consumer (commit in
``on_partitions_revoked``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping

from samsa.client.config import CONSUMER_KEYS, ClientConfig, ConfigError, load_plugins, load_serde
from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.client.consumer_internals.assignors import load_assignors
from samsa.client.consumer_internals.consumer_metrics import ConsumerMetrics
from samsa.client.consumer_internals.fetcher import EARLIEST, LATEST, Fetcher, NoOffsetForPartitionError
from samsa.client.consumer_internals.consumer_protocol import ConsumerProtocolMember
from samsa.client.consumer_internals.group import EAGER, CommitFailedError, GroupMember
from samsa.client.consumer_internals.records import ConsumerRecord, OffsetAndMetadata
from samsa.client.consumer_internals.subscription import IllegalStateError, SubscriptionState
from samsa.client.metadata import ClusterMetadata
from samsa.client.metrics import MetricName, default_client_id
from samsa.client.types import ConsumerGroupMetadata, PartitionInfo, TopicPartition
from samsa.client.security import security_of
from samsa.protocol import errors
from samsa.timeouts import within

log = logging.getLogger(__name__)

Invoke = Callable[..., Awaitable[Any]]
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError)

# Java's built-in deserializers by class name, to ours (None: bytes pass through).
_SER = "org.apache.kafka.common.serialization."
JAVA_DESERIALIZERS: dict[str, str | None] = {
    _SER + "ByteArrayDeserializer": None,
    _SER + "BytesDeserializer": None,
    _SER + "ByteBufferDeserializer": None,
    _SER + "StringDeserializer": "samsa.serialization.StringDeserializer",
    _SER + "IntegerDeserializer": "samsa.serialization.IntegerDeserializer",
    _SER + "LongDeserializer": "samsa.serialization.LongDeserializer",
    _SER + "ShortDeserializer": "samsa.serialization.ShortDeserializer",
    _SER + "FloatDeserializer": "samsa.serialization.FloatDeserializer",
    _SER + "DoubleDeserializer": "samsa.serialization.DoubleDeserializer",
}


class WakeupError(Exception):
    """poll() was interrupted by wakeup() (Java's WakeupException)."""


class OffsetAndTimestamp(tuple):
    """``offsets_for_times`` answer: the first offset at or after the timestamp."""

    __slots__ = ()

    def __new__(cls, offset: int, timestamp: int, leader_epoch: int | None = None):
        return tuple.__new__(cls, (offset, timestamp, leader_epoch))

    offset = property(lambda self: self[0])
    timestamp = property(lambda self: self[1])
    leader_epoch = property(lambda self: self[2])

    def __repr__(self) -> str:
        return f"OffsetAndTimestamp(offset={self[0]}, timestamp={self[1]}, leader_epoch={self[2]})"


async def call_listener(fn: Callable[..., Any], *args: Any) -> Any:
    """The asyncio face's way to run a callback: on the loop, awaited if it is a coroutine."""
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def consumer_cluster(c: ClientConfig, default_client_id: str) -> ClusterMetadata:
    """The cluster metadata and connections of a consumer or share consumer, from its config."""
    request_timeout = c["request.timeout.ms"]
    return ClusterMetadata(c["bootstrap.servers"], client_id=c["client.id"] or default_client_id,
                           request_timeout_ms=request_timeout,
                           connect_timeout_ms=c["socket.connection.setup.timeout.ms"],
                           bootstrap_timeout_ms=min(request_timeout, c["default.api.timeout.ms"]),
                           retry_backoff_ms=c["retry.backoff.ms"],
                           reconnect_backoff_ms=c["reconnect.backoff.ms"],
                           reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"],
                           metadata_max_age_ms=c["metadata.max.age.ms"], security=security_of(c))


def _deserializer(spec: Any, configs: dict[str, Any], is_key: bool) -> Any:
    if isinstance(spec, str) and spec.strip() in JAVA_DESERIALIZERS:
        spec = JAVA_DESERIALIZERS[spec.strip()]
    return None if spec is None else load_serde(spec, configs, is_key=is_key, method="deserialize")


class AsyncConsumer:
    def __init__(self, config: Mapping[str, Any] | None = None, *, invoke: Invoke | None = None, **kwargs: Any):
        self.config = c = ClientConfig(CONSUMER_KEYS, dict(config or {}), **kwargs)
        configs = dict(c.originals)
        self.group_id: str | None = c["group.id"] or None
        if self.group_id is None:
            if c["enable.auto.commit"] and "enable.auto.commit" in c.originals:
                raise ConfigError("enable.auto.commit cannot be set to true when default group id (null) is used.")
            if c["group.instance.id"]:
                raise ConfigError("group.instance.id needs a group.id")
        if c["group.protocol"] == "consumer":
            # The broker assigns and times sessions (KIP-848): Java refuses these keys too.
            for key in ("session.timeout.ms", "heartbeat.interval.ms", "partition.assignment.strategy"):
                if key in c.originals:
                    raise ConfigError(f"{key} is not supported when group.protocol=consumer (the broker's "
                                      f"group.consumer.* settings apply)")
        self.auto_commit = bool(c["enable.auto.commit"] and self.group_id)
        self.auto_commit_interval = c["auto.commit.interval.ms"] / 1000
        self.max_poll_records = c["max.poll.records"]
        self.max_poll_interval = c["max.poll.interval.ms"] / 1000
        self.api_timeout = c["default.api.timeout.ms"] / 1000
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        self.key_deserializer = _deserializer(c["key.deserializer"], configs, True)
        self.value_deserializer = _deserializer(c["value.deserializer"], configs, False)
        self.interceptors = load_plugins(c["interceptor.classes"], configs)
        self.assignors = load_assignors(c["partition.assignment.strategy"], configs)
        self.subs = SubscriptionState(c["auto.offset.reset"])
        self.cluster = consumer_cluster(c, "samsa-consumer")
        self._wake = asyncio.Event()
        self._metadata_needed = asyncio.Event()
        client_id = c["client.id"] or default_client_id("consumer", self.group_id)
        sensors = ConsumerMetrics(client_id, lambda: len(self.subs.assignment))
        self.fetcher = Fetcher(self.cluster, self.subs, c, key_deserializer=self.key_deserializer,
                               value_deserializer=self.value_deserializer, request_metadata=self.request_metadata,
                               metrics=sensors)
        self.fetcher.data_ready = self._wake  # new data wakes poll()
        self.group: GroupMember | None = None
        if self.group_id:
            self.group = (ConsumerProtocolMember if c["group.protocol"] == "consumer" else GroupMember)(self)
        self._invoke = invoke or call_listener
        self._start_task: asyncio.Task | None = None
        self._metadata_task: asyncio.Task | None = None
        self._positions_task: asyncio.Task | None = None
        self._background: set[asyncio.Task] = set()
        self._ready = False
        self._closing = self._closed = False
        self._last_poll: float | None = None
        self._polling = 0
        self._next_auto_commit: float | None = None
        self._wakeup = False

    def metrics(self) -> dict[MetricName, float]:
        """Kafka's consumer metrics (records-lag-max, fetch-latency-avg, ...) by name, as they are now."""
        return self.fetcher.metrics.registry.values()

    # ---------------------------------------------------------------- lifecycle

    def _check_open(self, *, closing_ok: bool = False) -> None:
        """Closed consumers refuse every call; while closing, only what a rebalance
        listener may do from on_partitions_revoked (commit, positions) still works."""
        if self._closed or (self._closing and not closing_ok):
            raise IllegalStateError("This consumer has already been closed.")

    async def start(self, timeout: float | None = None) -> None:
        """Connect to the cluster (waits up to the bootstrap timeout, then raises)."""
        self._check_open()
        if not await self._ready_by(None if timeout is None else asyncio.get_running_loop().time() + timeout):
            raise KafkaTimeoutError(f"Could not reach {self.cluster.bootstrap_text} in {timeout} s")

    async def _ready_by(self, deadline: float | None) -> bool:
        if self._ready:
            return True
        task = self._start_task
        if task is None:
            task = self._start_task = asyncio.get_running_loop().create_task(self._bootstrap())
        try:
            if deadline is None:
                await asyncio.shield(task)
            else:
                await within(asyncio.shield(task), max(deadline - asyncio.get_running_loop().time(), 0))
        except asyncio.TimeoutError:
            return False
        except BaseException:
            if task.done():
                self._start_task = None  # the next call tries again
            raise
        return True

    async def _bootstrap(self) -> None:
        await self.cluster.bootstrap()
        self.fetcher.start()
        self._metadata_task = asyncio.get_running_loop().create_task(self._metadata_loop())
        self._ready = True
        if self.subs.pattern is not None:
            self._metadata_needed.set()

    async def _need_ready(self, timeout: float | None = None) -> float:
        """Wait for the cluster (bounded by ``default.api.timeout.ms``); the deadline to use."""
        self._check_open(closing_ok=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.api_timeout if timeout is None else timeout)
        if not await self._ready_by(deadline):
            raise KafkaTimeoutError(f"Could not reach any of {self.cluster.bootstrap_text} in time")
        return deadline

    def wake_poll(self) -> None:
        self._wake.set()

    def wakeup(self) -> None:
        """Make a poll() in progress (or the next one) raise WakeupError."""
        self._wakeup = True
        self._wake.set()

    def poll_expired(self) -> bool:
        """More than ``max.poll.interval.ms`` since the application last called poll()
        (waiting inside poll() counts as polling)."""
        return not self._polling and self._last_poll is not None and \
            asyncio.get_running_loop().time() - self._last_poll > self.max_poll_interval

    async def close(self, timeout: float = 30.0) -> None:
        """Commit (with auto-commit), revoke, leave the group, close every connection."""
        if self._closing or self._closed:
            return
        self._closing = True
        try:
            if self._ready and self.group is not None:
                await self._close_group(timeout)
        finally:
            for task in [self._metadata_task, self._positions_task, self._start_task, *self._background]:
                if task is not None:
                    task.cancel()
            await asyncio.gather(*[t for t in [self._metadata_task, self._positions_task, self._start_task,
                                               *self._background] if t is not None], return_exceptions=True)
            await self.fetcher.close()
            await self.cluster.aclose()
            for plugin in [*self.interceptors, self.key_deserializer, self.value_deserializer]:
                closer = getattr(plugin, "close", None)
                if callable(closer):
                    try:
                        closer()
                    except Exception:  # noqa: BLE001
                        log.exception("Failed to close %s", plugin)
            self._closed = True

    async def _close_group(self, timeout: float) -> None:
        group = self.group
        assert group is not None
        await group.stop_tasks()
        owned = list(self.subs.assignment)
        if self.auto_commit and owned and not group.lost:
            await self.commit_quietly(owned, timeout=timeout)
        if self.subs.subscribed and owned:
            await self.invoke_listener("on_partitions_lost" if group.lost else "on_partitions_revoked", owned)
        if self.subs.subscribed:
            await group.leave("the consumer is being closed")
        await group.close()

    # ---------------------------------------------------------------- subscribe / assign

    def subscribe(self, topics: Iterable[str] | str | re.Pattern | None = None, pattern: str | re.Pattern | None = None,
                  listener: Any = None) -> None:
        """Join the group for ``topics`` (names), or for every topic matching ``pattern``
        (a ``re`` pattern, or a string starting with ``^`` as librdkafka takes it)."""
        self._check_open()
        if self.group is None:
            raise errors.InvalidGroupIdError("To use the group management or offset commit APIs, you must "
                                             "provide a valid group.id in the consumer configuration.")
        if isinstance(topics, re.Pattern):
            topics, pattern = None, topics
        elif isinstance(topics, str):
            if topics.startswith("^"):
                topics, pattern = None, topics
            else:
                topics = [topics]
        if isinstance(pattern, str):
            pattern = re.compile(pattern)
        names = list(topics or [])
        for t in names:
            if not isinstance(t, str) or not t.strip():
                raise ValueError("Topic collection to subscribe to cannot contain null or empty topic")
        if pattern is None and not names:
            self._unsubscribe_local()
            return
        changed = self.subs.subscribe(names, pattern, listener)
        if pattern is not None:
            self.subs.match_pattern(self._visible_topics())
        if changed:
            self.group.request_rejoin("the subscription changed")
            self.request_metadata()
        log.info("Subscribed to %s", f"pattern '{pattern.pattern}'" if pattern is not None else f"topic(s): {', '.join(names)}")

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, outside any group rebalancing."""
        self._check_open()
        tps = list(dict.fromkeys(partitions))
        for tp in tps:
            if not isinstance(tp, TopicPartition) or not tp.topic:
                raise ValueError(f"Topic partitions to assign to cannot have null or empty topic: {tp!r}")
        if not tps:
            self._unsubscribe_local()
            return
        self.subs.assign_from_user(tps)
        self.request_metadata()
        self.fetcher.kick()
        self._wake.set()

    def _unsubscribe_local(self) -> None:
        """subscribe([]) / assign([]): as unsubscribe(); a group member leaves in the background."""
        if self.subs.subscribed and self.group is not None:
            self._spawn(self.unsubscribe())
            return
        self.subs.unsubscribe()

    async def unsubscribe(self) -> None:
        self._check_open()
        group = self.group
        if group is not None and self.subs.subscribed:
            await group.stop_tasks()
            owned = list(self.subs.assignment)
            if owned:
                await self.invoke_listener("on_partitions_lost" if group.lost else "on_partitions_revoked", owned)
            group.lost = False
            if self._ready:
                await group.leave("the consumer unsubscribed from all topics")
        self.subs.unsubscribe()
        self.fetcher.kick()

    def assignment(self) -> set[TopicPartition]:
        return set(self.subs.assignment)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group, generation and member a transactional producer commits offsets for
        (``Producer.send_offsets_to_transaction``), as Java's ``groupMetadata()``."""
        if self.group_id is None:
            raise errors.InvalidGroupIdError("group_metadata() needs a group.id")
        g = self.group
        if g is None:
            return ConsumerGroupMetadata(self.group_id)
        return ConsumerGroupMetadata(self.group_id, g.generation, g.member_id, g.instance_id)

    def subscription(self) -> set[str]:
        return set(self.subs.topics) if self.subs.subscribed else set()

    # ---------------------------------------------------------------- poll

    async def poll(self, timeout: float | None = 0.0, max_records: int | None = None,
                   partitions: Iterable[TopicPartition] | None = None, *, batches: bool = False) -> list[Any]:
        """Records, up to ``max.poll.records`` (or ``max_records``); [] once ``timeout``
        seconds pass without any (None: wait for records). ``batches``: whole record batches
        undecoded (:class:`FetchedBatch`), for columnar readers; interceptors do not see them."""
        self._check_open()
        if self.subs.mode is None:
            raise IllegalStateError("Consumer is not subscribed to any topics or assigned any partitions")
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._last_poll = now
        self._polling += 1
        try:
            return await self._poll(now, timeout, max_records, partitions, batches)
        finally:
            self._polling -= 1
            self._last_poll = loop.time()

    async def _poll(self, now: float, timeout: float | None, max_records: int | None,
                    partitions: Iterable[TopicPartition] | None, batches: bool) -> list[Any]:
        loop = asyncio.get_running_loop()
        deadline = float("inf") if timeout is None else now + max(timeout, 0.0)
        limit = max_records or self.max_poll_records
        only = set(partitions) if partitions is not None else None
        if not self._ready and not await self._ready_by(None if timeout is None else deadline):
            return []
        if self.auto_commit:
            self._maybe_auto_commit(now)
        group = self.group
        while True:
            self._wake.clear()
            if self._wakeup:
                self._wakeup = False
                raise WakeupError("poll() was woken up")
            if group is not None and self.subs.subscribed and group.needs_join():
                # Eager: nothing to read until the rebalance is done. Cooperative: keep
                # reading the partitions still held while it goes on.
                wait = deadline - loop.time() if group.protocol == EAGER or not self.subs.assignment else 0.0
                if not await group.ensure_active(min(wait, 3600.0)) and group.protocol == EAGER:
                    if loop.time() >= deadline:
                        return []
                    continue
            if any(s.position is None for s in self.subs.assignment.values()):
                await self._update_positions(deadline)
            records = self.fetcher.drain(limit, batches=batches) if only is None else \
                self._drain_only(limit, only, batches)
            if records:
                self.fetcher.kick()
                return self._on_consume(records) if self.interceptors and not batches else records
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            if self._wake.is_set():
                continue
            try:
                await within(self._wake.wait(), min(remaining, 3600.0))
            except asyncio.TimeoutError:
                pass

    def poll_nowait(self, max_records: int | None, wake: Callable[[], None], batches: bool = False
                    ) -> list[Any] | None:
        """The blocking face's fast path, called from its own thread while the loop runs:
        buffered records when poll() would have nothing else to do (no rebalance, no
        position to look up, no auto-commit due), else None. Only buffers are touched
        (deque pops, position updates); ``wake`` is a threadsafe kick of the fetch loop."""
        if self._closing or not self._ready or self._wakeup or self.subs.mode is None:
            return None
        now = time.monotonic()  # what the event loop's time() reads
        group = self.group
        if group is not None and (group.fatal is not None or group.joining or
                                  (self.subs.subscribed and group.needs_join())):
            return None
        if self.auto_commit and (self._next_auto_commit is None or now >= self._next_auto_commit):
            return None
        task = self._positions_task
        if (task is not None and not task.done()) or any(s.position is None for s in self.subs.assignment.values()):
            return None
        records = self.fetcher.drain(max_records or self.max_poll_records, wake, batches=batches)
        if not records:
            return None
        self._last_poll = now
        return self._on_consume(records) if self.interceptors and not batches else records

    def _drain_only(self, limit: int, only: set[TopicPartition], batches: bool = False) -> list[Any]:
        paused = []
        for tp, s in self.subs.assignment.items():
            if tp not in only and not s.paused:
                s.paused = True
                paused.append(s)
        try:
            return self.fetcher.drain(limit, batches=batches)
        finally:
            for s in paused:
                s.paused = False

    def _on_consume(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        for interceptor in self.interceptors:
            try:
                records = interceptor.on_consume(records) or records
            except Exception:  # noqa: BLE001 - as Java: logged, never raised
                log.exception("Error executing interceptor onConsume callback")
        return records

    # ---------------------------------------------------------------- positions

    async def _update_positions(self, deadline: float) -> None:
        task = self._positions_task
        if task is None or task.done():
            task = self._positions_task = asyncio.get_running_loop().create_task(self._resolve_positions())
            task.add_done_callback(lambda _t: self._wake.set())
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            await within(asyncio.shield(task), max(min(remaining, 3600.0), 0))
        except asyncio.TimeoutError:
            return
        finally:
            if task.done() and self._positions_task is task:
                self._positions_task = None

    async def _resolve_positions(self, only: Iterable[TopicPartition] | None = None) -> None:
        """Committed offsets where the group has them, else ``auto.offset.reset``."""
        wanted = set(only) if only is not None else None
        missing = {tp: s.epoch for tp, s in self.subs.assignment.items()
                   if s.position is None and (wanted is None or tp in wanted)}
        lookup = [tp for tp in missing if self.subs.assignment[tp].reset_strategy is None]
        if self.group is not None and lookup:
            committed = await self.group.fetch_committed(lookup, self.api_timeout)
            for tp in lookup:
                s = self.subs.assignment.get(tp)
                if s is None or s.epoch != missing[tp] or s.position is not None:
                    continue
                om = committed.get(tp)
                if om is not None:
                    log.info("Setting offset for partition %s to the committed offset %d", tp, om.offset)
                    s.seek(om.offset, om.leader_epoch)
                    missing.pop(tp)
        to_reset = []
        undefined = []
        for tp, epoch in missing.items():
            s = self.subs.assignment.get(tp)
            if s is None or s.epoch != epoch or s.position is not None:
                continue
            if s.reset_strategy is None:
                if self.subs.default_reset == "none":
                    undefined.append(tp)
                    continue
                s.reset_strategy = self.subs.default_reset
            to_reset.append(tp)
        if to_reset:
            await self.fetcher.reset_positions(to_reset, self.api_timeout)
        if undefined:
            raise NoOffsetForPartitionError(sorted(undefined))
        self.fetcher.kick()

    async def position(self, tp: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record poll() returns for ``tp`` (looked up if unknown)."""
        s = self.subs.state(tp)
        if s.position is None:
            deadline = await self._need_ready(timeout)
            loop = asyncio.get_running_loop()
            try:
                await within(self._resolve_positions([tp]), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise KafkaTimeoutError(f"Timeout of {int((timeout or self.api_timeout) * 1000)}ms expired "
                                        f"before the position for partition {tp} could be determined") from None
            s = self.subs.state(tp)
        assert s.position is not None
        return s.position

    def seek(self, tp: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        self._check_open(closing_ok=True)
        epoch = None
        if isinstance(offset, OffsetAndMetadata):
            offset, epoch = offset.offset, offset.leader_epoch
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must not be a negative number: {offset!r}")
        self.subs.state(tp).seek(offset, epoch)
        log.info("Seeking to offset %d for partition %s", offset, tp)
        self.fetcher.kick()
        self._wake.set()

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, strategy: str) -> None:
        self._check_open()
        tps = list(self.subs.assignment) if partitions is None else list(partitions)
        for tp in tps:
            s = self.subs.state(tp)
            s.clear_position()
            s.reset_strategy = strategy
        self._wake.set()

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        self._seek_to(partitions, "latest")

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subs.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self.subs.state(tp).paused = False
        self.fetcher.kick()
        self._wake.set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.subs.assignment.items() if s.paused}

    def highwater(self, tp: TopicPartition) -> int | None:
        """The high watermark the last fetch of ``tp`` saw (None before any)."""
        s = self.subs.state(tp)
        return s.high_watermark if s.high_watermark >= 0 else None

    # ---------------------------------------------------------------- offsets lookups

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout: float | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
        deadline = await self._need_ready(timeout)
        found = await self.fetcher.list_offsets(dict(timestamps), deadline - asyncio.get_running_loop().time())
        return {tp: (OffsetAndTimestamp(*found[tp]) if tp in found and found[tp][0] >= 0 else None)
                for tp in timestamps}

    async def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                                ) -> dict[TopicPartition, int]:
        return await self._list(partitions, EARLIEST, timeout)

    async def end_offsets(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                          ) -> dict[TopicPartition, int]:
        return await self._list(partitions, LATEST, timeout)

    async def _list(self, partitions: Iterable[TopicPartition], spec: int, timeout: float | None
                    ) -> dict[TopicPartition, int]:
        tps = list(partitions)
        deadline = await self._need_ready(timeout)
        found = await self.fetcher.list_offsets({tp: spec for tp in tps}, deadline - asyncio.get_running_loop().time())
        return {tp: found[tp][0] for tp in tps}

    # ---------------------------------------------------------------- commits

    def _need_group(self) -> GroupMember:
        if self.group is None:
            raise errors.InvalidGroupIdError("To use the group management or offset commit APIs, you must "
                                             "provide a valid group.id in the consumer configuration.")
        return self.group

    def _offsets(self, offsets: Mapping[TopicPartition, Any] | None) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            return {tp: OffsetAndMetadata(s.position, "", s.leader_epoch)
                    for tp, s in self.subs.assignment.items() if s.position is not None}
        out = {}
        for tp, o in offsets.items():
            if isinstance(o, OffsetAndMetadata):
                om = o
            elif isinstance(o, int):
                om = OffsetAndMetadata(o)
            elif isinstance(o, tuple):
                om = OffsetAndMetadata(*o)
            else:
                raise TypeError(f"offset for {tp} must be an int or OffsetAndMetadata, not {type(o).__name__}")
            if om.offset < 0:
                raise ValueError(f"Invalid negative offset {om.offset} for partition {tp}")
            out[tp] = om
        return out

    async def commit(self, offsets: Mapping[TopicPartition, Any] | None = None, timeout: float | None = None) -> None:
        """Commit ``offsets`` ({tp: offset | OffsetAndMetadata}), or every position when None."""
        group = self._need_group()
        to_commit = self._offsets(offsets)
        deadline = await self._need_ready(timeout)
        await group.commit(to_commit, deadline - asyncio.get_running_loop().time())
        self._on_commit(to_commit)

    def commit_async(self, offsets: Mapping[TopicPartition, Any] | None = None,
                     callback: Callable[[dict, BaseException | None], Any] | None = None) -> asyncio.Task:
        """Start a commit; ``callback(offsets, exception)`` runs when it is done."""
        self._check_open(closing_ok=True)
        self._need_group()
        to_commit = self._offsets(offsets)

        async def run() -> dict[TopicPartition, OffsetAndMetadata]:
            error: BaseException | None = None
            try:
                deadline = await self._need_ready()
                await self.group.commit(to_commit, deadline - asyncio.get_running_loop().time())  # type: ignore[union-attr]
                self._on_commit(to_commit)
            except Exception as e:  # noqa: BLE001 - handed to the callback
                error = e
            if callback is not None:
                self._spawn(self._commit_callback(callback, to_commit, error))
            if error is not None:
                raise error
            return to_commit

        return self._spawn(run())

    async def _commit_callback(self, callback: Callable[..., Any], offsets: dict, error: BaseException | None) -> None:
        try:
            await self._invoke(callback, offsets, error)
        except Exception:  # noqa: BLE001
            log.exception("Offset commit callback failed")

    def _spawn(self, coro: Any) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: no "never retrieved" noise
        return task

    def _on_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        for interceptor in self.interceptors:
            try:
                interceptor.on_commit(offsets)
            except Exception:  # noqa: BLE001
                log.exception("Error executing interceptor onCommit callback")

    def _maybe_auto_commit(self, now: float) -> None:
        if self._next_auto_commit is None:
            self._next_auto_commit = now + self.auto_commit_interval
            return
        if now < self._next_auto_commit or self.group is None:
            return
        self._next_auto_commit = now + self.auto_commit_interval
        offsets = self._offsets(None)
        if offsets:
            async def run() -> None:
                try:
                    await self.group.commit(offsets, self.api_timeout)  # type: ignore[union-attr]
                    self._on_commit(offsets)
                except Exception as e:  # noqa: BLE001
                    log.warning("Asynchronous auto-commit of offsets %s failed: %s", offsets, e)
            self._spawn(run())

    async def commit_quietly(self, partitions: Iterable[TopicPartition], timeout: float | None = None) -> None:
        """The auto-commit before a rebalance or close: failures are logged, not raised."""
        wanted = set(partitions)
        offsets = {tp: om for tp, om in self._offsets(None).items() if tp in wanted}
        if not offsets or self.group is None:
            return
        try:
            await self.group.commit(offsets, self.api_timeout if timeout is None else timeout)
            self._on_commit(offsets)
        except (CommitFailedError, errors.KafkaError, *_NETWORK) as e:
            log.warning("Synchronous auto-commit of offsets %s failed: %s", offsets, e)

    async def revoke(self, revoked: list[TopicPartition]) -> None:
        """Give up ``revoked`` within a group's rebalance (cooperative or KIP-848): nothing more is
        read from them, their offsets are auto-committed, then the listener hears of it."""
        for tp in revoked:
            self.subs.assignment[tp].revoking = True
        if self.auto_commit:
            await self.commit_quietly(revoked)
        await self.invoke_listener("on_partitions_revoked", revoked)

    async def committed(self, partitions: Iterable[TopicPartition], timeout: float | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        group = self._need_group()
        tps = list(partitions)
        deadline = await self._need_ready(timeout)
        return await group.fetch_committed(tps, deadline - asyncio.get_running_loop().time())

    # ---------------------------------------------------------------- metadata

    def request_metadata(self) -> None:
        self._metadata_needed.set()

    def _visible_topics(self) -> list[str]:
        exclude = self.config["exclude.internal.topics"]
        return [t for t, m in self.cluster.topics.items() if not (exclude and m.is_internal)]

    async def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """Partition counts of ``topics`` from fresh metadata (topics that do not exist left out)."""
        if topics:
            try:
                await self.cluster.refresh(topics, allow_auto_create=self._auto_create())
            except (errors.KafkaError, *_NETWORK) as e:
                log.debug("Metadata refresh failed: %s", e)
        return {t: len(self.cluster.topics[t].partitions) for t in topics if t in self.cluster.topics}

    def _auto_create(self) -> bool:
        return bool(self.config["allow.auto.create.topics"]) and self.subs.subscribed and self.subs.pattern is None

    async def _metadata_loop(self) -> None:
        max_age = self.config["metadata.max.age.ms"] / 1000
        quick = max(self.config["retry.backoff.max.ms"] / 1000, self.retry_backoff)
        while True:
            interval = max_age
            if self.subs.subscribed and self.subs.pattern is None and \
                    any(t not in self.cluster.topics for t in self.subs.topics):
                interval = min(interval, quick)  # a topic we wait for: look again soon
            try:
                await within(self._metadata_needed.wait(), interval)
            except asyncio.TimeoutError:
                pass
            self._metadata_needed.clear()
            try:
                await self._refresh_metadata()
            except (errors.KafkaError, *_NETWORK) as e:
                log.debug("Metadata refresh failed: %s", e)
                await asyncio.sleep(self.retry_backoff)
                self._metadata_needed.set()
            self.fetcher.kick()

    async def _refresh_metadata(self) -> None:
        subs, group = self.subs, self.group
        if subs.pattern is not None:
            await self.cluster.refresh(None)
            if subs.match_pattern(self._visible_topics()) and group is not None:
                group.request_rejoin("the topics matching the subscription pattern changed")
        else:
            topics = set(subs.topics) | subs.group_topics | {tp.topic for tp in subs.assignment}
            if not topics:
                return
            await self.cluster.refresh(sorted(topics), allow_auto_create=self._auto_create())
        if group is not None and subs.subscribed and not group.needs_join():
            watched = subs.group_topics if group.leader_id == group.member_id else subs.topics
            counts = {t: len(self.cluster.topics[t].partitions) for t in watched if t in self.cluster.topics}
            if counts != {t: n for t, n in group.snapshot.items() if t in watched}:
                group.request_rejoin(f"the partitions of the subscribed topics changed ({group.snapshot} -> {counts})")

    async def partitions_for(self, topic: str, timeout: float | None = None) -> list[PartitionInfo]:
        await self._need_ready(timeout)
        await self.cluster.refresh([topic])
        meta = self.cluster.topics.get(topic)
        if meta is None:
            return []
        return [PartitionInfo(p.partition, p.leader if p.leader >= 0 else None, p.replicas, p.isr, p.offline)
                for _, p in sorted(meta.partitions.items())]

    async def list_topics(self, timeout: float | None = None) -> dict[str, list[PartitionInfo]]:
        await self._need_ready(timeout)
        await self.cluster.refresh(None)
        return {t: [PartitionInfo(p.partition, p.leader if p.leader >= 0 else None, p.replicas, p.isr, p.offline)
                    for _, p in sorted(m.partitions.items())]
                for t, m in sorted(self.cluster.topics.items()) if not m.is_internal}

    # ---------------------------------------------------------------- listener

    async def invoke_listener(self, method: str, partitions: list[TopicPartition]) -> None:
        listener = self.subs.listener
        if listener is None:
            return
        fn = getattr(listener, method, None)
        if fn is None and method == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return
        try:
            await self._invoke(fn, list(partitions))
        except Exception as e:  # noqa: BLE001 - raised from poll() once the rebalance is done
            log.error("User provided listener %s failed on invocation of %s for partitions %s",
                      type(listener).__name__, method, [str(tp) for tp in partitions], exc_info=True)
            if self.group is not None and self.group.listener_error is None:
                self.group.listener_error = e
