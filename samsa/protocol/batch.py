"""Record batch v2 headers: the part of a batch the broker reads on the hot path.

The broker never decodes the records inside a batch to append it: it reads the 61-byte
header, checks the CRC32C, patches the base offset (and LogAppendTime) and writes the
bytes. Record-level encoding lives in :mod:`samsa.protocol.records`.

Layout (big-endian)::

    0  base_offset int64        27 base_timestamp int64
    8  batch_length int32       35 max_timestamp int64
    12 partition_leader_epoch   43 producer_id int64
    16 magic int8               51 producer_epoch int16
    17 crc uint32               53 base_sequence int32
    21 attributes int16         57 record_count int32
    23 last_offset_delta int32  61 records...

``batch_length`` counts from ``partition_leader_epoch`` to the end; the CRC covers
``attributes`` to the end.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple

from crc32c import crc32c

from samsa.protocol.errors import CorruptRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length, the part before batch_length starts counting
MAGIC_POS = 16
CRC_POS = 17
CRC_START = 21
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # KIP-534: base_timestamp holds the batch's delete horizon (set by the cleaner)

NO_PRODUCER_ID = -1
LONG_MAX_TS = 9223372036854775807
NO_SEQUENCE = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")  # the one layout of a v2 batch header (BatchHeader)
LENGTH_STRUCT = struct.Struct(">qi")  # base_offset, batch_length: enough to frame a batch
_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_ATTRS = struct.Struct(">h")
_MAX_TS = struct.Struct(">q")


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_BIT)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``. The caller checks that HEADER_SIZE bytes are there."""
    return BatchHeader._make(HEADER_STRUCT.unpack_from(buf, pos))


def write_crc(buf: bytearray, pos: int, crc: int) -> None:
    _CRC.pack_into(buf, pos + CRC_POS, crc)


def compute_crc(buf, pos: int, size: int) -> int:
    return crc32c(memoryview(buf)[pos + CRC_START:pos + size])


MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # a batch_length that cannot even hold the header


def batch_problem(buf, pos: int, end: int) -> str | None:
    """Why ``buf[pos:end]`` does not start with a whole v2 batch, or None if it does
    (the CRC is not checked: that needs the batch's bytes, which may not all be here)."""
    if pos + HEADER_SIZE > end:
        return "the data ends inside a batch header"
    return header_problem(read_header(buf, pos), pos, end)


def header_problem(h: BatchHeader, pos: int, end: int) -> str | None:
    """As :func:`batch_problem`, for a header already read at ``pos``."""
    if h.magic != MAGIC:
        return f"record batch magic {h.magic} is not supported (only v2)"
    if h.batch_length < MIN_BATCH_LENGTH or h.last_offset_delta < 0:
        return f"invalid record batch (length {h.batch_length}, last offset delta {h.last_offset_delta})"
    if pos + h.size > end:
        return "the data ends inside a record batch"
    return None


def iter_headers(buf, pos: int = 0, end: int | None = None, *,
                 strict: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of each whole v2 batch in ``buf[pos:end]``: the one scanner of
    record sets in memory (segment files are read through ``storage.segment.scan_batches``).

    At anything else (a partial tail, an impossible length, another magic) it stops
    silently, or with ``strict`` raises CorruptRecordError.
    """
    end = len(buf) if end is None else end
    while pos < end:
        header = read_header(buf, pos) if pos + HEADER_SIZE <= end else None
        problem = header_problem(header, pos, end) if header else "the data ends inside a batch header"
        if problem is not None:
            if strict:
                raise CorruptRecordError(f"{problem} at position {pos}")
            return
        yield pos, header
        pos += header.size


def validate(buf, max_batch_bytes: int | None = None) -> list[tuple[int, BatchHeader]]:
    """Check a Produce request's record set: whole v2 batches with good CRCs.

    Raises CorruptRecordError for anything else. Returns the batches' positions and
    headers. ``max_batch_bytes`` is checked by the caller (it needs its own error code).
    """
    batches = []
    pos, end = 0, len(buf)
    if end == 0:
        raise CorruptRecordError("empty record set")
    while pos < end:
        if pos + HEADER_SIZE > end:
            raise CorruptRecordError("record set ends inside a batch header")
        header = read_header(buf, pos)
        if header.magic != MAGIC:
            raise CorruptRecordError(f"record batch magic {header.magic} is not supported (only v2)")
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            raise CorruptRecordError("record batch length does not match the record set")
        if header.last_offset_delta < 0 or header.record_count < 0:
            raise CorruptRecordError("record batch has a negative record count")
        if compute_crc(buf, pos, header.size) != header.crc:
            raise CorruptRecordError("record batch CRC32C mismatch")
        batches.append((pos, header))
        pos += header.size
    return batches


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    _BASE_OFFSET.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Outside the CRC, like the base offset: no re-checksum needed."""
    _EPOCH.pack_into(buf, pos + 12, epoch)


_PRODUCER = struct.Struct(">qhi")  # producer_id, producer_epoch, base_sequence at 43


def set_producer_state(buf: bytearray, pos: int, header: BatchHeader, producer_id: int, epoch: int,
                       base_sequence: int) -> None:
    """Give a built batch another producer id, epoch and base sequence (a producer whose epoch
    was bumped resends it, KIP-360), and re-checksum."""
    _PRODUCER.pack_into(buf, pos + 43, producer_id, epoch, base_sequence)
    write_crc(buf, pos, compute_crc(buf, pos, header.size))


def set_log_append_time(buf: bytearray, pos: int, header: BatchHeader, timestamp: int) -> None:
    """Stamp LogAppendTime into the header and re-checksum (both lie under the CRC)."""
    _ATTRS.pack_into(buf, pos + 21, header.attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TS.pack_into(buf, pos + 35, timestamp)
    write_crc(buf, pos, compute_crc(buf, pos, header.size))
