"""The share coordinator (KIP-932): the state of share partitions in ``__share_group_state``.

A share partition — (group id, topic id, partition) — belongs to the partition of
``__share_group_state`` that Kafka's rule picks for the key ``"group:topicId:partition"``
(:func:`samsa.coordinator.host.coordinator_partition`); the broker leading that partition is its
share coordinator. It keeps each share partition's state in memory, writes every change to its
partition before answering (a ``ShareUpdate`` record, or a full ``ShareSnapshot`` once
``share.coordinator.snapshot.update.records.per.snapshot`` updates have followed the last
snapshot, as Kafka counts them), and replays the partition when it becomes its leader.

The rules are Kafka 4.4's, as its share coordinator answers them (tests/differential): reading
or writing a share partition that was never initialised is INVALID_REQUEST; a lower state epoch
is FENCED_STATE_EPOCH, a lower leader epoch FENCED_LEADER_EPOCH; a read at a higher leader epoch
records it; a write merges its batches into the stored ones (:func:`combine`), dropping what lies
below the start offset; initialising again (at the same or a higher state epoch) starts afresh.

The :class:`SharePersister` the share partitions use is :class:`SharePersisterImpl`: in-process
when this broker coordinates the key, else over the share-state RPCs to the broker that does.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from samsa.clock import now_ms
from samsa.cluster.metadata import BrokerInfo
from samsa.cluster.partition import Partition
from samsa.coordinator.host import CoordinatorHost, coordinator_partition, ensure_internal_topic, log_chunks
from samsa.coordinator.share.state import DeliveryState, PartitionState, PersisterError, ShareKey, StateBatch
from samsa.protocol import batch, errors, records
from samsa.protocol import share_records as sr
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.share_records import SHARE_STATE_TOPIC

log = logging.getLogger(__name__)

#: Every broker config the share coordinator reads.
CONFIG_KEYS = ("share.coordinator.state.topic.num.partitions", "share.coordinator.state.topic.replication.factor",
               "share.coordinator.state.topic.min.isr", "share.coordinator.state.topic.segment.bytes",
               "share.coordinator.snapshot.update.records.per.snapshot", "share.coordinator.write.timeout.ms")

# Kafka 4.4's words for its refusals.
UNINITIALIZED = "{} operation on uninitialized share partition not allowed."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
FENCED_STATE = "The coordinator rejected the request because the state epoch did not match."
FENCED_LEADER = "The leader epoch in the request is older than the epoch on the broker."


def kafka_uuid(topic_id: uuid.UUID) -> str:
    """A topic id as Kafka prints it (Uuid.toString: base64url, no padding)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def coordinator_key(key: ShareKey) -> str:
    """FindCoordinator's key for a share partition (key type 2): ``group:topicId:partition``."""
    return f"{key.group_id}:{kafka_uuid(key.topic_id)}:{key.partition}"


def parse_coordinator_key(text: str) -> ShareKey:
    """The reverse of :func:`coordinator_key`; InvalidRequestError for a malformed key."""
    try:
        group_id, topic, partition = text.rsplit(":", 2)
        raw = base64.urlsafe_b64decode(topic + "=" * (-len(topic) % 4))
        if not group_id or len(raw) != 16:
            raise ValueError(text)
        return ShareKey(group_id, uuid.UUID(bytes=raw), int(partition))
    except (ValueError, TypeError):
        raise errors.InvalidRequestError(f"Invalid coordinator key {text!r} for a share partition "
                                         "(expected groupId:topicId:partition)") from None


# ---------------------------------------------------------------- batches

