"""Groups and committed offsets in ``__consumer_offsets``.

A group belongs to the partition :func:`partition_for` of that topic; the broker leading the
partition coordinates the group, writes every commit and every completed rebalance there
before acknowledging it, and replays the partition when it becomes the leader. The record
format itself is :mod:`samsa.protocol.group_records`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from samsa.cluster.partition import Partition
from samsa.coordinator.groups.state import EMPTY, STABLE, Group, Member
from samsa.clock import now_ms
from samsa.coordinator.host import CoordinatorHost, coordinator_partition, java_string_hash, log_chunks  # noqa: F401
from samsa.protocol import batch, errors, records
from samsa.protocol.control import COMMIT, control_type
from samsa.protocol import group_records as gr
from samsa.protocol.group_records import OFFSETS_TOPIC, GroupRecord, MemberRecord, OffsetAndMetadata

Entry = tuple[bytes, bytes | None]   # (key, value); a None value is a tombstone


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(groupId.hashCode) % partitions."""
    return coordinator_partition(group_id, partitions)


# ---------------------------------------------------------------- group <-> record

def offset_entry(group_id: str, topic: str, partition: int, offset: OffsetAndMetadata | None) -> Entry:
    """An offset-commit record, or its tombstone."""
    return gr.offset_key(group_id, topic, partition), None if offset is None else gr.offset_value(offset)


def group_entry(group: Group) -> Entry:
    """The group-metadata record of a group as it is now."""
    members = [MemberRecord(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
                            session_timeout=m.session_timeout_ms, subscription=m.metadata(group.protocol or ""),
                            assignment=m.assignment)
               for m in group.members.values()]
    rec = GroupRecord(group.protocol_type or "", group.generation, group.protocol, group.leader,
                      group.state_timestamp, members)
    return gr.group_key(group.group_id), gr.group_value(rec)


def group_tombstone(group_id: str) -> Entry:
    return gr.group_key(group_id), None


def group_from_record(group_id: str, rec: GroupRecord) -> Group:
    """A group read back: Stable with its stored members and assignments, or Empty. (It starts
    in that state: a group is created in a state, and moves only through transitions.)"""
    members = [Member(m["member_id"] or "", m["group_instance_id"], m["client_id"] or "", m["client_host"] or "",
                      m["session_timeout"], m["rebalance_timeout"], rec.protocol_type,
                      [(rec.protocol or "", m["subscription"])], assignment=m["assignment"])
               for m in rec.members]
    group = Group(group_id, state=STABLE if members else EMPTY, generation=rec.generation,
                  protocol_type=rec.protocol_type or None, protocol=rec.protocol, state_timestamp=rec.state_timestamp)
    for member in members:
        group.add(member)
    group.leader = rec.leader if rec.leader in group.members else next(iter(group.members), None)
    return group


# ---------------------------------------------------------------- replay

@dataclass(frozen=True)
class OffsetLoaded:
    group_id: str
    topic: str
    partition: int
    offset: OffsetAndMetadata | None        # None: deleted
    producer_id: int = -1                   # >= 0: a transactional commit, pending until its marker


@dataclass(frozen=True)
class MarkerLoaded:
    """A transaction marker: the producer's pending offsets in this partition commit or go."""
    producer_id: int
    commit: bool


@dataclass(frozen=True)
class GroupLoaded:
    group_id: str
    record: GroupRecord | None              # None: deleted


@dataclass(frozen=True)
class ConsumerGroupLoaded:
    """A record of a consumer (key versions 3 to 8) or share group (10 to 15) of the new protocols."""
    kind: str                               # as in group_records.CONSUMER_RECORDS or SHARE_RECORDS
    group_id: str
    member_id: str | None
    value: dict | None                      # None: deleted


def decode_entry(key: bytes | None, value: bytes | None) -> OffsetLoaded | GroupLoaded | ConsumerGroupLoaded | None:
    """One record of the topic, or None for a key this coordinator does not know."""
    if key is None:
        return None
    try:
        consumer = gr.parse_consumer_key(key)
        if consumer is not None:
            ckind, cgroup, cmember = consumer
            return ConsumerGroupLoaded(ckind, cgroup, cmember,
                                       None if value is None else gr.parse_consumer_value(ckind, value))
        kind, group_id, topic, partition = gr.parse_key(key)
    except (ValueError, UnicodeDecodeError, struct.error, errors.KafkaError):
        return None
    if kind == "offset":
        return OffsetLoaded(group_id, topic, partition, None if value is None else gr.parse_offset_value(value))
    return GroupLoaded(group_id, None if value is None else gr.parse_group_value(value))


def read_partition(partition: Partition) -> Iterator[OffsetLoaded | GroupLoaded | ConsumerGroupLoaded | MarkerLoaded]:
    """Every group and offset record and transaction marker of a partition, oldest first."""
    for data, offset in log_chunks(partition):
        pos = 0
        for h, recs in records.iter_batches(data):
            if h.is_control:
                kind = control_type(data, pos, h)
                if h.base_offset >= offset and kind is not None:
                    yield MarkerLoaded(h.producer_id, kind == COMMIT)
            else:
                for record in recs:
                    if record.offset >= offset:
                        loaded = decode_entry(record.key, record.value)
                        if isinstance(loaded, OffsetLoaded) and h.is_transactional:
                            loaded = replace(loaded, producer_id=h.producer_id)
                        if loaded is not None:
                            yield loaded
            pos += h.size


# ---------------------------------------------------------------- writing

class OffsetsTopicWriter:
    """Appends a group's records to its partition and returns once they are replicated."""

    def __init__(self, host: CoordinatorHost, num_partitions: Callable[[], int]):
        self.host = host
        self.num_partitions = num_partitions

    async def write(self, group_id: str, entries: list[Entry], *, producer_id: int = -1,
                    producer_epoch: int = -1) -> None:
        """With a producer id: a transactional batch of that producer (TxnOffsetCommit)."""
        partition = self.host.partition(OFFSETS_TOPIC, partition_for(group_id, self.num_partitions()))
        ts = now_ms()
        data = bytearray(records.build_batch([(k, v, ts, []) for k, v in entries], producer_id=producer_id,
                                             producer_epoch=producer_epoch, is_transactional=producer_id >= 0))
        info = partition.append(data, batch.validate(data), ts)
        await self.host.wait_for_high_watermark(partition, info.last_offset + 1,
                                                self.host.config["offsets.commit.timeout.ms"])
