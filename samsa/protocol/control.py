"""Control records: the transaction markers a partition leader writes (KIP-98).

A control batch has the transactional and control attribute bits, the producer's id and
epoch, no sequence (-1), and one record::

    key:   version int16 (0) | type int16 (0 = ABORT, 1 = COMMIT)
    value: version int16 (0) | coordinator_epoch int32

Control batches are never compressed, so the key sits at a fixed small distance from the
batch header and can be read without decoding the batch.
"""

from __future__ import annotations

import struct

from samsa.protocol.batch import HEADER_SIZE, BatchHeader
from samsa.protocol.records import build_batch
from samsa.protocol.varint import decode_varint

ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def marker_key(commit: bool) -> bytes:
    return _KEY.pack(0, COMMIT if commit else ABORT)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(0, coordinator_epoch)


def build_marker(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                 timestamp: int) -> bytearray:
    """One end-transaction marker batch (base offset 0: the log assigns it)."""
    return bytearray(build_batch([(marker_key(commit), marker_value(coordinator_epoch), timestamp)],
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 is_transactional=True, is_control=True))


def _first_record_key(buf, pos: int) -> tuple[bytes | None, int]:
    """(key, position after it) of the first record of the uncompressed batch at ``pos``."""
    p = pos + HEADER_SIZE
    _, p = decode_varint(buf, p)  # record length
    p += 1  # attributes
    _, p = decode_varint(buf, p)  # timestamp delta
    _, p = decode_varint(buf, p)  # offset delta
    klen, p = decode_varint(buf, p)
    if klen < 0:
        return None, p
    return bytes(buf[p:p + klen]), p + klen


def control_type(buf, pos: int, header: BatchHeader) -> int | None:
    """ABORT or COMMIT for a marker batch at ``pos``; None for any other batch (or an
    unknown control type, which Kafka also skips)."""
    if not header.is_control or header.record_count < 1 or header.compression:
        return None
    try:
        key, _ = _first_record_key(buf, pos)
    except (IndexError, ValueError, struct.error):
        return None
    if key is None or len(key) < _KEY.size:
        return None
    _, kind = _KEY.unpack_from(key)
    return kind if kind in (ABORT, COMMIT) else None


def coordinator_epoch(buf, pos: int, header: BatchHeader) -> int:
    """The coordinator epoch in a marker's value (-1 if it cannot be read)."""
    try:
        _, p = _first_record_key(buf, pos)
        vlen, p = decode_varint(buf, p)
        if vlen >= _VALUE.size:
            return _VALUE.unpack_from(buf, p)[1]
    except (IndexError, ValueError, struct.error):
        pass
    return -1
