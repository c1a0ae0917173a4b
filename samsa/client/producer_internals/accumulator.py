"""The record accumulator: per-partition queues of batches that ``send()`` appends to in the
caller's thread and the sender drains on its event loop.

One lock guards the queues. An append takes it once and says when the sender must be
woken: only when it would otherwise sleep past a batch that needs it (a new batch whose
``linger.ms`` ends before the sender's next look, or a complete batch), never per record.
``buffer.memory`` bounds the bytes held: a blocking ``send()`` waits for room up to
``max.block.ms``, the asyncio face waits without blocking its loop.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Callable

from samsa.client.connection import KafkaTimeoutError
from samsa.client.futures import pending_future
from samsa.protocol.batch import read_header, set_producer_state
from samsa.protocol.records import BatchBuilder
from samsa.timeouts import within

TopicPartition = tuple[str, int]


class ProducerBatch:
    """Records of one partition sent together: their builder until the first send, then fixed bytes."""

    __slots__ = ("topic", "partition", "builder", "data", "count", "pending", "condition", "created", "deadline",
                 "attempts", "size", "number", "in_flight", "complete", "producer")
    _numbers = itertools.count()

    def __init__(self, topic: str, partition: int, codec: int, level: int | None, deadline: float):
        self.topic, self.partition = topic, partition
        self.builder: BatchBuilder | None = BatchBuilder(codec, compression_level=level)
        self.data = b""
        self.count = 0
        self.pending: list[tuple[Future, Callable | None, int]] = []  # (future, on_delivery, timestamp) per record
        self.condition = threading.Condition()  # shared by the batch's record futures
        self.created = time.monotonic()
        self.deadline = deadline  # delivery.timeout.ms
        self.attempts = 0
        self.number = next(self._numbers)  # creation order: a retried batch goes back before later ones
        self.in_flight = False
        self.complete = False  # full, or closed by a record that did not fit
        self.size = 0  # bytes counted against batch.size and buffer.memory
        self.producer = (-1, -1)  # (producer id, epoch) it was sealed with

    def seal(self, producer_id: int = -1, epoch: int = -1, base_sequence: int = -1,
             transactional: bool = False) -> None:
        """Encode the batch (once: a retry sends the same bytes, so the same sequence)."""
        builder = self.builder
        if builder is None:
            return
        if producer_id >= 0:
            builder.set_producer_state(producer_id, epoch, base_sequence, transactional)
            self.producer = (producer_id, epoch)
        self.count = len(builder)
        self.data = builder.build()
        self.builder = None

    @property
    def sealed(self) -> bool:
        return self.builder is None

    def restamp(self, producer_id: int, epoch: int, base_sequence: int) -> None:
        """A sealed batch to send again after an epoch bump (KIP-360): new producer state, same records."""
        data = bytearray(self.data)
        set_producer_state(data, 0, read_header(data), producer_id, epoch, base_sequence)
        self.data = bytes(data)
        self.producer = (producer_id, epoch)


class RecordAccumulator:
    """Batches per partition, ``batch.size`` / ``linger.ms`` / ``buffer.memory``, in-flight accounting."""

    def __init__(self, *, batch_size: int, linger_s: float, buffer_memory: int, max_block_s: float, codec: int,
                 compression_level: int | None, delivery_timeout_s: float, max_in_flight: int, idempotent: bool,
                 blocking: bool):
        """``blocking``: append waits for buffer.memory (the thread-based producer); otherwise the
        asyncio face waits with :meth:`wait_for_room` before appending.

        ``idempotent``: a partition sends one batch at a time until the broker has acknowledged one
        of this producer's. A broker that does not know a producer accepts any sequence from it (as
        Kafka does since KIP-360), so a second batch in flight could be written before a first one
        that failed; once it knows the producer, a gap is refused (OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        self.batch_size, self.linger = batch_size, linger_s
        self.buffer_memory, self.max_block = buffer_memory, max_block_s
        self.codec, self.compression_level, self.delivery_timeout = codec, compression_level, delivery_timeout_s
        self.max_in_flight = max_in_flight
        self._one_until_acknowledged = idempotent
        self._acknowledged: set[TopicPartition] = set()  # partitions with an acknowledged batch
        self.blocking = blocking
        self.lock = threading.Lock()
        self._space = threading.Condition(self.lock)
        self._space_waiters = 0
        self._freed: asyncio.Event | None = None  # the asyncio face waits on it for room
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[TopicPartition, int] = {}
        self._in_flight_batches: set[ProducerBatch] = set()
        self._unanswered: dict[TopicPartition, set[int]] = {}  # numbers of drained batches not yet done, per partition
        self._backing_off: dict[TopicPartition, int] = {}  # batches of the partition waiting out retry.backoff.ms
        self._backing_off_batches: set[ProducerBatch] = set()  # neither queued nor in flight, but not answered
        self.buffered = 0
        self.flushing = False
        self.closing = False
        self._sender_due = float("inf")  # when the sender drains next on its own; 0: it is about to

    # ---------------------------------------------------------------- the caller's side

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None, timestamp: int,
               headers: list, size: int, callback: Callable | None) -> tuple[Future, bool, bool]:
        """Add a record: its future; whether a batch of the partition is now complete (full, or
        closed because this record did not fit); whether the sender must be woken (a complete
        batch, or a new batch whose linger.ms ends before the sender would look again)."""
        wake = closed = False
        with self.lock:
            if self.blocking and self.buffered and self.buffered + size > self.buffer_memory:
                self._wait_for_space(size)
            queue = self._queues.get((topic, partition))
            if queue is None:
                queue = self._queues[(topic, partition)] = deque()
            batch = queue[-1] if queue else None
            if batch is None or batch.builder is None or (batch.size and batch.size + size > self.batch_size):
                if batch is not None and batch.builder is not None and not batch.complete:
                    batch.complete = closed = True
                batch = ProducerBatch(topic, partition, self.codec, self.compression_level,
                                      time.monotonic() + self.delivery_timeout)
                queue.append(batch)
                if self._sender_due > batch.created + self.linger:
                    self._sender_due = 0.0
                    wake = True
            batch.builder.append(key, value, timestamp, headers)  # type: ignore[union-attr]
            batch.size += size
            fut = pending_future(batch.condition)
            batch.pending.append((fut, callback, timestamp))
            self.buffered += size
            if batch.size >= self.batch_size:
                batch.complete = closed = True
            if closed and self._sender_due:
                self._sender_due = 0.0
                wake = True
        return fut, closed, wake

    def _wait_for_space(self, size: int) -> None:
        """buffer.memory is full: block (lock held) until the sender frees room, up to max.block.ms."""
        deadline = time.monotonic() + self.max_block
        self._space_waiters += 1
        try:
            while self.buffered and self.buffered + size > self.buffer_memory:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KafkaTimeoutError("Failed to allocate memory within the configured max blocking time "
                                            f"{int(self.max_block * 1000)} ms.")
                self._space.wait(left)
        finally:
            self._space_waiters -= 1

    def has_room(self, size: int) -> bool:
        return self.buffered == 0 or self.buffered + size <= self.buffer_memory

    async def wait_for_room(self, size: int) -> None:
        """The asyncio face of buffer.memory: wait (without blocking the loop) up to max.block.ms."""
        deadline = time.monotonic() + self.max_block
        while not self.has_room(size):
            left = deadline - time.monotonic()
            if left <= 0:
                raise KafkaTimeoutError("Failed to allocate memory within the configured max blocking time "
                                        f"{int(self.max_block * 1000)} ms.")
            self._freed = self._freed or asyncio.Event()
            self._freed.clear()
            try:
                await within(self._freed.wait(), left)
            except asyncio.TimeoutError:
                pass

    def pending_futures(self) -> list[Future]:
        """The futures of every record not yet answered."""
        with self.lock:
            # A batch waiting out its retry backoff too: a flush (a transaction's commit) that
            # did not wait for it would commit without it, and the batch would be written later,
            # at the next epoch, in a transaction of its own.
            batches = ([b for q in self._queues.values() for b in q] + list(self._in_flight_batches)
                       + list(self._backing_off_batches))
        return [f for b in batches for f, _, _ in b.pending]

    # ---------------------------------------------------------------- the sender's side

    def drain(self) -> tuple[list[ProducerBatch], float]:
        """Batches to send now, in order, up to the in-flight limit of each partition (full,
        lingered, not the newest of their queue, or flushing); and how long until the next is due."""
        now = time.monotonic()
        ready, next_due = [], 0.5
        with self.lock:
            flushing = self.flushing or self.closing
            for tp, queue in self._queues.items():
                if not queue or tp in self._backing_off:
                    continue
                in_flight = self._in_flight.get(tp, 0)
                limit = 1 if self._one_until_acknowledged and tp not in self._acknowledged else self.max_in_flight
                while queue and in_flight < limit:
                    b = queue[0]
                    due = b.created + self.linger
                    if not (flushing or len(queue) > 1 or b.size >= self.batch_size or due <= now):
                        next_due = min(next_due, due - now)
                        break
                    queue.popleft()
                    in_flight += 1
                    b.in_flight = True
                    self._in_flight_batches.add(b)
                    self._unanswered.setdefault(tp, set()).add(b.number)
                    ready.append(b)
                self._in_flight[tp] = in_flight
            if flushing and not any(self._queues.values()):
                self.flushing = False
            next_due = max(next_due, 0.0005)
            self._sender_due = now + next_due
        return ready, next_due

    def has_queued(self) -> bool:
        """Whether batches wait to be sent (queued, or waiting out a retry backoff)."""
        with self.lock:
            return bool(self._backing_off) or any(self._queues.values())

    def backing_off(self, b: ProducerBatch) -> None:
        """``b`` failed and waits out retry.backoff.ms: its partition sends nothing until :meth:`requeue`."""
        tp = (b.topic, b.partition)
        with self.lock:
            self._backing_off[tp] = self._backing_off.get(tp, 0) + 1
            self._backing_off_batches.add(b)
            self._release(b)

    def requeue(self, b: ProducerBatch) -> None:
        """Put a batch to retry back in its queue, before the batches created after it."""
        tp = (b.topic, b.partition)
        with self.lock:
            self._backing_off_batches.discard(b)
            queue = self._queues.setdefault(tp, deque())
            at = next((i for i, other in enumerate(queue) if other.number > b.number), len(queue))
            queue.insert(at, b)
            if self._backing_off.get(tp, 0) > 1:
                self._backing_off[tp] -= 1
            else:
                self._backing_off.pop(tp, None)

    def has_earlier(self, b: ProducerBatch) -> bool:
        """Whether a batch of ``b``'s partition created before it is sent but not answered for good."""
        numbers = self._unanswered.get((b.topic, b.partition), ())
        return any(n < b.number for n in numbers)

    def done(self, b: ProducerBatch, acknowledged: bool) -> None:
        """``b`` is answered for good (``acknowledged``: written): free its partition slot and its bytes."""
        with self.lock:
            if acknowledged:
                self._acknowledged.add((b.topic, b.partition))
            numbers = self._unanswered.get((b.topic, b.partition))
            if numbers is not None:
                numbers.discard(b.number)
                if not numbers:
                    del self._unanswered[(b.topic, b.partition)]
            self._release(b)
            self.buffered -= b.size
            if self._space_waiters:
                self._space.notify_all()
        if self._freed is not None:
            self._freed.set()

    def _release(self, b: ProducerBatch) -> None:
        """One batch of the partition is no longer in flight (lock held)."""
        if not b.in_flight:
            return
        b.in_flight = False
        self._in_flight_batches.discard(b)
        tp = (b.topic, b.partition)
        left = self._in_flight.get(tp, 0) - 1
        if left > 0:
            self._in_flight[tp] = left
        else:
            self._in_flight.pop(tp, None)
