"""Records of the ``__consumer_offsets`` topic, in Kafka's own key/value format.

Pure encoding and decoding: the group coordinator (:mod:`samsa.coordinator.groups`) writes
and replays these records, ``samsa dump-log --offsets-decoder`` prints them.

Two kinds of record, told apart by the key's version prefix:

- offset commit: key v1 ``(group, topic, partition)``, value v3
  ``(offset, leader_epoch, metadata, commit_timestamp)``;
- group metadata: key v2 ``(group)``, value v3 ``(protocol_type, generation, protocol,
  leader, state_timestamp, members[...])``;
- consumer groups of the new protocol (KIP-848): keys v3 to v8, see :data:`CONSUMER_RECORDS`;
- share groups (KIP-932): keys v10 to v15, see :data:`SHARE_RECORDS`;
- streams groups (KIP-1071): keys v17, v19 to v23, see :data:`STREAMS_RECORDS`.

A null value is a tombstone: the offset or the group was deleted. The topic is compacted,
so the latest record per key is the state.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypedDict

from samsa.protocol import codec

OFFSETS_TOPIC = "__consumer_offsets"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_OFFSET_VALUE = struct.Struct(">hqi")


class MemberRecord(TypedDict):
    """One member in a group-metadata value."""
    member_id: str | None
    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class OffsetAndMetadata:
    """An offset-commit value: what a group committed for one partition."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass
class GroupRecord:
    """A group-metadata value: the group as of its last completed rebalance."""
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: list[MemberRecord]


# ---------------------------------------------------------------- writing

