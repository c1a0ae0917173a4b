"""Fetching: Fetch requests to partition leaders, and ListOffsets for resets and lookups.

One Fetch is in flight per broker, on a connection of its own (a broker answers a
connection's requests in order, and a fetch may wait ``fetch.max.wait.ms`` there). A
partition is fetched again as soon as its last response is in, while fewer than
``MAX_BUFFERED`` of its responses wait to be polled: the next fetch travels while the
application works on the records of the previous one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import Any, Callable

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.fetch_session import FetchSessionHandler
from samsa.client.consumer_internals.consumer_metrics import ConsumerMetrics
from samsa.client.consumer_internals.records import CompletedFetch, ConsumerRecord, FetchedBatch
from samsa.client.consumer_internals.subscription import PartitionState, SubscriptionState
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

FETCH_MAX_VERSION = 12  # the last version naming topics (13+ use topic ids)
MAX_BUFFERED = 2
EARLIEST, LATEST = -2, -1
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
# Partition errors after which the leader may have moved: refresh metadata, try again.
REFRESH_ERRORS = {errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_LEADER_NOT_AVAILABLE, errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                  errors.E_FENCED_LEADER_EPOCH, errors.E_UNKNOWN_LEADER_EPOCH, errors.E_KAFKA_STORAGE_ERROR,
                  errors.E_REPLICA_NOT_AVAILABLE, errors.E_OFFSET_NOT_AVAILABLE, errors.E_UNKNOWN_TOPIC_ID,
                  errors.E_NOT_ENOUGH_REPLICAS}
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError)


class NoOffsetForPartitionError(Exception):
    """No committed offset and ``auto.offset.reset=none`` (Java's NoOffsetForPartitionException)."""

    def __init__(self, partitions: list[TopicPartition]):
        names = ", ".join(str(tp) for tp in partitions)
        super().__init__(f"Undefined offset with no reset policy for partitions: [{names}]")
        self.partitions = partitions


class Fetcher:
    def __init__(self, cluster: ClusterMetadata, subs: SubscriptionState, config: Any, *,
                 key_deserializer: Any, value_deserializer: Any, request_metadata: Callable[[], None],
                 metrics: ConsumerMetrics):
        c = config
        self.metrics = metrics
        self.cluster = cluster
        self.subs = subs
        self.min_bytes = c["fetch.min.bytes"]
        self.max_wait_ms = c["fetch.max.wait.ms"]
        self.max_bytes = c["fetch.max.bytes"]
        self.partition_max_bytes = c["max.partition.fetch.bytes"]
        self.isolation = ISOLATION[c["isolation.level"]]
        self.check_crcs = c["check.crcs"]
        self.request_timeout_ms = c["request.timeout.ms"]
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        self.rack = c["client.rack"] or None
        # KIP-392: the replica a leader told us to read each partition from, until when
        self._read_replicas: dict[TopicPartition, tuple[int, float]] = {}
        self.read_replica_ttl = c["metadata.max.age.ms"] / 1000
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.request_metadata = request_metadata
        self.data_ready = asyncio.Event()
        self._wake = asyncio.Event()
        self._inflight: set[int] = set()
        self._conns: dict[int, BrokerConnection] = {}
        self._sessions: dict[int, FetchSessionHandler] = {}  # KIP-227, one per broker
        self._tasks: set[asyncio.Task] = set()
        self._rotation = 0
        self._runner: asyncio.Task | None = None

    # ---------------------------------------------------------------- the fetch loop

    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._run())

    def kick(self) -> None:
        """Something changed (data polled, a seek, an assignment): look for fetches to send."""
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            retry_in = self._send_fetches(loop.time())
            if retry_in is not None:
                loop.call_later(retry_in, self._wake.set)

    def _send_fetches(self, now: float) -> float | None:
        by_node: dict[int, list[tuple[TopicPartition, PartitionState]]] = defaultdict(list)
        retry_in: float | None = None
        need_metadata = False
        for tp, s in self.subs.assignment.items():
            if s.paused or s.revoking or s.fetch_offset is None or s.inflight or s.error is not None \
                    or len(s.buffered) >= MAX_BUFFERED:
                continue
            if s.retry_at > now:
                retry_in = min(retry_in or 1e9, s.retry_at - now)
                continue
            leader = self._leader(tp)
            if leader is None:
                need_metadata = True
                s.retry_at = now + self.retry_backoff
                retry_in = min(retry_in or 1e9, self.retry_backoff)
                continue
            node = self._read_replica(tp, now) if self._read_replicas else None
            if node is None:
                node = leader
            if node not in self._inflight:
                by_node[node].append((tp, s))
        if need_metadata:
            self.request_metadata()
        for node_id, parts in by_node.items():
            self._inflight.add(node_id)
            sent = []
            for tp, s in parts:
                s.inflight = True
                sent.append((tp, s, s.fetch_offset, s.epoch))
            task = asyncio.get_running_loop().create_task(self._fetch(node_id, sent))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return retry_in

    def _read_replica(self, tp: TopicPartition, now: float) -> int | None:
        """The follower to read ``tp`` from (a leader's preferred read replica), if still due."""
        found = self._read_replicas.get(tp)
        if found is None:
            return None
        node, until = found
        if until <= now or node not in self.cluster.brokers:
            del self._read_replicas[tp]
            return None
        return node

    def _leave_read_replica(self, tp: TopicPartition, node_id: int) -> bool:
        """Back to the leader after an error from the read replica ``node_id``; whether it was one."""
        found = self._read_replicas.get(tp)
        if found is not None and found[0] == node_id:
            del self._read_replicas[tp]
            log.debug("Fetch of %s from read replica %s failed: back to the leader", tp, node_id)
            return True
        return False

    def _leader(self, tp: TopicPartition) -> int | None:
        meta = self.cluster.topics.get(tp.topic)
        p = meta.partitions.get(tp.partition) if meta else None
        if p is None or p.leader < 0 or p.leader not in self.cluster.brokers:
            return None
        return p.leader

    async def _connection(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        broker = self.cluster.brokers[node_id]
        conn = BrokerConnection(broker.host, broker.port, self.cluster.client_id,
                                request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=self.cluster.connect_timeout_ms,
                                security=self.cluster.security)
        await conn.connect()
        self._conns[node_id] = conn
        return conn

    async def _fetch(self, node_id: int, sent: list[tuple[TopicPartition, PartitionState, int, int]]) -> None:
        loop = asyncio.get_running_loop()
        try:
            wanted = {(tp.topic, tp.partition): {
                "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": self.partition_max_bytes}
                for tp, s, offset, _ in sent}
            session = self._sessions.get(node_id)
            if session is None:
                session = self._sessions[node_id] = FetchSessionHandler()
            body = {"replica_id": -1, "max_wait_ms": self.max_wait_ms, "min_bytes": self.min_bytes,
                    "max_bytes": self.max_bytes, "isolation_level": self.isolation, **session.build(wanted),
                    "rack_id": self.rack or ""}
            try:
                conn = await self._connection(node_id)
                sent_at = loop.time()
                resp = await conn.request(ApiKey.FETCH, body, min_version=4, max_version=FETCH_MAX_VERSION,
                                          timeout_ms=self.request_timeout_ms + self.max_wait_ms)
            except (*_NETWORK, errors.KafkaError, KeyError) as e:
                log.debug("Fetch from broker %s failed: %s", node_id, e)
                session.failed()
                for tp, s, _, _ in sent:
                    if not self._leave_read_replica(tp, node_id):
                        s.retry_at = loop.time() + self.retry_backoff
                self.request_metadata()
                return
            if not session.handle_response(resp):
                log.debug("Fetch session with broker %s: %s; a full fetch next",
                          node_id, errors.error_name(resp["error_code"]))
                return
            now = loop.time()
            m = self.metrics
            m.fetch.record()
            m.fetch_latency.record((now - sent_at) * 1000)
            m.throttle.record(resp.get("throttle_time_ms", 0))
            self._handle(resp, {tp: (s, offset, epoch) for tp, s, offset, epoch in sent}, now, node_id)
        finally:
            self._inflight.discard(node_id)
            for _, s, _, _ in sent:
                s.inflight = False
            self._wake.set()

    def _handle(self, resp: dict, sent: dict[TopicPartition, tuple[PartitionState, int, int]], now: float,
                node_id: int = -1) -> None:
        top = resp.get("error_code", 0)
        got_data = False
        refresh = False
        size = 0
        lag = self.metrics.records_lag
        for t in resp["responses"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["topic"], p["partition_index"])
                entry = sent.get(tp)
                if entry is None:
                    continue
                s, offset, epoch = entry
                if self.subs.assignment.get(tp) is not s or s.epoch != epoch or s.fetch_offset != offset:
                    continue  # unassigned, or sought elsewhere, since the fetch went out
                code = top or p["error_code"]
                if code and self._read_replicas and self._leave_read_replica(tp, node_id):
                    continue  # the leader answers next (an out-of-range offset too: it decides)
                if code == 0:
                    replica = p.get("preferred_read_replica", -1)
                    if replica >= 0 and replica != node_id:
                        log.debug("Fetch of %s: reading from replica %s (client.rack %s)", tp, replica, self.rack)
                        self._read_replicas[tp] = (replica, now + self.read_replica_ttl)
                        continue
                    s.high_watermark = p["high_watermark"]
                    s.last_stable_offset = p.get("last_stable_offset", -1)
                    s.log_start_offset = p.get("log_start_offset", -1)
                    records = p["records"]
                    if records:
                        size += len(records)
                        got_data |= self._buffer(tp, s, bytes(records), offset, p)
                    lag.record(max(s.high_watermark - s.fetch_offset, 0))
                elif code == errors.E_OFFSET_OUT_OF_RANGE:
                    self._out_of_range(tp, s, offset)
                    got_data = True  # poll must look: a reset or an error is due
                elif code in REFRESH_ERRORS:
                    log.debug("Fetch of %s: %s; refreshing metadata", tp, errors.error_name(code))
                    s.retry_at = now + self.retry_backoff
                    refresh = True
                else:
                    s.error = errors.error_for(code, f"Fetch of {tp} failed: {errors.error_name(code)}")
                    got_data = True
        self.metrics.fetch_size.record(size)
        if size:
            self.metrics.bytes_consumed.record(size)
        if refresh:
            self.request_metadata()
        if got_data:
            self.data_ready.set()

    def _buffer(self, tp: TopicPartition, s: PartitionState, data: bytes, offset: int, p: dict) -> bool:
        aborted = None
        if self.isolation and p.get("aborted_transactions"):
            aborted = [(a["producer_id"], a["first_offset"]) for a in p["aborted_transactions"]]
        try:
            chunk = CompletedFetch(tp, data, offset, p["high_watermark"], s.epoch, check_crcs=self.check_crcs,
                                   aborted=aborted, key_deserializer=self.key_deserializer,
                                   value_deserializer=self.value_deserializer)
        except errors.KafkaError as e:
            s.error = e
            return True
        if chunk.next_offset == offset:
            if len(data) >= self.partition_max_bytes:
                s.error = errors.RecordListTooLargeError(
                    f"There are some messages at [Partition=Offset]: {{{tp}={offset}}} whose size is larger than "
                    f"the fetch size {self.partition_max_bytes} and hence cannot be returned")
                return True
            return False  # only a partial batch: nothing yet
        s.buffered.append(chunk)
        s.fetch_offset = chunk.next_offset
        return True

    def _out_of_range(self, tp: TopicPartition, s: PartitionState, offset: int) -> None:
        strategy = self.subs.default_reset
        if strategy == "none":
            s.error = errors.OffsetOutOfRangeError(
                f"Fetch position FetchPosition{{offset={offset}}} is out of range for partition {tp}")
            return
        log.info("Fetch position %d is out of range for partition %s, resetting offset", offset, tp)
        s.clear_position()
        s.reset_strategy = strategy

    # ---------------------------------------------------------------- handing records to poll()

    def drain(self, max_records: int, wake: Callable[[], None] | None = None, *,
              batches: bool = False) -> list[ConsumerRecord] | list[FetchedBatch]:
        """Up to ``max_records`` buffered records, taking partitions in turn; raises a
        partition's pending error when there is nothing to return before it. ``wake``
        tells the fetch loop that room was made (from another thread: a threadsafe call).
        ``batches``: whole record batches, undecoded (:meth:`CompletedFetch.take_batches`)."""
        out: list[Any] = []
        items = [(tp, s) for tp, s in self.subs.assignment.items()
                 if (s.buffered or s.error is not None) and not (s.paused or s.revoking)]
        if not items:
            return out
        start = self._rotation % len(items)
        self._rotation += 1
        freed = False
        count = 0
        for tp, s in items[start:] + items[:start]:
            if s.error is not None:
                if out:
                    break
                error, s.error = s.error, None
                raise error
            buffered = s.buffered
            while buffered and count < max_records:
                chunk = buffered[0]
                if chunk.epoch != s.epoch or s.position is None:
                    buffered.popleft()
                    continue
                try:
                    taken: list[Any] = chunk.take_batches(s.position) if batches else \
                        chunk.take(s.position, max_records - count)
                except Exception as e:  # corrupt data or a failing deserializer: stop at it
                    buffered.clear()
                    s.fetch_offset = s.position
                    freed = True
                    if out:
                        s.error = e
                        break
                    raise
                if taken:
                    out += taken
                    last = taken[-1]
                    if batches:
                        count += sum(b.count for b in taken)
                        s.position = max(s.position, last.next_offset)
                    else:
                        count += len(taken)
                        s.position = last.offset + 1
                    s.leader_epoch = last.leader_epoch
                if chunk.exhausted:
                    buffered.popleft()
                    freed = True
                    if chunk.next_offset > s.position:
                        s.position = chunk.next_offset  # past control batches and compacted gaps
                elif not taken:
                    break
            if count >= max_records:
                break
        if freed:
            (wake or self._wake.set)()
        if count:
            self.metrics.records_consumed.record(count)
        return out

    def has_buffered(self) -> bool:
        return any((s.buffered or s.error is not None) and not (s.paused or s.revoking)
                   for s in self.subs.assignment.values())

    # ---------------------------------------------------------------- ListOffsets

    async def list_offsets(self, specs: dict[TopicPartition, int], timeout: float
                           ) -> dict[TopicPartition, tuple[int, int, int | None]]:
        """``{tp: timestamp | EARLIEST | LATEST}`` -> ``{tp: (offset, timestamp, leader_epoch)}``;
        offset -1 where no record is that late. Retries leader moves until ``timeout`` (s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out: dict[TopicPartition, tuple[int, int, int | None]] = {}
        todo = dict(specs)
        backoff = self.retry_backoff
        while todo:
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            retry: dict[TopicPartition, int] = {}
            last_error: BaseException | None = None
            for tp in todo:
                try:
                    leader = await self.cluster.leader_id(tp.topic, tp.partition,
                                                          refresh=self._leader(tp) is None)
                    by_leader[leader].append(tp)
                except (errors.KafkaError, *_NETWORK) as e:
                    if isinstance(e, errors.KafkaError) and not e.retriable:
                        raise
                    retry[tp] = todo[tp]
                    last_error = e
            results = await asyncio.gather(*(self._list_offsets_from(node, tps, todo)
                                             for node, tps in by_leader.items()), return_exceptions=True)
            for (node, tps), result in zip(by_leader.items(), results):
                if isinstance(result, BaseException):
                    if isinstance(result, errors.KafkaError) and not result.retriable:
                        raise result
                    if not isinstance(result, (errors.KafkaError, *_NETWORK)):
                        raise result
                    last_error = result
                    retry.update({tp: todo[tp] for tp in tps})
                    continue
                found, again = result
                out.update(found)
                retry.update({tp: todo[tp] for tp in again})
            todo = retry
            if not todo:
                break
            if loop.time() + backoff >= deadline:
                names = ", ".join(str(tp) for tp in todo)
                raise KafkaTimeoutError(f"Failed to get offsets by times in {int(timeout * 1000)}ms "
                                        f"for partitions [{names}]" + (f": {last_error}" if last_error else ""))
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
            try:
                await self.cluster.refresh(sorted({tp.topic for tp in todo}))
            except (errors.KafkaError, *_NETWORK):
                pass
        return out

    async def _list_offsets_from(self, node_id: int, tps: list[TopicPartition], specs: dict[TopicPartition, int]):
        topics: dict[str, list[dict]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition, "current_leader_epoch": -1, "timestamp": specs[tp]})
        body = {"replica_id": -1, "isolation_level": self.isolation,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout_ms": self.request_timeout_ms}
        conn = await self.cluster.node(node_id)
        resp = await conn.request(ApiKey.LIST_OFFSETS, body, min_version=1)
        found: dict[TopicPartition, tuple[int, int, int | None]] = {}
        again: list[TopicPartition] = []
        for t in resp["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"])
                code = p["error_code"]
                if code == 0:
                    epoch = p.get("leader_epoch", -1)
                    found[tp] = (p["offset"], p.get("timestamp", -1), epoch if epoch >= 0 else None)
                elif code in REFRESH_ERRORS:
                    again.append(tp)
                else:
                    raise errors.error_for(code, f"ListOffsets for {tp} failed: {errors.error_name(code)}")
        return found, again

    async def reset_positions(self, tps: list[TopicPartition], timeout: float) -> None:
        """Seek partitions due for a reset to the earliest or latest offset."""
        specs = {}
        epochs = {}
        for tp in tps:
            s = self.subs.assignment.get(tp)
            if s is None or s.reset_strategy is None:
                continue
            specs[tp] = EARLIEST if s.reset_strategy == "earliest" else LATEST
            epochs[tp] = s.epoch
        if not specs:
            return
        found = await self.list_offsets(specs, timeout)
        for tp, (offset, _, leader_epoch) in found.items():
            s = self.subs.assignment.get(tp)
            if s is None or s.epoch != epochs[tp] or s.reset_strategy is None:
                continue  # reassigned or sought meanwhile
            log.info("Resetting offset for partition %s to position %d.", tp, offset)
            s.seek(offset, leader_epoch)
        self.kick()

    # ---------------------------------------------------------------- close

    async def close(self) -> None:
        for task in [self._runner, *self._tasks]:
            if task is not None:
                task.cancel()
        for task in [self._runner, *self._tasks]:
            if task is not None:
                await asyncio.gather(task, return_exceptions=True)
        self._runner = None
        for conn in self._conns.values():
            conn.close()
        for conn in self._conns.values():
            await conn.wait_closed()
        self._conns.clear()
