"""The share partitions this broker leads, as Kafka's SharePartitionManager keeps them.

The ShareFetch and ShareAcknowledge handlers ask it to acquire records for a member
(:meth:`SharePartitionManager.fetch`), to apply acknowledgements
(:meth:`SharePartitionManager.acknowledge`) and to release a member's records
(:meth:`SharePartitionManager.release_member`; the share coordinator calls it when a member
leaves its group). A share partition is loaded from the persister the first time it is used
on its leader, with the leader epoch; when leadership moves, it is dropped here (the new
leader loads what was written, where acquired records are available again). Each change
(acknowledgements, lock expiry, archiving, start-offset moves) is written through the
persister; an acknowledgement is answered once it is written.

As Kafka's SharePartition does, an acknowledgement and a member's release are applied
tentatively and written: if the write fails (the share coordinator's broker is gone:
COORDINATOR_NOT_AVAILABLE to the client), exactly those records go back to what they were,
acquired by the member under their lock (available if it ran out meanwhile), so the error the
client gets is true: it may acknowledge them again, or they are delivered again after their
lock. A lock's expiry, records archived while acquiring and start-offset moves are not rolled
back (Kafka, too, keeps a lock-timeout release when its write fails): they are written with
the next change. The persister is not retried here: a retriable error goes to the client,
which retries the request.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from samsa.broker_config import BrokerConfig
from samsa.clock import now_ms
from samsa.cluster.partition import Partition
from samsa.cluster.replica_manager import ReplicaManager
from samsa.client.offset_reset import ResetError, parse_duration
from samsa.coordinator.share.state import PersisterError, SharePersister, ShareKey
from samsa.protocol import errors
from samsa.server.share.partition import Acquired, AckError, SharePartition
from samsa.server.share.sessions import ShareSessionCache

log = logging.getLogger(__name__)

# What a fetch or an acknowledgement answers for a persister's refusal (retriable ones are retried by the client).
_PERSISTER_CODES = {
    errors.E_NOT_COORDINATOR: errors.E_COORDINATOR_NOT_AVAILABLE,
    errors.E_COORDINATOR_NOT_AVAILABLE: errors.E_COORDINATOR_NOT_AVAILABLE,
    errors.E_COORDINATOR_LOAD_IN_PROGRESS: errors.E_COORDINATOR_NOT_AVAILABLE,
    errors.E_FENCED_LEADER_EPOCH: errors.E_NOT_LEADER_OR_FOLLOWER,
    errors.E_FENCED_STATE_EPOCH: errors.E_FENCED_STATE_EPOCH,
}

_RETRIABLE = (errors.E_NOT_COORDINATOR, errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_COORDINATOR_LOAD_IN_PROGRESS,
              errors.E_REQUEST_TIMED_OUT)


@dataclass
class FetchResult:
    error: int = 0
    message: str | None = None
    records: bytes = b""
    acquired: list[Acquired] | None = None


@dataclass(frozen=True)
class ShareMetrics:
    group_id: str
    topic: str
    partition: int
    in_flight: int
    acquired: int
    start_offset: int


class SharePartitionManager:
    def __init__(self, config: BrokerConfig, replicas: ReplicaManager, share_config: Callable[[str, str], Any],
                 persister: SharePersister | None = None):
        self.config = config
        self.replicas = replicas
        # a share group's effective share.* config (the group's, else the group.share.* broker
        # key's): the group configs room's rule (GroupCoordinator.share_group_config)
        self.share_config = share_config
        self.persister = persister  # the share coordinator's, wired by the broker
        self.sessions = ShareSessionCache(config["group.share.max.share.sessions"])
        self.partitions: dict[ShareKey, SharePartition] = {}
        self._loading: dict[ShareKey, asyncio.Future] = {}
        self._write_locks: dict[ShareKey, asyncio.Lock] = {}
        self._waiters: list[asyncio.Future] = []
        self._tasks: set[asyncio.Task] = set()
        self._timers: dict[ShareKey, set[asyncio.TimerHandle]] = {}
        self.redelivered = 0  # records acquired again (delivery count > 1), for the metrics

    # ------------------------------------------------------------------ group configs

    def lock_duration_ms(self, group_id: str) -> int:
        return self.share_config(group_id, "share.record.lock.duration.ms")

    def delivery_count_limit(self, group_id: str) -> int:
        return self.share_config(group_id, "share.delivery.count.limit")

    def max_record_locks(self, group_id: str) -> int:
        return self.share_config(group_id, "share.partition.max.record.locks")

    def read_committed(self, group_id: str) -> bool:
        return self.share_config(group_id, "share.isolation.level") == "read_committed"

    def _reset_offset(self, group_id: str, partition: Partition) -> int:
        """share.auto.offset.reset: latest (the default), earliest, or by_duration:<ISO-8601 duration>."""
        plog = partition.log
        choice = str(self.share_config(group_id, "share.auto.offset.reset")).strip().lower()
        if choice == "earliest":
            return plog.log_start_offset
        if choice.startswith("by_duration:"):
            try:
                found = plog.offset_for_timestamp(now_ms() - parse_duration(choice.split(":", 1)[1].upper()))
            except ResetError:
                found = None
            if found is not None:
                return found[0]
        return partition.high_watermark

    # ------------------------------------------------------------------ loading

    async def _share_partition(self, key: ShareKey, topic: str, index: int) -> tuple[SharePartition, Partition]:
        """The share partition of ``key`` on this leader, loaded from the persister if needed;
        a KafkaError (NOT_LEADER_OR_FOLLOWER, ...) otherwise."""
        while True:
            partition = self.replicas.partition(topic, index)
            epoch = partition.state.leader_epoch
            sp = self.partitions.get(key)
            if sp is not None and sp.leader_epoch == epoch:
                return sp, partition
            loading = self._loading.get(key)
            if loading is None:
                break
            await asyncio.shield(loading)
        fut = self._loading[key] = asyncio.get_running_loop().create_future()
        try:
            sp = await self._load(key, topic, index, partition, epoch)
            if self.replicas.partition(topic, index) is partition and partition.state.leader_epoch == epoch:
                self.partitions[key] = sp
            return sp, partition
        finally:
            del self._loading[key]
            fut.set_result(None)

    async def _load(self, key: ShareKey, topic: str, index: int, partition: Partition, epoch: int) -> SharePartition:
        if self.persister is None:
            raise errors.UnknownServerError("no share-group state persister on this broker")
        try:
            state = await self.persister.read(key, epoch)
        except PersisterError as e:
            log.info("share partition %s %s-%d: reading its state failed with error %d: %s",
                     key.group_id, topic, index, e.code, e)
            raise errors.error_for(_PERSISTER_CODES.get(e.code, errors.E_UNKNOWN_SERVER_ERROR), str(e)) from None
        sp = SharePartition(key, topic, index)
        sp.load(state, self._reset_offset(key.group_id, partition) if state.start_offset < 0 else 0, epoch)
        sp.move_start_to(partition.log.log_start_offset)
        log.info("share partition %s %s-%d loaded in leader epoch %d: start offset %d, %d in flight",
                 key.group_id, topic, index, epoch, sp.start_offset, sp.in_flight())
        if state.start_offset < 0:
            await self._write(key, sp)  # the start offset share.auto.offset.reset chose
        return sp

    # ------------------------------------------------------------------ fetching

    async def fetch(self, group_id: str, member_id: str, topic_id: bytes, topic: str, index: int,
                    max_records: int, batch_size: int, max_bytes: int, record_limit: bool = False) -> FetchResult:
        """Acquire for the member what it may have of this partition now (maybe nothing)."""
        key = ShareKey(group_id, uuid.UUID(bytes=topic_id), index)
        try:
            sp, partition = await self._share_partition(key, topic, index)
            plog = partition.log
            moved = sp.move_start_to(plog.log_start_offset)
            max_locks = self.max_record_locks(group_id)
            read_committed = self.read_committed(group_id)
            limit = plog.last_stable_offset if read_committed else partition.high_watermark
            offset = sp.next_fetch_offset()
            if max_records <= 0 or offset >= limit or not sp.can_acquire(max_locks):
                if moved:
                    self._write_later(key, sp)
                return FetchResult()
            try:
                data = plog.read(offset, max(max_bytes, 1), max_offset=limit, min_one_batch=True)
            except (OSError, errors.KafkaStorageError) as e:  # KIP-112: its log dir goes offline
                self.replicas.logs.failed(plog, e)
                return FetchResult(errors.E_KAFKA_STORAGE_ERROR)
            aborted = None
            if read_committed and data:
                aborted = [(t.producer_id, t.first_offset) for t in plog.aborted_transactions(offset, limit)]
            acquisition = sp.acquire(member_id, data, max_records, batch_size, max_locks, aborted, record_limit,
                                     self.delivery_count_limit(group_id))
        except errors.KafkaError as e:
            return FetchResult(e.code, None)
        if acquisition.lock is not None:
            self._lock(key, sp, acquisition.lock, self.lock_duration_ms(group_id))
            self.redelivered += sum(r.last_offset - r.first_offset + 1
                                    for r in acquisition.ranges if r.delivery_count > 1)
        if acquisition.changed or moved:
            self._write_later(key, sp)
        return FetchResult(0, None, acquisition.records, acquisition.ranges)

    def _lock(self, key: ShareKey, sp: SharePartition, token: object, duration_ms: int) -> None:
        loop = asyncio.get_running_loop()
        timers = self._timers.setdefault(key, set())
        handle: asyncio.TimerHandle | None = None

        def expire() -> None:
            timers.discard(handle)
            if self.partitions.get(key) is sp and sp.expire(token, self.delivery_count_limit(key.group_id)):
                self._changed(key, sp)
        handle = loop.call_later(duration_ms / 1000, expire)
        timers.add(handle)

    # ------------------------------------------------------------------ acknowledging

    async def acknowledge(self, group_id: str, member_id: str, topic_id: bytes, topic: str, index: int,
                          batches: list[tuple[int, int, list[int]]]) -> tuple[int, str | None]:
        """Apply a member's acknowledgements to one partition; (error code, message) once written."""
        key = ShareKey(group_id, uuid.UUID(bytes=topic_id), index)
        try:
            sp, _ = await self._share_partition(key, topic, index)
        except errors.KafkaError as e:
            return e.code, None
        transition = object()
        try:
            renewed = sp.acknowledge(member_id, batches, self.delivery_count_limit(group_id), transition)
        except AckError as e:
            return e.code, e.message
        if renewed is not None:
            self._lock(key, sp, renewed, self.lock_duration_ms(group_id))
        return await self._write(key, sp, transition if sp.is_pending(transition) else None), None

    async def release_member(self, group_id: str, member_id: str) -> None:
        """The member's session closed, or it left the group (the share coordinator says so):
        the records it holds here are available again (or archived at the delivery count limit)."""
        limit = self.delivery_count_limit(group_id)
        transition = object()
        changed = [(key, sp) for key, sp in list(self.partitions.items())
                   if key.group_id == group_id and sp.release_member(member_id, limit, transition)]
        if changed:
            await asyncio.gather(*(self._write(key, sp, transition) for key, sp in changed))

    def member_left(self, group_id: str, member_id: str) -> None:
        """A hook for the group coordinator: a member left the group (or was fenced), so its share
        session here ends and its records are released. (Kafka's brokers release a member's
        records when its share session ends, closed or with its connection, as
        :meth:`connection_closed` does; nothing calls this yet.)"""
        self.sessions.close(group_id, member_id)
        self._spawn(self.release_member(group_id, member_id))

    def connection_closed(self, connection: object) -> None:
        """A connection closed: the share sessions it opened end, releasing their members' records."""
        for session in self.sessions.of_connection(connection):
            self.sessions.close(session.group_id, session.member_id)
            self._spawn(self.release_member(session.group_id, session.member_id))

    # ------------------------------------------------------------------ writing and waking

    def _changed(self, key: ShareKey, sp: SharePartition) -> None:
        self._wake()
        self._write_later(key, sp)

    def _write_later(self, key: ShareKey, sp: SharePartition) -> None:
        self._spawn(self._write(key, sp))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, key: ShareKey, sp: SharePartition, transition: object | None = None) -> int:
        """Write the share partition's state as it is when the write starts (writes of one
        partition go one at a time, so the last one written is the newest); an error code.
        ``transition``: the tentative change this write makes final, or rolls back if it fails
        (if an earlier write already held it, it is final: nothing to write for it)."""
        limit = self.delivery_count_limit(key.group_id)
        if self.persister is None:
            if transition is not None and sp.rollback(transition, limit):
                self._wake()
            return errors.E_UNKNOWN_SERVER_ERROR
        lock = self._write_locks.setdefault(key, asyncio.Lock())
        async with lock:
            if transition is not None and not sp.is_pending(transition):
                return 0  # written (and made final) by an earlier write that started after it was applied
            if self.partitions.get(key, sp) is not sp:
                if transition is not None:
                    sp.rollback(transition, limit)
                return errors.E_NOT_LEADER_OR_FOLLOWER  # leadership moved: the new leader has its own state
            included = sp.pending()
            try:
                await self.persister.write(key, sp.snapshot())
            except Exception as e:
                if transition is not None and sp.rollback(transition, limit):
                    self._wake()  # records released back may be acquired again
                if not isinstance(e, PersisterError):
                    log.exception("share partition %s %s-%d: writing its state failed",
                                  key.group_id, sp.topic, sp.index)
                    return errors.E_UNKNOWN_SERVER_ERROR
                log.warning("share partition %s %s-%d: writing its state failed with error %d: %s",
                            key.group_id, sp.topic, sp.index, e.code, e)
                if e.code not in _RETRIABLE and self.partitions.get(key) is sp:
                    # the stored state moved on without this leader (offsets reset or deleted,
                    # a newer leader epoch): forget this copy, the next request loads it again
                    self.partitions.pop(key, None)
                    for handle in self._timers.pop(key, ()):
                        handle.cancel()
                    self._wake()
                return _PERSISTER_CODES.get(e.code, errors.E_UNKNOWN_SERVER_ERROR)
            if sp.commit(included):
                self._wake()  # released records are available, the start offset may have moved
        return 0

    def watch(self, partitions: list[Partition]) -> asyncio.Future:
        """A future resolved by the next append or high-watermark change of ``partitions``, or the
        next change of any share partition here (records released, locks expired)."""
        fut = self.replicas.watch_changes(partitions)
        self._waiters.append(fut)
        return fut

    def unwatch(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # ------------------------------------------------------------------ leadership

    def on_leader(self, topic: str, index: int) -> None:
        self._drop(topic, index)

    def on_follower(self, topic: str, index: int) -> None:
        self._drop(topic, index)

    def _drop(self, topic: str, index: int) -> None:
        """Leadership of the partition changed: its share partitions are loaded again where it is led."""
        for key in [k for k, sp in self.partitions.items() if sp.topic == topic and sp.index == index]:
            self.partitions.pop(key, None)
            for handle in self._timers.pop(key, ()):
                handle.cancel()
        self._wake()

    def stop(self) -> None:
        for handles in self._timers.values():
            for handle in handles:
                handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()

    def metrics(self) -> list[ShareMetrics]:
        return [ShareMetrics(k.group_id, sp.topic, sp.index, sp.in_flight(), sp.acquired_count(), sp.start_offset)
                for k, sp in sorted(self.partitions.items(), key=lambda kv: (kv[0].group_id, kv[1].topic, kv[1].index))]
