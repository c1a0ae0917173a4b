"""Samsa's producer, built as the seeds describe Kafka's: interceptors -> serializers ->
partitioner -> record accumulator -> a background sender.

``send()`` runs in the caller's thread and only appends to a per-partition batch under a
lock; the sender, an asyncio task on a private loop thread, drains batches that are full
or have waited ``linger.ms``, groups them per leader into one Produce request, and
completes each record's future (and ``on_delivery``) from the answer. With
``enable.idempotence`` (the default) batches carry a producer id, epoch and sequence, so
retries are deduplicated by the broker and order holds.
"""

from __future__ import annotations

import asyncio
import logging
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, NamedTuple

from samsa.client.cluster import Cluster
from samsa.client.config import PRODUCER_KEYS, ClientConfig, ConfigError, load_plugin, load_plugins
from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.client.futures import pending_future, resolve_all
from samsa.client.loop import LoopThread
from samsa.client.partitioner import StickyPartitioner
from samsa.protocol import compression, errors
from samsa.protocol.records import BatchBuilder, estimate_record_size
from samsa.serialization import SerializationError, default_serialize

log = logging.getLogger(__name__)

PRODUCE, INIT_PRODUCER_ID = 0, 22
_REFRESH = (errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_LEADER_NOT_AVAILABLE)


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class _Batch:
    __slots__ = ("topic", "partition", "builder", "pending", "created", "deadline", "attempts", "size", "condition",
                 "number", "in_flight")
    _numbers = itertools.count()

    def __init__(self, topic: str, partition: int, builder: BatchBuilder, deadline: float):
        self.topic, self.partition, self.builder = topic, partition, builder
        self.pending: list[tuple[Future, Callable | None, int]] = []
        self.condition = threading.Condition()  # shared by the batch's record futures
        self.created = time.monotonic()
        self.deadline = deadline
        self.attempts = 0
        self.number = next(self._numbers)  # creation order: a retried batch goes back before later ones
        self.in_flight = False
        self.size = 0


