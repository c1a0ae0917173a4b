"""Records of the ``__transaction_state`` topic, in Kafka's own key/value format.

Pure encoding and decoding: the transaction coordinator writes and replays them,
``samsa dump-log --transaction-log-decoder`` prints them.

- key, version 0: ``transactional_id`` string;
- value, version 0: ``producer_id`` int64, ``producer_epoch`` int16,
  ``transaction_timeout_ms`` int32, ``transaction_status`` int8 (the state id),
  ``transaction_partitions`` nullable array of ``(topic string, partition_ids []int32)``,
  ``transaction_last_update_timestamp_ms`` int64, ``transaction_start_timestamp_ms`` int64.

A null value is a tombstone: the transactional id expired. The topic is compacted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

TRANSACTION_STATE_TOPIC = "__transaction_state"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


@dataclass
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def txn_key(transactional_id: str) -> bytes:
    return _I16.pack(0) + _str(transactional_id)


def txn_value(v: TxnLogValue) -> bytes:
    out = [_VALUE_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.status),
           _I32.pack(len(v.partitions))]
    for topic, parts in sorted(v.partitions.items()):
        out.append(_str(topic))
        out.append(_I32.pack(len(parts)))
        out.extend(_I32.pack(p) for p in sorted(parts))
    out.append(_TIMES.pack(v.last_update_ms, v.start_ms))
    return b"".join(out)


def parse_txn_key(key: bytes) -> str:
    (version,) = _I16.unpack_from(key)
    if version != 0:
        raise ValueError(f"unknown __transaction_state key version {version}")
    (n,) = _I16.unpack_from(key, 2)
    return bytes(key[4:4 + n]).decode()


def parse_txn_value(value: bytes) -> TxnLogValue:
    """Version 0 (what Samsa and Kafka before 4.0 write)."""
    version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(value)
    if version != 0:
        raise ValueError(f"unsupported __transaction_state value version {version}")
    p = _VALUE_HEAD.size
    (count,) = _I32.unpack_from(value, p)
    p += 4
    partitions: dict[str, list[int]] = {}
    for _ in range(max(count, 0)):
        (n,) = _I16.unpack_from(value, p)
        topic = bytes(value[p + 2:p + 2 + n]).decode()
        p += 2 + n
        (k,) = _I32.unpack_from(value, p)
        p += 4
        partitions[topic] = [_I32.unpack_from(value, p + 4 * i)[0] for i in range(k)]
        p += 4 * k
    last_update, start = _TIMES.unpack_from(value, p)
    return TxnLogValue(pid, epoch, timeout, status, partitions, last_update, start)
