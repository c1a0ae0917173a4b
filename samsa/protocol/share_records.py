"""Records of the ``__share_group_state`` topic (KIP-932), in Kafka's own key/value format.

Pure encoding and decoding: the share coordinator (:mod:`samsa.coordinator.share`) writes and
replays them, ``samsa dump-log`` could print them. Two kinds, keyed alike by (group id,
topic id, partition):

- ``ShareSnapshot`` (record type 0): the whole state of one share partition — snapshot,
  state and leader epochs, start offset, delivery-complete count, timestamps, batches;
- ``ShareUpdate`` (record type 1): a change since the last snapshot — leader epoch, start
  offset, delivery-complete count and the batches written.

Each key is its record type (int16) then the key struct at version 0; each value is version 0
(int16) then a flexible struct. A null value is a tombstone (the share partition's state was
deleted).
"""

from __future__ import annotations

import struct
import uuid

from samsa.protocol import codec

SHARE_STATE_TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1
_KINDS = {SNAPSHOT: "ShareSnapshot", UPDATE: "ShareUpdate"}
_I16 = struct.Struct(">h")


def key(record_type: int, group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    return _I16.pack(record_type) + codec.encode_bytes(_KINDS[record_type] + "Key", 0, {
        "group_id": group_id, "topic_id": topic_id.bytes, "partition": partition})


def value(record_type: int, body: dict) -> bytes:
    return _I16.pack(0) + codec.encode_bytes(_KINDS[record_type] + "Value", 0, body)


def parse_key(raw: bytes) -> tuple[int, str, uuid.UUID, int] | None:
    """(record type, group id, topic id, partition), or None for a key of another kind."""
    (record_type,) = _I16.unpack_from(raw, 0)
    kind = _KINDS.get(record_type)
    if kind is None:
        return None
    body, _ = codec.decode(kind + "Key", 0, memoryview(raw), 2)
    return record_type, body["group_id"], uuid.UUID(bytes=bytes(body["topic_id"])), body["partition"]


def parse_value(record_type: int, raw: bytes) -> dict:
    body, _ = codec.decode(_KINDS[record_type] + "Value", 0, memoryview(raw), 2)
    return body