class Producer:
    """``Producer({"bootstrap.servers": "localhost:9092", "acks": "all"})``; ``send()`` returns a
    :class:`concurrent.futures.Future` of :class:`RecordMetadata`."""

    def __init__(self, config: dict[str, Any] | None = None, *, _loop: asyncio.AbstractEventLoop | None = None,
                 **kwargs: Any):
        """``_loop``: run the sender on this (running) loop instead of a thread of its own (samsa.aio)."""
        self.config = c = ClientConfig(PRODUCER_KEYS, config, **kwargs)
        configs = dict(c.originals)
        self.acks = {"all": -1, "-1": -1, "0": 0, "1": 1}[str(c["acks"])]
        self.idempotent = c["enable.idempotence"] and self.acks == -1
        if c["enable.idempotence"] and "enable.idempotence" in c.originals and self.acks != -1:
            raise ConfigError("Must set acks to all in order to use the idempotent producer.")
        self.codec = compression.codec_id(c["compression.type"])
        self.key_serializer = self._serializer("key.serializer", configs, True)
        self.value_serializer = self._serializer("value.serializer", configs, False)
        self.interceptors = load_plugins(c["interceptor.classes"], configs)
        self.partitioner = load_plugin(c["partitioner.class"], configs) if c["partitioner.class"] else None
        self._sticky = StickyPartitioner()
        self._batch_size, self._buffer_memory = c["batch.size"], c["buffer.memory"]
        self._max_block, self._max_request = c["max.block.ms"] / 1000, c["max.request.size"]
        self._delivery_timeout = c["delivery.timeout.ms"] / 1000
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # send() waiting for buffer.memory
        self._space_waiters = 0
        self._queues: dict[tuple[str, int], deque[_Batch]] = {}
        self._buffered = 0
        self._closed = False
        self._thread = LoopThread("samsa-producer-sender") if _loop is None else None
        self._event_loop = _loop or self._thread.loop  # type: ignore[union-attr]
        self.cluster = Cluster(c["bootstrap.servers"], client_id=c["client.id"] or "samsa-producer",
                               request_timeout_ms=c["request.timeout.ms"],
                               bootstrap_timeout_ms=c["max.block.ms"], retry_backoff_ms=c["retry.backoff.ms"],
                               reconnect_backoff_ms=c["reconnect.backoff.ms"],
                               reconnect_backoff_max_ms=c["reconnect.backoff.max.ms"],
                               metadata_max_age_ms=c["metadata.max.age.ms"])
        self._wakeup: asyncio.Event | None = None
        self._freed: asyncio.Event | None = None  # set when batches complete (AIOProducer waits on it for room)
        self._partition_counts: dict[str, int] = {}
        self._producer_id, self._epoch = -1, -1
        self._sequences: dict[tuple[str, int], int] = {}
        # Batches in flight per partition, up to max.in.flight.requests.per.connection (at most 5 with
        # idempotence, whose sequence numbers keep the order); a partition with a batch waiting to be
        # retried sends nothing else until it has gone again.
        self._max_in_flight = min(c["max.in.flight.requests.per.connection"], 5 if self.idempotent else 1 << 30)
        self._in_flight: dict[tuple[str, int], int] = {}
        self._backing_off: dict[tuple[str, int], int] = {}  # batches waiting out retry.backoff.ms
        self._inflight: set[Future] = set()
        self._refreshes: set[asyncio.Task] = set()
        self._flushing = False
        self._sender = (self._thread.submit(self._run()) if self._thread is not None
                        else asyncio.ensure_future(self._run()))

    @staticmethod
    def _serializer(key: str, configs: dict, is_key: bool):
        spec = configs.get(key)
        if spec is None:
            return None
        instance = load_plugin(spec, {})
        if hasattr(instance, "is_key"):
            instance.is_key = is_key
        if hasattr(instance, "configure"):
            instance.configure(configs)
        return instance

    # ---------------------------------------------------------------- the caller's side

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             timestamp: int | None = None, headers: Any = None,
             on_delivery: Callable[[RecordMetadata | None, Exception | None], None] | None = None) -> Future:
        if self._closed:
            raise RuntimeError("Cannot send after the producer is closed.")
        if self.interceptors:
            record = {"topic": topic, "value": value, "key": key, "partition": partition, "timestamp": timestamp,
                      "headers": headers}
            for interceptor in self.interceptors:
                try:
                    record = interceptor.on_send(record) or record
                except Exception:
                    log.exception("Error executing interceptor onSend callback")
            topic, value, key = record["topic"], record["value"], record["key"]
            partition, timestamp, headers = record["partition"], record["timestamp"], record["headers"]
        try:
            key_bytes = (self.key_serializer.serialize(topic, key, headers) if self.key_serializer
                         else default_serialize(key))
            value_bytes = (self.value_serializer.serialize(topic, value, headers) if self.value_serializer
                           else default_serialize(value))
        except SerializationError:
            raise
        except Exception as e:
            raise SerializationError(f"Can't serialize data of topic {topic}: {e}") from e
        if headers:
            headers = [(k, v.encode() if isinstance(v, str) else v)
                       for k, v in (headers.items() if isinstance(headers, dict) else headers)]
        else:
            headers = []
        size = estimate_record_size(key_bytes, value_bytes, headers)
        if size > self._max_request:
            raise errors.MessageTooLargeError(
                f"The message is {size} bytes when serialized which is larger than {self.config['max.request.size']}, "
                "which is the value of the max.request.size configuration.")
        count = self._partition_counts.get(topic) or self._partitions(topic)
        p = partition
        if p is None:
            p = (self.partitioner.partition(topic, key, key_bytes, value, value_bytes, count)
                 if self.partitioner else self._sticky.partition(topic, key_bytes, count))
        elif not 0 <= p < count:
            raise errors.UnknownTopicOrPartitionError(f"Partition {p} of topic {topic} with partition count {count} "
                                                      "is not present in metadata")
        ts = timestamp if timestamp is not None else int(time.time() * 1000)
        return self._append(topic, p, key_bytes, value_bytes, ts, headers, size, on_delivery)

    def _partitions(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is None:
            try:
                if self._thread is None:
                    raise RuntimeError("the asyncio producer looks topics up in AIOProducer.send")
                count = self._thread.run(self._fetch_partitions(topic))
            except (asyncio.TimeoutError, TimeoutError):
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.config['max.block.ms']} ms.") from None
        return count

    async def _fetch_partitions(self, topic: str) -> int:
        deadline = time.monotonic() + self.config["max.block.ms"] / 1000
        while True:
            try:
                await self.cluster.bootstrap()
                resp = await self.cluster.refresh([topic], allow_auto_create=True)
                t = next((t for t in resp["topics"] if t["name"] == topic), None)
                if t is not None and t["error_code"] == 0 and t["partitions"]:
                    self._partition_counts[topic] = len(t["partitions"])
                    return len(t["partitions"])
                error = errors.error_for(t["error_code"] if t else 3, f"Topic {topic} not present in metadata")
            except errors.KafkaError as e:
                error = e
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"Topic {topic} not present in metadata after "
                                        f"{self.config['max.block.ms']} ms: {error}")
            await asyncio.sleep(self.config["retry.backoff.ms"] / 1000)

    def _append(self, topic, p, key, value, ts, headers, size, callback) -> Future:
        limit, batch_size = self._buffer_memory, self._batch_size
        wake = False
        with self._lock:
            if self._buffered + size > limit and self._buffered > 0 and self._thread is not None:
                self._wait_for_space(size, limit)  # (AIOProducer waits for room before it gets here)
            queue = self._queues.get((topic, p))
            if queue is None:
                queue = self._queues[(topic, p)] = deque()
            batch = queue[-1] if queue else None
            if batch is None or (batch.size and batch.size + size > batch_size):
                batch = _Batch(topic, p, BatchBuilder(self.codec), time.monotonic() + self._delivery_timeout)
                queue.append(batch)
                wake = True  # the sender starts this batch's linger clock
            batch.builder.append(key, value, ts, headers)
            batch.size += size
            fut = pending_future(batch.condition)
            batch.pending.append((fut, callback, ts))
            self._buffered += size
            if batch.size >= batch_size:
                wake = True
                if not self.partitioner and key is None:  # KIP-480: a full batch moves keyless records on
                    self._sticky.on_new_batch(topic, p, self._partition_counts[topic])
        if wake:
            self._event_loop.call_soon_threadsafe(self._wake)
            if self._thread is not None:
                time.sleep(0)  # hand the GIL to the sender now, not after the 5 ms switch interval
        return fut

    def _wait_for_space(self, size: int, limit: int) -> None:
        """buffer.memory is full: block (lock held) until the sender frees room, up to max.block.ms."""
        deadline = time.monotonic() + self._max_block
        self._space_waiters += 1
        try:
            while self._buffered + size > limit and self._buffered > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError("Failed to allocate memory within the configured max blocking time "
                                            f"{self.config['max.block.ms']} ms.")
                self._space.wait(left)
        finally:
            self._space_waiters -= 1

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    def flush(self, timeout: float | None = None) -> int:
        """Send everything buffered and wait for the answers; returns the records still pending."""
        futures = self._all_pending()
        self._event_loop.call_soon_threadsafe(self._flush_now)
        end = None if timeout is None else time.monotonic() + timeout
        for f in futures:
            try:
                f.exception(None if end is None else max(end - time.monotonic(), 0))
            except Exception:
                break
        return sum(1 for f in self._all_pending() if not f.done())

    def _all_pending(self) -> list[Future]:
        with self._lock:
            return [f for q in self._queues.values() for b in q for f, _, _ in b.pending] + list(self._inflight)

    def _flush_now(self) -> None:
        self._flushing = True
        self._wake()

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._partitions(topic)))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self.flush(timeout)
        self._closed = True
        self._event_loop.call_soon_threadsafe(self._wake)
        try:
            self._sender.result(timeout if timeout is not None else 30)
        except Exception:
            pass
        self._close_interceptors()
        assert self._thread is not None
        self._thread.run(self._shutdown())
        self._thread.stop()

    def _close_interceptors(self) -> None:
        for interceptor in self.interceptors:
            try:
                interceptor.close()
            except Exception:
                log.exception("Failed to close producer interceptor")

    async def _shutdown(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)
        await self.cluster.aclose()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the sender (event loop)

    def has_room(self, size: int) -> bool:
        return self._buffered == 0 or self._buffered + size <= self._buffer_memory

    async def wait_for_room(self, size: int) -> None:
        """The asyncio face of buffer.memory: wait (without blocking the loop) up to max.block.ms."""
        deadline = time.monotonic() + self._max_block
        while not self.has_room(size):
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError("Failed to allocate memory within the configured max blocking time "
                                        f"{self.config['max.block.ms']} ms.")
            self._freed = self._freed or asyncio.Event()
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def _run(self) -> None:
        self._wakeup = asyncio.Event()
        linger = self.config["linger.ms"] / 1000
        tasks: set[asyncio.Task] = set()
        while True:
            ready, next_due = self._drain_ready(linger)
            if ready and self.idempotent and self._producer_id < 0:
                try:
                    await self._producer_state()
                except (errors.KafkaError, OSError) as e:
                    for b in ready:
                        self._retry_or_fail(b, e if isinstance(e, errors.KafkaError) else KafkaConnectionError(str(e)),
                                            refresh=False)
                    ready = []
            for b in ready:
                self._seal(b)  # sequence numbers in drain order, before any request can overtake another
            if self.cluster.metadata_stale and self._partition_counts and not self._refreshes:
                self._start_refresh(None)  # metadata.max.age.ms: pick up new partitions and leaders
            by_leader: dict[int, list[_Batch]] = {}
            for b in ready:
                try:
                    leader = await self.cluster.leader_id(b.topic, b.partition)
                except errors.KafkaError as e:
                    self._retry_or_fail(b, e, refresh=True)
                    continue
                by_leader.setdefault(leader, []).append(b)
            for leader, batches in by_leader.items():
                t = asyncio.ensure_future(self._send(leader, batches))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            if self._closed and not self._queues_nonempty() and not tasks:
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), next_due)
            except asyncio.TimeoutError:
                pass

    def _queues_nonempty(self) -> bool:
        with self._lock:
            return any(self._queues.values())

    def _drain_ready(self, linger: float) -> tuple[list[_Batch], float]:
        """Batches to send now (full, lingered, flushing), one per idle partition; and when to look again."""
        now = time.monotonic()
        ready, next_due = [], 0.5
        with self._lock:
            flushing = self._flushing or self._closed
            for tp, queue in self._queues.items():
                if not queue or self._in_flight.get(tp, 0) >= self._max_in_flight or tp in self._backing_off:
                    continue
                b = queue[0]
                due = b.created + linger
                if flushing or len(queue) > 1 or b.size >= self.config["batch.size"] or due <= now:
                    queue.popleft()
                    self._in_flight[tp] = self._in_flight.get(tp, 0) + 1
                    b.in_flight = True
                    self._inflight.update(f for f, _, _ in b.pending)
                    ready.append(b)
                else:
                    next_due = min(next_due, due - now)
            if flushing and not any(self._queues.values()):
                self._flushing = False
        return ready, max(next_due, 0.0005)

    async def _producer_state(self) -> None:
        if self._producer_id >= 0 or not self.idempotent:
            return
        conn = await self.cluster.any()
        resp = await conn.request(INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
        if resp["error_code"]:
            raise errors.error_for(resp["error_code"], "InitProducerId failed")
        self._producer_id, self._epoch = resp["producer_id"], resp["producer_epoch"]

    def _seal(self, b: _Batch) -> None:
        """Encode a batch on its first send, with the producer id and the partition's next sequence."""
        if isinstance(b.builder, _Built):
            return
        if self.idempotent:
            tp = (b.topic, b.partition)
            seq = self._sequences.get(tp, 0)
            b.builder.set_producer_state(self._producer_id, self._epoch, seq)
            self._sequences[tp] = (seq + len(b.builder)) & 0x7FFFFFFF
        b.builder = _Built(b.builder.build(), len(b.builder))

    async def _send(self, leader: int, batches: list[_Batch]) -> None:
        try:
            topics: dict[str, list] = {}
            for b in batches:
                b.attempts += 1
                topics.setdefault(b.topic, []).append({"index": b.partition, "records": b.builder.data})
            body = {"transactional_id": None, "acks": self.acks, "timeout_ms": self.config["request.timeout.ms"],
                    "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
            conn = await self.cluster.node(leader)
            resp = await conn.request(PRODUCE, body, min_version=3, expect_response=self.acks != 0)
        except (errors.KafkaError, OSError) as e:
            for b in batches:
                self._retry_or_fail(b, e if isinstance(e, errors.KafkaError) else KafkaConnectionError(str(e)),
                                    refresh=True)
            return
        if resp is None:  # acks=0
            for b in batches:
                self._complete(b, -1, -1, None)
            return
        answers = {(t["name"], p["index"]): p for t in resp["responses"] for p in t["partition_responses"]}
        for b in batches:
            p = answers.get((b.topic, b.partition))
            code = p["error_code"] if p else errors.E_UNKNOWN_SERVER_ERROR
            if code in (0, errors.E_DUPLICATE_SEQUENCE_NUMBER):
                self._complete(b, p["base_offset"], p.get("log_append_time_ms", -1), None)
            else:
                self._retry_or_fail(b, errors.error_for(code, p.get("error_message") or "") if p else
                                    errors.UnknownServerError(), refresh=code in _REFRESH)

    def _retry_or_fail(self, b: _Batch, error: errors.KafkaError, refresh: bool) -> None:
        retriable = error.retriable or isinstance(error, KafkaConnectionError) or (
            # an earlier batch of the partition failed and goes again first
            self.idempotent and error.code == errors.E_OUT_OF_ORDER_SEQUENCE_NUMBER)
        if retriable and b.attempts <= self.config["retries"] and time.monotonic() < b.deadline and not (
                self.acks == 0):
            if refresh:
                self._start_refresh(b.topic)
            backoff = min(self.config["retry.backoff.ms"] * 2 ** max(b.attempts - 1, 0),
                          self.config["retry.backoff.max.ms"]) / 1000
            tp = (b.topic, b.partition)
            with self._lock:
                self._backing_off[tp] = self._backing_off.get(tp, 0) + 1
                self._release(b)
            asyncio.get_running_loop().call_later(backoff, self._requeue, b)
            return
        self._complete(b, -1, -1, error)

    def _start_refresh(self, topic: str | None) -> None:
        task = asyncio.ensure_future(self._refresh(topic))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def _refresh(self, topic: str | None) -> None:
        """Metadata of one topic (after an error) or of every topic this producer sends to."""
        try:
            await self.cluster.refresh([topic] if topic else list(self._partition_counts))
        except (errors.KafkaError, OSError):
            return
        for name in [topic] if topic else list(self._partition_counts):
            meta = self.cluster.topics.get(name)
            if meta is not None and meta.partitions and name in self._partition_counts:
                self._partition_counts[name] = len(meta.partitions)

    def _requeue(self, b: _Batch) -> None:
        with self._lock:
            queue = self._queues.setdefault((b.topic, b.partition), deque())
            at = next((i for i, other in enumerate(queue) if other.number > b.number), len(queue))
            queue.insert(at, b)
            tp = (b.topic, b.partition)
            if self._backing_off.get(tp, 0) > 1:
                self._backing_off[tp] -= 1
            else:
                self._backing_off.pop(tp, None)
        self._wake()

    def _release(self, b: _Batch) -> None:
        """One batch of the partition is no longer in flight (lock held)."""
        if not b.in_flight:
            return
        b.in_flight = False
        tp = (b.topic, b.partition)
        left = self._in_flight.get(tp, 0) - 1
        if left > 0:
            self._in_flight[tp] = left
        else:
            self._in_flight.pop(tp, None)

    def _complete(self, b: _Batch, base_offset: int, append_time: int, error: Exception | None) -> None:
        futures = [f for f, _, _ in b.pending]
        with self._lock:
            self._release(b)
            self._inflight.difference_update(futures)
            self._buffered -= b.size
            if self._space_waiters:
                self._space.notify_all()
        if self._freed is not None:
            self._freed.set()
        metas = None
        if error is None:
            new, topic, partition = tuple.__new__, b.topic, b.partition
            metas = [new(RecordMetadata, (topic, partition, base_offset + i if base_offset >= 0 else -1,
                                          append_time if append_time >= 0 else ts))
                     for i, (_, _, ts) in enumerate(b.pending)]
        if self.interceptors or any(cb is not None for _, cb, _ in b.pending):
            for i, (_, callback, _) in enumerate(b.pending):
                meta = metas[i] if metas else None
                for interceptor in self.interceptors:
                    try:
                        interceptor.on_acknowledgement(meta, error)
                    except Exception:
                        log.exception("Error executing interceptor onAcknowledgement callback")
                if callback is not None:
                    try:
                        callback(meta, error)
                    except Exception:
                        log.exception("Error executing user-provided callback on message for topic-partition "
                                      "%s-%d", b.topic, b.partition)
        resolve_all(b.condition, futures, metas, error)
        self._wake()


class _Built:
    """A batch once built: its bytes are fixed (so a retry sends the same sequence)."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int):
        self.data, self.count = data, count

    def __len__(self) -> int:
        return self.count
