"""The producer's sender: an asyncio task that drains the accumulator, sends Produce
requests to partition leaders and completes each record from the answers.

Up to ``max.in.flight.requests.per.connection`` batches of a partition are in flight at
once (at most 5 with idempotence). A Produce request holds one batch per partition, so
the ready batches of a leader go out as consecutive requests on its connection, written
in order in one go; with idempotence their sequence numbers are given in that order, so
the broker keeps it, and a batch that failed is resent before any later one of its
partition (which the broker answers OUT_OF_ORDER_SEQUENCE_NUMBER until it has).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Sequence

from samsa.client.connection import KafkaConnectionError
from samsa.client.futures import resolve_all
from samsa.client.metadata import ClusterMetadata
from samsa.client.producer_internals.accumulator import ProducerBatch, RecordAccumulator
from samsa.client.producer_internals.producer_metrics import ProducerMetrics
from samsa.client.producer_internals.transactions import TransactionManager
from samsa.client.types import RecordMetadata
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

_REFRESH = (errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_LEADER_NOT_AVAILABLE)


class Sender:
    def __init__(self, accumulator: RecordAccumulator, cluster: ClusterMetadata, *, acks: int, idempotent: bool,
                 request_timeout_ms: int, retries: int, retry_backoff_ms: int, retry_backoff_max_ms: int,
                 interceptors: Sequence[Any], partition_counts: dict[str, int], metrics: ProducerMetrics):
        self.accumulator, self.cluster = accumulator, cluster
        self.acks, self.idempotent = acks, idempotent
        self.request_timeout_ms, self.retries = request_timeout_ms, retries
        self.retry_backoff_ms, self.retry_backoff_max_ms = retry_backoff_ms, retry_backoff_max_ms
        self.interceptors = interceptors
        self.partition_counts = partition_counts  # the producer's topics: refreshed with their metadata
        self.metrics = metrics
        self.producer_id, self.epoch = -1, -1
        self.txn: TransactionManager | None = None  # set for a transactional producer
        self._sequences: dict[tuple[str, int], int] = {}
        self._bump_epoch = False  # KIP-360: the broker lost this producer's sequence; start a new epoch
        self._woken = False
        self._waiter: asyncio.Future | None = None  # the run loop waiting for a wake-up or its next due time
        self._requests: set[asyncio.Task] = set()
        self._write_locks: dict[int, asyncio.Lock] = {}  # per leader: requests go out in drain order
        self._refreshes: set[asyncio.Task] = set()

    def wake(self) -> None:
        """Drain now (call on the sender's loop)."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run(self) -> None:
        """Until the accumulator is closing and everything has been answered."""
        acc, loop = self.accumulator, asyncio.get_running_loop()
        while True:
            self._woken = False  # before draining: a wake-up asked for after the drain is not lost
            ready, next_due = acc.drain()
            if ready:
                await self._send_ready(ready)
            if self.cluster.metadata_stale and self.partition_counts and not self._refreshes:
                self._start_refresh(None)  # metadata.max.age.ms: pick up new partitions and leaders
            if acc.closing and not self._requests and not acc.has_queued():
                return
            if not self._woken:
                self._waiter = waiter = loop.create_future()
                timer = loop.call_later(next_due, _set_result, waiter)
                try:
                    await waiter
                finally:
                    self._waiter = None
                    timer.cancel()

    async def close(self) -> None:
        for task in list(self._refreshes):
            task.cancel()
        await asyncio.gather(*self._refreshes, return_exceptions=True)

    # ---------------------------------------------------------------- sending

    async def _send_ready(self, ready: list[ProducerBatch]) -> None:
        if self.txn is not None:
            ready = await self._add_to_transaction(ready)
            if not ready:
                return
        elif self.idempotent and self._bump_epoch:
            try:
                await self._bump()
            except (errors.KafkaError, OSError) as e:
                for b in ready:
                    self._retry_or_fail(b, _as_kafka_error(e), refresh=False)
                return
        elif self.idempotent and self.producer_id < 0:
            try:
                await self._init_producer_id()
            except (errors.KafkaError, OSError) as e:
                for b in ready:
                    self._retry_or_fail(b, _as_kafka_error(e), refresh=False)
                return
        for b in ready:
            self._seal(b)  # sequence numbers in drain order, before any request can overtake another
        # per leader, consecutive requests of at most one batch per partition
        rounds: dict[int, list[dict[tuple[str, int], ProducerBatch]]] = {}
        for b in ready:
            try:
                leader = await self.cluster.leader_id(b.topic, b.partition)
            except errors.KafkaError as e:
                self._retry_or_fail(b, e, refresh=True)
                continue
            tp = (b.topic, b.partition)
            requests = rounds.setdefault(leader, [])
            for request in requests:
                if tp not in request:
                    request[tp] = b
                    break
            else:
                requests.append({tp: b})
        for leader, requests in rounds.items():
            task = asyncio.ensure_future(self._send(leader, [list(r.values()) for r in requests]))
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    def reset_sequences(self) -> None:
        """A new producer id or epoch: every partition's sequence starts again at 0."""
        self._sequences.clear()

    async def _add_to_transaction(self, ready: list[ProducerBatch]) -> list[ProducerBatch]:
        """A transactional producer's batches go only to partitions added to its transaction."""
        txn = self.txn
        assert txn is not None
        if txn.producer_id < 0:
            for b in ready:
                self._complete(b, -1, -1, errors.KafkaError("init_transactions() was not called"))
            return []
        self.producer_id, self.epoch = txn.producer_id, txn.epoch
        codes = await txn.add_partitions({(b.topic, b.partition) for b in ready})
        out = []
        for b in ready:
            code = codes.get((b.topic, b.partition), 0)
            if code or txn.error is not None and not b.sealed:
                error = errors.error_for(code, "the partition could not be added to the transaction") if code else (
                    txn.error or errors.KafkaError("the transaction failed"))
                self._complete(b, -1, -1, error)
            else:
                out.append(b)
        return out

    async def _init_producer_id(self) -> None:
        conn = await self.cluster.any()
        resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
        if resp["error_code"]:
            raise errors.error_for(resp["error_code"], "InitProducerId failed")
        self.producer_id, self.epoch = resp["producer_id"], resp["producer_epoch"]

    async def _bump(self) -> None:
        """KIP-360: once the requests in flight are answered, a new epoch (InitProducerId with
        our id and epoch; a new producer id from a broker without v3), sequences from 0."""
        others = [t for t in self._requests if t is not asyncio.current_task()]
        if others:
            await asyncio.gather(*others, return_exceptions=True)
        conn = await self.cluster.any()
        try:
            resp = await conn.request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": self.producer_id,
                "producer_epoch": self.epoch}, min_version=3)
            if resp["error_code"]:
                raise errors.error_for(resp["error_code"], "InitProducerId (epoch bump) failed")
            self.producer_id, self.epoch = resp["producer_id"], resp["producer_epoch"]
        except errors.UnsupportedVersionError:
            await self._init_producer_id()
        log.info("Bumped the epoch of producer %d to %d: the broker lost its sequence numbers (KIP-360)",
                 self.producer_id, self.epoch)
        self._sequences.clear()
        self._bump_epoch = False

    def _seal(self, b: ProducerBatch) -> None:
        if b.sealed:
            if self.idempotent and b.producer != (self.producer_id, self.epoch) and self.producer_id >= 0:
                tp = (b.topic, b.partition)  # sealed before an epoch bump: restamped, in order
                seq = self._sequences.get(tp, 0)
                b.restamp(self.producer_id, self.epoch, seq)
                self._sequences[tp] = (seq + b.count) & 0x7FFFFFFF
            return
        if self.idempotent:
            tp = (b.topic, b.partition)
            seq = self._sequences.get(tp, 0)
            b.seal(self.producer_id, self.epoch, seq, self.txn is not None)
            self._sequences[tp] = (seq + b.count) & 0x7FFFFFFF
        else:
            b.seal()

    async def _send(self, leader: int, requests: list[list[ProducerBatch]]) -> None:
        """Write every request to the leader's connection at once, in order; then read the answers."""
        answers: list[tuple[list[ProducerBatch], Any]] = []
        lock = self._write_locks.get(leader)
        if lock is None:
            lock = self._write_locks[leader] = asyncio.Lock()
        try:
            # in the order the batches were drained, even when an earlier task still waits for the connection
            async with lock:
                conn = await self.cluster.node(leader)
                sent_at = time.monotonic()
                # Produce v12 adds partitions to the transaction: only with transactions version 2.
                max_version = 11 if self.txn is not None and not self.txn.tv2 else None
                for batches in requests:
                    topics: dict[str, list] = {}
                    for b in batches:
                        b.attempts += 1
                        topics.setdefault(b.topic, []).append({"index": b.partition, "records": b.data})
                    body = {"transactional_id": self.txn.transactional_id if self.txn else None, "acks": self.acks, "timeout_ms": self.request_timeout_ms,
                            "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
                    answers.append((batches, conn.send(ApiKey.PRODUCE, body, min_version=3, max_version=max_version,
                                                      expect_response=self.acks != 0)))
                    self._count_request(batches, sent_at)
                await conn.drain()
        except (errors.KafkaError, OSError) as e:
            for batches in requests[len(answers):]:  # the requests not written
                for b in batches:
                    self._retry_or_fail(b, _as_kafka_error(e), refresh=True)
        for batches, pending in answers:
            try:
                resp = None if pending is None else await conn.response(pending)
                if resp is not None:
                    self.metrics.request_latency.record((time.monotonic() - sent_at) * 1000)
                    self.metrics.throttle.record(resp.get("throttle_time_ms", 0))
            except (errors.KafkaError, OSError) as e:
                for b in batches:
                    self._retry_or_fail(b, _as_kafka_error(e), refresh=True)
                continue
            self._handle(batches, resp)

    def _count_request(self, batches: list[ProducerBatch], now: float) -> None:
        m = self.metrics
        m.request.record()
        m.records_per_request.record(sum(b.count for b in batches))
        for b in batches:
            size = len(b.data)
            m.batch_size.record(size)
            m.outgoing.record(size)
            m.record_send.record(b.count)
            if b.attempts > 1:
                m.record_retry.record(b.count)
            else:
                m.queue_time.record((now - b.created) * 1000)
                if b.count:
                    m.record_size.record(b.size / b.count)

    def _handle(self, batches: list[ProducerBatch], resp: dict | None) -> None:
        if resp is None:  # acks=0
            for b in batches:
                self._complete(b, -1, -1, None)
            return
        answers = {(t["name"], p["index"]): p for t in resp["responses"] for p in t["partition_responses"]}
        for b in batches:
            p = answers.get((b.topic, b.partition))
            code = p["error_code"] if p else errors.E_UNKNOWN_SERVER_ERROR
            if code in (0, errors.E_DUPLICATE_SEQUENCE_NUMBER):
                self._complete(b, p["base_offset"], p.get("log_append_time_ms", -1), None)  # type: ignore[index]
            else:
                error = errors.error_for(code, p.get("error_message") or _explain(code, b)) if p else \
                    errors.UnknownServerError()
                self._retry_or_fail(b, error, refresh=code in _REFRESH)

    def _retry_or_fail(self, b: ProducerBatch, error: errors.KafkaError, refresh: bool) -> None:
        sequence_lost = self.idempotent and error.code in (errors.E_OUT_OF_ORDER_SEQUENCE_NUMBER,
                                                           errors.E_UNKNOWN_PRODUCER_ID)
        retriable = error.retriable or isinstance(error, KafkaConnectionError) or (
            # an earlier batch of the partition did not make it and goes again first; this one follows it.
            sequence_lost and self.accumulator.has_earlier(b))
        if not retriable and sequence_lost and self.txn is None:
            # The earliest batch of the partition, refused: the broker lost our sequence (its log lost
            # records we had written). KIP-360: bump the epoch and send it again from sequence 0.
            self._bump_epoch = retriable = True
        if retriable and self.acks != 0 and b.attempts <= self.retries and time.monotonic() < b.deadline:
            if refresh:
                self._start_refresh(b.topic)
            backoff = min(self.retry_backoff_ms * 2 ** max(b.attempts - 1, 0), self.retry_backoff_max_ms) / 1000
            log.debug("Retrying a batch of %d records for %s-%d (attempt %d): %s", len(b.pending), b.topic, b.partition,
                      b.attempts, error)
            self.accumulator.backing_off(b)
            asyncio.get_running_loop().call_later(backoff, self._requeue, b)
            return
        self._complete(b, -1, -1, error)

    def _requeue(self, b: ProducerBatch) -> None:
        self.accumulator.requeue(b)
        self.wake()

    def _start_refresh(self, topic: str | None) -> None:
        task = asyncio.ensure_future(self._refresh(topic))
        self._refreshes.add(task)
        task.add_done_callback(self._refreshes.discard)

    async def _refresh(self, topic: str | None) -> None:
        """Metadata of one topic (after an error) or of every topic the producer sends to."""
        names = [topic] if topic else list(self.partition_counts)
        try:
            await self.cluster.refresh(names)
        except (errors.KafkaError, OSError):
            return
        for name in names:
            meta = self.cluster.topics.get(name)
            if meta is not None and meta.partitions and name in self.partition_counts:
                self.partition_counts[name] = len(meta.partitions)

    # ---------------------------------------------------------------- completing

    def _complete(self, b: ProducerBatch, base_offset: int, append_time: int, error: Exception | None) -> None:
        """Answer every record of ``b``: interceptors, on_delivery callbacks, then the futures."""
        self.accumulator.done(b, error is None)
        if error is not None and self.txn is not None:
            self.txn.fail(error if isinstance(error, errors.KafkaError) else errors.KafkaError(str(error)))
        pending = b.pending
        if error is not None:
            self.metrics.record_error.record(len(pending))
        metas = None
        if error is None:
            new, topic, partition = tuple.__new__, b.topic, b.partition
            if base_offset < 0:
                metas = [new(RecordMetadata, (topic, partition, -1, append_time if append_time >= 0 else ts))
                         for _, _, ts in pending]
            elif append_time >= 0:
                metas = [new(RecordMetadata, (topic, partition, base_offset + i, append_time))
                         for i in range(len(pending))]
            else:
                metas = [new(RecordMetadata, (topic, partition, base_offset + i, ts))
                         for i, (_, _, ts) in enumerate(pending)]
        if self.interceptors:
            for i in range(len(pending)):
                meta = metas[i] if metas else None
                for interceptor in self.interceptors:
                    try:
                        interceptor.on_acknowledgement(meta, error)
                    except Exception:
                        log.exception("Error executing interceptor onAcknowledgement callback")
        for i, (_, callback, _) in enumerate(pending):
            if callback is not None:
                try:
                    callback(metas[i] if metas else None, error)
                except Exception:
                    log.exception("Error executing user-provided callback on message for topic-partition %s-%d",
                                  b.topic, b.partition)
        resolve_all(b.condition, [f for f, _, _ in pending], metas, error)
        self.wake()


def _set_result(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _as_kafka_error(e: BaseException) -> errors.KafkaError:
    return e if isinstance(e, errors.KafkaError) else KafkaConnectionError(str(e))


def _explain(code: int, b: ProducerBatch) -> str:
    """What a refused batch's error means when the broker sent no message (Kafka sends none for
    most Produce errors)."""
    if code == errors.E_MESSAGE_TOO_LARGE:
        return (f"the batch of {b.size} bytes for {b.topic}-{b.partition} is larger than the broker accepts "
                f"(the topic's max.message.bytes)")
    return ""
