"""Records of the ``__transaction_state`` topic, in Kafka's own key/value format.

Pure encoding and decoding: the transaction coordinator writes and replays them,
``samsa dump-log --transaction-log-decoder`` prints them.

- key, version 0: ``transactional_id`` string;
- value, version 0: ``producer_id`` int64, ``producer_epoch`` int16,
  ``transaction_timeout_ms`` int32, ``transaction_status`` int8 (the state id),
  ``transaction_partitions`` nullable array of ``(topic string, partition_ids []int32)``,
  ``transaction_last_update_timestamp_ms`` int64, ``transaction_start_timestamp_ms`` int64;
- value, version 1 (flexible, KIP-890 part 2): the same fields in compact encoding, and tagged
  fields ``previous_producer_id`` (0), ``next_producer_id`` (1), ``client_transaction_version``
  (2), each written when it is not its default. Samsa writes version 1, as Kafka 4 does while
  ``transaction.version`` is finalized at 1 or 2, and version 0 at level 0.

A null value is a tombstone: the transactional id expired. The topic is compacted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from samsa.protocol.api import skip_tagged_fields
from samsa.protocol.varint import decode_uvarint, encode_uvarint

TRANSACTION_STATE_TOPIC = "__transaction_state"
EMPTY_STATUS = 0  # the transaction status Empty

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")
_I64 = struct.Struct(">q")
_HEAD_V1 = struct.Struct(">hqhib")


@dataclass
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_version: int = 0
    version: int = 1  # of the value as read (what txn_value writes: 1)


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _str(transactional_id)


def txn_value(v: TxnLogValue, version: int = 1) -> bytes:
    """The value in ``version``: 1 while ``transaction.version`` is finalized at 1 or 2, 0 at 0 (as
    Kafka 4 writes them; version 0 has no tagged fields, so no previous or next producer id)."""
    return _txn_value_v1(v) if version >= 1 else txn_value_v0(v)


def txn_value_v0(v: TxnLogValue) -> bytes:
    """Version 0 (Kafka before 4.0, and Kafka 4 at ``transaction.version`` 0)."""
    out = [_VALUE_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.status),
           _I32.pack(len(v.partitions))]
    for topic, parts in sorted(v.partitions.items()):
        out.append(_str(topic))
        out.append(_I32.pack(len(parts)))
        out.extend(_I32.pack(p) for p in sorted(parts))
    out.append(_TIMES.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


def _txn_value_v1(v: TxnLogValue) -> bytes:
    # Empty holds no partitions: Kafka writes a null array for it.
    out = [_HEAD_V1.pack(1, v.producer_id, v.producer_epoch, v.timeout_ms, v.status),
           encode_uvarint(0 if v.status == EMPTY_STATUS and not v.partitions else len(v.partitions) + 1)]
    for topic, parts in sorted(v.partitions.items()):
        b = topic.encode()
        out += [encode_uvarint(len(b) + 1), b, encode_uvarint(len(parts) + 1)]
        out.extend(_I32.pack(p) for p in sorted(parts))
        out.append(b"\0")  # no tagged fields in a partitions entry
    out.append(_TIMES.pack(v.last_update_ms, v.start_ms))
    tagged = [(0, _I64.pack(v.previous_producer_id)) if v.previous_producer_id != -1 else None,
              (1, _I64.pack(v.next_producer_id)) if v.next_producer_id != -1 else None,
              (2, _I16.pack(v.client_version)) if v.client_version else None]
    tagged = [t for t in tagged if t is not None]
    out.append(encode_uvarint(len(tagged)))
    for tag, data in tagged:
        out += [encode_uvarint(tag), encode_uvarint(len(data)), data]
    return b"".join(out)


def parse_txn_key(key: bytes) -> str:
    (version,) = _I16.unpack_from(key)
    if version != 0:
        raise ValueError(f"unknown __transaction_state key version {version}")
    (n,) = _I16.unpack_from(key, 2)
    return bytes(key[4:4 + n]).decode()


def _length(buf: bytes, p: int, flexible: bool, fixed: struct.Struct) -> tuple[int, int]:
    """An array's or string's length: compact (uvarint of n + 1) in version 1, else ``fixed``."""
    if flexible:
        n, p = decode_uvarint(buf, p)
        return n - 1, p
    (n,) = fixed.unpack_from(buf, p)
    return n, p + fixed.size


def parse_txn_value(value: bytes) -> TxnLogValue:
    """Version 0 (what Kafka before 4.0 writes) or 1 (Kafka 4 with transactions version 2)."""
    version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(value)
    if version not in (0, 1):
        raise ValueError(f"unsupported __transaction_state value version {version}")
    flexible = version == 1
    count, p = _length(value, _VALUE_HEAD.size, flexible, _I32)
    partitions: dict[str, list[int]] = {}
    for _ in range(max(count, 0)):
        n, p = _length(value, p, flexible, _I16)
        topic = bytes(value[p:p + n]).decode()
        k, p = _length(value, p + n, flexible, _I32)
        partitions[topic] = [_I32.unpack_from(value, p + 4 * i)[0] for i in range(k)]
        p += 4 * k
        if flexible:
            p = skip_tagged_fields(value, p)
    last_update, start = _TIMES.unpack_from(value, p)
    out = TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start, version=version)
    if flexible:
        fields, p = decode_uvarint(value, p + _TIMES.size)
        for _ in range(fields):
            tag, p = decode_uvarint(value, p)
            size, p = decode_uvarint(value, p)
            if tag == 0:
                (out.previous_producer_id,) = _I64.unpack_from(value, p)
            elif tag == 1:
                (out.next_producer_id,) = _I64.unpack_from(value, p)
            elif tag == 2:
                (out.client_version,) = _I16.unpack_from(value, p)
            p += size
    return out