def combine(stored: list[StateBatch], written: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """The batches after a write: ``written`` overrides ``stored`` where they overlap, what lies
    below ``start_offset`` goes, and neighbouring batches of one state and count become one."""
    cells: list[StateBatch] = []
    for b in stored:
        pieces = [(b.first_offset, b.last_offset)]
        for w in written:
            nxt = []
            for lo, hi in pieces:
                if w.last_offset < lo or w.first_offset > hi:
                    nxt.append((lo, hi))
                    continue
                if lo < w.first_offset:
                    nxt.append((lo, w.first_offset - 1))
                if hi > w.last_offset:
                    nxt.append((w.last_offset + 1, hi))
            pieces = nxt
        cells += [StateBatch(lo, hi, b.delivery_state, b.delivery_count) for lo, hi in pieces]
    cells += written
    out: list[StateBatch] = []
    for b in sorted(cells, key=lambda b: b.first_offset):
        if start_offset >= 0 and b.last_offset < start_offset:
            continue
        if start_offset >= 0 and b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        if out and out[-1].last_offset + 1 == b.first_offset and (out[-1].delivery_state, out[-1].delivery_count) == (
                b.delivery_state, b.delivery_count):
            out[-1] = StateBatch(out[-1].first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        else:
            out.append(b)
    return out


def batches_from_wire(items: list[dict]) -> list[StateBatch]:
    out = []
    for b in items:
        state = b["delivery_state"]
        out.append(StateBatch(b["first_offset"], b["last_offset"],
                              DeliveryState(state) if state in DeliveryState._value2member_map_ else state,
                              b["delivery_count"]))
    return out


def batches_to_wire(items: list[StateBatch]) -> list[dict]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": int(b.delivery_state),
             "delivery_count": b.delivery_count} for b in items]


@dataclass
class _Stored:
    """One share partition's state as the coordinator keeps it."""
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    snapshot_epoch: int = 0
    create_ts: int = 0
    write_ts: int = 0
    updates: int = 0                      # ShareUpdate records since the last snapshot

    def public(self) -> PartitionState:
        return PartitionState(self.state_epoch, self.leader_epoch, self.start_offset, self.delivery_complete_count,
                              list(self.batches))


class ShareCoordinatorHost(CoordinatorHost, Protocol):
    """What the share coordinator asks of the broker beyond any coordinator's needs."""

    async def request_broker(self, broker_id: int, api_key: ApiKey, body: dict) -> dict:
        """One request to another broker (the share-state RPCs of a remote persister)."""
        ...