def _str(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode()
    return _I16.pack(len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return b"\xff\xff\xff\xff"
    return _I32.pack(len(b)) + bytes(b)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    """Offset-commit key, version 1."""
    return _I16.pack(1) + _str(group) + _str(topic) + _I32.pack(partition)


def offset_value(o: OffsetAndMetadata) -> bytes:
    """Offset-commit value, version 3."""
    return _OFFSET_VALUE.pack(3, o.offset, o.leader_epoch) + _str(o.metadata) + _I64.pack(o.commit_timestamp)


def group_key(group: str) -> bytes:
    """Group-metadata key, version 2."""
    return _I16.pack(2) + _str(group)


def group_value(g: GroupRecord) -> bytes:
    """Group-metadata value, version 3."""
    out = [_I16.pack(3), _str(g.protocol_type), _I32.pack(g.generation), _str(g.protocol), _str(g.leader),
           _I64.pack(g.state_timestamp), _I32.pack(len(g.members))]
    for m in g.members:
        out += [_str(m["member_id"]), _str(m["group_instance_id"]), _str(m["client_id"]), _str(m["client_host"]),
                _I32.pack(m["rebalance_timeout"]), _I32.pack(m["session_timeout"]),
                _bytes(m["subscription"]), _bytes(m["assignment"])]
    return b"".join(out)


# ---------------------------------------------------------------- reading

class _Reader:
    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def _unpack(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return v

    def i16(self) -> int:
        return self._unpack(_I16)

    def i32(self) -> int:
        return self._unpack(_I32)

    def i64(self) -> int:
        return self._unpack(_I64)

    def str(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        b = bytes(self.buf[self.pos:self.pos + n])
        self.pos += n
        return b


def parse_key(key: bytes) -> tuple[str, str, str | None, int | None]:
    """('offset', group, topic, partition) or ('group', group, None, None)."""
    r = _Reader(key)
    version = r.i16()
    if version in (0, 1):
        return "offset", r.str(), r.str(), r.i32()
    if version == 2:
        return "group", r.str(), None, None
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def parse_offset_value(value: bytes) -> OffsetAndMetadata:
    """Any offset-commit value version (0 to 3)."""
    r = _Reader(value)
    version = r.i16()
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.str() or ""
    commit_ts = r.i64()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts)


def parse_group_value(value: bytes) -> GroupRecord:
    """Any group-metadata value version (0 to 3)."""
    r = _Reader(value)
    version = r.i16()
    protocol_type = r.str() or ""
    generation = r.i32()
    protocol = r.str()
    leader = r.str()
    state_ts = r.i64() if version >= 2 else -1
    members: list[MemberRecord] = []
    for _ in range(r.i32()):
        member_id = r.str()
        instance_id = r.str() if version >= 3 else None
        client_id, client_host = r.str(), r.str()
        rebalance_timeout = r.i32() if version >= 1 else -1
        members.append(MemberRecord(member_id=member_id, group_instance_id=instance_id, client_id=client_id,
                                    client_host=client_host, rebalance_timeout=rebalance_timeout,
                                    session_timeout=r.i32(), subscription=r.bytes() or b"",
                                    assignment=r.bytes() or b""))
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, members)


# ---------------------------------------------------------------- consumer groups (KIP-848)
# Key versions 3 to 8, in Kafka's schemas (schema/messages.json, ``ConsumerGroup*Key``/``Value``):
# each key is its version then the key struct; each value is version 0 then a flexible struct.

CONSUMER_RECORDS = {
    3: "ConsumerGroupMetadata",                 # the group epoch
    4: "ConsumerGroupPartitionMetadata",        # the subscribed topics' ids, names and partition counts
    5: "ConsumerGroupMemberMetadata",           # a member's subscription and client details
    6: "ConsumerGroupTargetAssignmentMetadata",  # the assignment epoch
    7: "ConsumerGroupTargetAssignmentMember",   # a member's target assignment
    8: "ConsumerGroupCurrentMemberAssignment",  # a member's epoch, state, partitions and pending revocation
}
#: Share groups (KIP-932): key versions 10 to 15, in the same format.
SHARE_RECORDS = {
    10: "ShareGroupMemberMetadata",             # a member's subscription and client details
    11: "ShareGroupMetadata",                   # the group epoch (and the subscribed topics' hash)
    12: "ShareGroupTargetAssignmentMetadata",   # the assignment epoch
    13: "ShareGroupTargetAssignmentMember",     # a member's target assignment
    14: "ShareGroupCurrentMemberAssignment",    # a member's epoch, state and partitions
    15: "ShareGroupStatePartitionMetadata",     # the share partitions initialised in the share coordinator
}
#: Streams groups (KIP-1071): key versions 17 and 19 to 23, in the same format.
STREAMS_RECORDS = {
    17: "StreamsGroupMetadata",                 # the group epoch (and the topics' hash)
    19: "StreamsGroupMemberMetadata",           # a member's process, endpoint, client tags and topology epoch
    20: "StreamsGroupTargetAssignmentMetadata",  # the assignment epoch
    21: "StreamsGroupTargetAssignmentMember",   # a member's target tasks
    22: "StreamsGroupCurrentMemberAssignment",  # a member's epoch, state, tasks and tasks pending revocation
    23: "StreamsGroupTopology",                 # the group's topology
}
_MODERN_RECORDS = {**CONSUMER_RECORDS, **SHARE_RECORDS, **STREAMS_RECORDS}
_CONSUMER_KINDS = {name: version for version, name in _MODERN_RECORDS.items()}


def consumer_key(kind: str, group: str, member: str | None = None) -> bytes:
    """The key of a consumer or share group record (``kind`` as in :data:`CONSUMER_RECORDS`
    or :data:`SHARE_RECORDS`)."""
    version = _CONSUMER_KINDS[kind]
    body = {"group_id": group} if member is None else {"group_id": group, "member_id": member}
    return _I16.pack(version) + codec.encode_bytes(kind + "Key", _key_struct_version(version), body)


def _key_struct_version(record_type: int) -> int:
    """The consumer group keys' schemas are versioned by their record type (3 to 8), the share
    group keys' (Kafka 4's coordinator-key schemas) by 0."""
    return 0 if record_type in SHARE_RECORDS or record_type in STREAMS_RECORDS else record_type


def consumer_value(kind: str, value: dict) -> bytes:
    return _I16.pack(0) + codec.encode_bytes(kind + "Value", 0, value)


def parse_consumer_key(key: bytes) -> tuple[str, str, str | None] | None:
    """(kind, group, member id or None) for a consumer or share group record's key, None for another kind."""
    (version,) = _I16.unpack_from(key, 0)
    kind = _MODERN_RECORDS.get(version)
    if kind is None:
        return None
    body, _ = codec.decode(kind + "Key", _key_struct_version(version), memoryview(key), 2)
    return kind, body["group_id"], body.get("member_id")


def parse_consumer_value(kind: str, value: bytes) -> dict:
    body, _ = codec.decode(kind + "Value", 0, memoryview(value), 2)
    return body