class ShareCoordinator:
    def __init__(self, host: ShareCoordinatorHost):
        self.host = host
        self.states: dict[ShareKey, _Stored] = {}
        self._locks: dict[ShareKey, asyncio.Lock] = {}
        self.persister = SharePersisterImpl(self)

    def cfg(self, key: str) -> Any:
        return self.host.config[key]

    @property
    def num_partitions(self) -> int:
        topic = self.host.topics.get(SHARE_STATE_TOPIC)
        return len(topic.partitions) if topic else self.cfg("share.coordinator.state.topic.num.partitions")

    def partition_of(self, key: ShareKey) -> int:
        return coordinator_partition(coordinator_key(key), self.num_partitions)

    # ---------------------------------------------------------------- routing

    def ensure_topic(self) -> None:
        ensure_internal_topic(self.host, SHARE_STATE_TOPIC, self.cfg("share.coordinator.state.topic.num.partitions"),
                              "share.coordinator.state.topic.replication.factor", {
                                  "cleanup.policy": "delete", "retention.ms": "-1",
                                  "min.insync.replicas": str(self.cfg("share.coordinator.state.topic.min.isr")),
                                  "segment.bytes": str(self.cfg("share.coordinator.state.topic.segment.bytes")),
                                  "compression.type": "producer",
                              })

    def coordinator_for(self, key: ShareKey) -> BrokerInfo:
        """The broker leading the key's ``__share_group_state`` partition (FindCoordinator key type 2)."""
        self.ensure_topic()
        topic = self.host.topics[SHARE_STATE_TOPIC]
        leader = topic.partitions[self.partition_of(key)].leader
        for b in self.host.alive_brokers():
            if b.id == leader:
                return b
        raise errors.CoordinatorNotAvailableError(f"no leader for the share state partition of {coordinator_key(key)}")

    def _partition(self, key: ShareKey) -> Partition:
        """The state partition of ``key`` if this broker leads it, else PersisterError NOT_COORDINATOR."""
        try:
            if SHARE_STATE_TOPIC not in self.host.topics:
                raise errors.CoordinatorNotAvailableError()
            return self.host.partition(SHARE_STATE_TOPIC, self.partition_of(key))
        except errors.CoordinatorNotAvailableError:
            raise PersisterError(errors.E_COORDINATOR_NOT_AVAILABLE) from None
        except errors.KafkaError:
            raise PersisterError(errors.E_NOT_COORDINATOR) from None

    # ---------------------------------------------------------------- leadership

    def on_leader(self, topic: str, index: int) -> None:
        """This broker now leads a state partition: load its share partitions."""
        if topic != SHARE_STATE_TOPIC:
            return
        self.on_follower(topic, index)
        count = 0
        for record_type, key, value in _read_partition(self.host.partition(topic, index)):
            count += 1
            if value is None:
                self.states.pop(key, None)
            elif record_type == sr.SNAPSHOT:
                self.states[key] = _Stored(value["state_epoch"], value["leader_epoch"], value["start_offset"],
                                           value["delivery_complete_count"], batches_from_wire(value["state_batches"]),
                                           value["snapshot_epoch"], value["create_timestamp"],
                                           value["write_timestamp"], 0)
            elif (s := self.states.get(key)) is not None and value["snapshot_epoch"] == s.snapshot_epoch:
                self._apply_update(s, value["leader_epoch"], value["start_offset"], value["delivery_complete_count"],
                                   batches_from_wire(value["state_batches"]))
                s.updates += 1
        log.debug("loaded %d records of %s-%d", count, topic, index)

    def on_follower(self, topic: str, index: int) -> None:
        if topic != SHARE_STATE_TOPIC:
            return
        n = self.num_partitions
        for key in [k for k in self.states if coordinator_partition(coordinator_key(k), n) == index]:
            del self.states[key]

    # ---------------------------------------------------------------- the operations

    def _lock(self, key: ShareKey) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _write(self, partition: Partition, entries: list[tuple[bytes, bytes | None]]) -> None:
        ts = now_ms()
        data = bytearray(records.build_batch([(k, v, ts, []) for k, v in entries]))
        min_isr = self.cfg("share.coordinator.state.topic.min.isr")
        try:
            if len(partition.state.isr) < min_isr:
                raise errors.NotEnoughReplicasError()
            info = partition.append(data, batch.validate(data), ts)
            await self.host.wait_for_high_watermark(partition, info.last_offset + 1,
                                                    self.cfg("share.coordinator.write.timeout.ms"), min_isr)
        except errors.NotLeaderOrFollowerError:
            raise PersisterError(errors.E_NOT_COORDINATOR) from None
        except (errors.RequestTimedOutError, errors.NotEnoughReplicasError, errors.NotEnoughReplicasAfterAppendError):
            raise PersisterError(errors.E_COORDINATOR_NOT_AVAILABLE) from None
        except errors.KafkaError as e:
            raise PersisterError(e.code, e.message) from None

    @staticmethod
    def _snapshot_entry(key: ShareKey, s: _Stored) -> tuple[bytes, bytes]:
        return (sr.key(sr.SNAPSHOT, key.group_id, key.topic_id, key.partition),
                sr.value(sr.SNAPSHOT, {
                    "snapshot_epoch": s.snapshot_epoch, "state_epoch": s.state_epoch, "leader_epoch": s.leader_epoch,
                    "start_offset": s.start_offset, "delivery_complete_count": s.delivery_complete_count,
                    "create_timestamp": s.create_ts, "write_timestamp": s.write_ts,
                    "state_batches": batches_to_wire(s.batches)}))

    @staticmethod
    def _apply_update(s: _Stored, leader_epoch: int, start_offset: int, dcc: int, written: list[StateBatch]) -> None:
        s.leader_epoch = leader_epoch
        if start_offset >= 0:
            s.start_offset = start_offset
        if dcc >= 0:
            s.delivery_complete_count = dcc
        s.batches = combine(s.batches, written, s.start_offset)

    async def _record_change(self, key: ShareKey, partition: Partition, s: _Stored, new: _Stored,
                             written: list[StateBatch]) -> None:
        """Store the change from ``s`` to ``new``: a ShareUpdate, or a new snapshot when due."""
        new.write_ts = now_ms()
        if s.updates >= self.cfg("share.coordinator.snapshot.update.records.per.snapshot"):
            new.snapshot_epoch, new.updates = s.snapshot_epoch + 1, 0
            await self._write(partition, [self._snapshot_entry(key, new)])
        else:
            new.updates = s.updates + 1
            await self._write(partition, [(
                sr.key(sr.UPDATE, key.group_id, key.topic_id, key.partition),
                sr.value(sr.UPDATE, {"snapshot_epoch": s.snapshot_epoch, "leader_epoch": new.leader_epoch,
                                     "start_offset": new.start_offset,
                                     "delivery_complete_count": new.delivery_complete_count,
                                     "state_batches": batches_to_wire(written)}))])
        self.states[key] = new

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        partition = self._partition(key)
        async with self._lock(key):
            s = self.states.get(key)
            if s is not None and state_epoch < s.state_epoch:
                raise PersisterError(errors.E_FENCED_STATE_EPOCH, FENCED_STATE)
            ts = now_ms()
            new = _Stored(state_epoch, 0, start_offset, 0 if start_offset >= 0 else -1, [],
                          s.snapshot_epoch + 1 if s is not None else 0, ts, ts, 0)
            await self._write(partition, [self._snapshot_entry(key, new)])
            self.states[key] = new

    async def read(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        if leader_epoch < 0:
            raise PersisterError(errors.E_INVALID_REQUEST, NEGATIVE_LEADER_EPOCH)
        partition = self._partition(key)
        async with self._lock(key):
            s = self.states.get(key)
            if s is None:
                raise PersisterError(errors.E_INVALID_REQUEST, UNINITIALIZED.format("Read"))
            if leader_epoch < s.leader_epoch:
                raise PersisterError(errors.E_FENCED_LEADER_EPOCH, FENCED_LEADER)
            if leader_epoch > s.leader_epoch:  # the partition has a new leader: remembered
                new = _Stored(**{**s.__dict__, "batches": list(s.batches), "leader_epoch": leader_epoch})
                await self._record_change(key, partition, s, new, [])
                s = new
            return s.public()

    async def write(self, key: ShareKey, state: PartitionState) -> None:
        if state.leader_epoch < 0:
            raise PersisterError(errors.E_INVALID_REQUEST, NEGATIVE_LEADER_EPOCH)
        partition = self._partition(key)
        async with self._lock(key):
            s = self.states.get(key)
            if s is None:
                raise PersisterError(errors.E_INVALID_REQUEST, UNINITIALIZED.format("Write"))
            if state.state_epoch < s.state_epoch:
                raise PersisterError(errors.E_FENCED_STATE_EPOCH, FENCED_STATE)
            if state.leader_epoch < s.leader_epoch:
                raise PersisterError(errors.E_FENCED_LEADER_EPOCH, FENCED_LEADER)
            new = _Stored(**{**s.__dict__, "batches": list(s.batches)})
            self._apply_update(new, state.leader_epoch, state.start_offset, state.delivery_complete_count,
                               list(state.batches))
            await self._record_change(key, partition, s, new, list(state.batches))

    async def read_summary(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        self._partition(key)
        s = self.states.get(key)
        if s is None:
            return PartitionState(0, 0, -1, -1, [])
        return PartitionState(s.state_epoch, s.leader_epoch, s.start_offset, s.delivery_complete_count, [])

    async def delete(self, key: ShareKey) -> None:
        partition = self._partition(key)
        async with self._lock(key):
            if key not in self.states:
                return
            await self._write(partition, [(sr.key(t, key.group_id, key.topic_id, key.partition), None)
                                          for t in (sr.SNAPSHOT, sr.UPDATE)])
            self.states.pop(key, None)

    def keys_of(self, group_id: str) -> list[ShareKey]:
        """The share partitions of a group whose state this broker holds."""
        return [k for k in self.states if k.group_id == group_id]


def _read_partition(partition: Partition) -> Iterator[tuple[int, ShareKey, dict | None]]:
    """Every share-state record of a partition, oldest first: (record type, key, value or None)."""
    for data, offset in log_chunks(partition):
        for h, recs in records.iter_batches(data):
            if not h.is_control:
                for record in recs:
                    if record.offset < offset or record.key is None:
                        continue
                    try:
                        parsed = sr.parse_key(bytes(record.key))
                        if parsed is None:
                            continue
                        record_type, group_id, topic_id, index = parsed
                        value = None if record.value is None else sr.parse_value(record_type, bytes(record.value))
                    except (ValueError, UnicodeDecodeError, errors.KafkaError) as e:
                        log.warning("skipping an unreadable record at offset %d of %s: %s", record.offset,
                                    SHARE_STATE_TOPIC, e)
                        continue
                    yield record_type, ShareKey(group_id, topic_id, index), value


# ---------------------------------------------------------------- the persister

RPC = Callable[[int, ApiKey, dict], Awaitable[dict]]


class SharePersisterImpl:
    """The share partitions' :class:`~samsa.coordinator.share.state.SharePersister`: each call
    goes to the key's share coordinator, this broker's in-process or another's over the
    share-state RPCs. A coordinator that cannot be found, or refuses as not the coordinator,
    raises PersisterError with a retriable code (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR).

    ``read`` of a share partition never initialised initialises it first (state epoch 0, start
    offset -1: the leader starts at ``share.auto.offset.reset``), as Kafka's group coordinator
    does when it assigns a topic to a share group."""

    def __init__(self, coordinator: ShareCoordinator):
        self.coordinator = coordinator

    def _where(self, key: ShareKey) -> int | None:
        """None: this broker coordinates the key; else the coordinator's broker id."""
        try:
            b = self.coordinator.coordinator_for(key)
        except errors.KafkaError as e:
            raise PersisterError(e.code if e.code in (errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_NOT_COORDINATOR)
                                 else errors.E_COORDINATOR_NOT_AVAILABLE, e.message) from None
        return None if b.id == self.coordinator.host.broker_id else b.id

    async def _call(self, broker_id: int, api_key: ApiKey, body: dict) -> dict:
        """The one partition result of a share-state RPC; PersisterError for its error code."""
        try:
            resp = await self.coordinator.host.request_broker(broker_id, api_key, body)
        except (errors.KafkaError, OSError) as e:
            raise PersisterError(errors.E_COORDINATOR_NOT_AVAILABLE, f"share coordinator {broker_id}: {e}") from None
        for topic in resp.get("results", []):
            for p in topic["partitions"]:
                if p["error_code"]:
                    raise PersisterError(p["error_code"], p.get("error_message") or "")
                return p
        raise PersisterError(errors.E_UNKNOWN_SERVER_ERROR, "empty share-state response")

    @staticmethod
    def _body(key: ShareKey, partition: dict) -> dict:
        return {"group_id": key.group_id, "topics": [{"topic_id": key.topic_id.bytes,
                                                      "partitions": [{"partition": key.partition, **partition}]}]}

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        where = self._where(key)
        if where is None:
            return await self.coordinator.initialize(key, state_epoch, start_offset)
        await self._call(where, ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                         self._body(key, {"state_epoch": state_epoch, "start_offset": start_offset}))

    async def read(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        try:
            return await self._read(key, leader_epoch)
        except PersisterError as e:
            if e.code != errors.E_INVALID_REQUEST or str(e) != UNINITIALIZED.format("Read"):
                raise
        try:
            await self.initialize(key, 0, -1)
        except PersisterError as e:
            if e.code != errors.E_FENCED_STATE_EPOCH:  # another leader initialised it meanwhile
                raise
        return await self._read(key, leader_epoch)

    async def _read(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        where = self._where(key)
        if where is None:
            return await self.coordinator.read(key, leader_epoch)
        p = await self._call(where, ApiKey.READ_SHARE_GROUP_STATE, self._body(key, {"leader_epoch": leader_epoch}))
        return PartitionState(p["state_epoch"], leader_epoch, p["start_offset"], -1,
                              batches_from_wire(p["state_batches"]))

    async def write(self, key: ShareKey, state: PartitionState) -> None:
        where = self._where(key)
        if where is None:
            return await self.coordinator.write(key, state)
        await self._call(where, ApiKey.WRITE_SHARE_GROUP_STATE, self._body(key, {
            "state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch, "start_offset": state.start_offset,
            "delivery_complete_count": state.delivery_complete_count,
            "state_batches": batches_to_wire(state.batches)}))

    async def read_summary(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        where = self._where(key)
        if where is None:
            return await self.coordinator.read_summary(key, leader_epoch)
        p = await self._call(where, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                             self._body(key, {"leader_epoch": leader_epoch}))
        return PartitionState(p["state_epoch"], p["leader_epoch"], p["start_offset"],
                              p.get("delivery_complete_count", -1), [])

    async def delete(self, key: ShareKey) -> None:
        where = self._where(key)
        if where is None:
            return await self.coordinator.delete(key)
        await self._call(where, ApiKey.DELETE_SHARE_GROUP_STATE, self._body(key, {}))
