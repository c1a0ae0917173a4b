"""Records inside a v2 record batch: varints, building batches, decoding them.

A record (all varints zig-zag signed)::

    length varint            bytes after this field
    attributes int8          unused, 0
    timestamp_delta varlong  from the batch's base_timestamp
    offset_delta varint      from the batch's base_offset
    key_length varint        -1 = null
    key bytes
    value_length varint      -1 = null
    value bytes
    header_count varint
    headers: key_length varint, key utf-8, value_length varint (-1 = null), value

With compression, the whole run of records after the 61-byte header is compressed; the
header (record count included) stays plain. The header itself is in
:mod:`samsa.protocol.batch`.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from typing import Iterable, Iterator

from crc32c import crc32c

from samsa.protocol import compression as _compression
from samsa.protocol.batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    compute_crc,
    read_header,
)
from samsa.protocol.errors import CorruptRecordError

NO_TIMESTAMP = -1
# Worst-case bytes a record takes beyond its key, value and headers: length (5),
# attributes (1), timestamp delta (10), offset delta (5), key and value lengths (5 + 5),
# header count (5).
RECORD_OVERHEAD_MAX = 36

_HEADER = struct.Struct(">qiibIhiqqqhii")  # same layout as batch.BatchHeader
_CRC = struct.Struct(">I")
_LENGTH = struct.Struct(">qi")
_MAGIC_POS = 16
_CRC_POS = 17


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# ---------------------------------------------------------------------------- varints

_TABLE_SIZE = 1 << 14  # every unsigned value that fits in two varint bytes


def _uvarint_slow(u: int) -> bytes:
    if u < 0:
        raise ValueError(f"unsigned varint cannot hold {u}")
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


_UV: list[bytes] = [_uvarint_slow(u) for u in range(_TABLE_SIZE)]


def encode_uvarint(u: int) -> bytes:
    """Unsigned LEB128, as the protocol's compact lengths and tagged fields use."""
    if 0 <= u < _TABLE_SIZE:
        return _UV[u]
    return _uvarint_slow(u)


def encode_varint(n: int) -> bytes:
    """Zig-zag signed varint/varlong; ``n`` must fit in an int64."""
    z = (n << 1) ^ (n >> 63)
    if z < _TABLE_SIZE:
        return _UV[z]
    return _uvarint_slow(z)


def decode_uvarint(buf, pos: int) -> tuple[int, int]:
    """``(value, next_pos)``. IndexError if ``buf`` ends inside; ValueError past 10 bytes."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Zig-zag signed ``(value, next_pos)``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = decode_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def varint_size(n: int) -> int:
    return len(encode_varint(n))


# ---------------------------------------------------------------------------- building


def _encode_headers(headers) -> bytes:
    if isinstance(headers, dict):
        headers = list(headers.items())
    parts = [encode_varint(len(headers))]
    for key, value in headers:
        kb = key.encode() if isinstance(key, str) else bytes(key)
        parts.append(encode_varint(len(kb)))
        parts.append(kb)
        if value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def estimate_record_size(key, value, headers=None) -> int:
    """Upper bound of the bytes ``append`` adds for this record (before compression)."""
    size = RECORD_OVERHEAD_MAX
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    if headers:
        for k, v in headers.items() if isinstance(headers, dict) else headers:
            size += 10 + len(k) * 3 + (len(v) if v is not None else 0)  # utf-8: <= 3 bytes per char
    return size


class BatchBuilder:
    """Appends records one by one into a reusable buffer, then builds a v2 batch.

    The offset delta of a record is its index in the batch. ``append`` returns
    :attr:`size`, the batch's uncompressed size so far, so the producer can close a batch
    once it reaches ``batch.size``. Producer id/epoch/sequence may be set (or changed)
    any time before :meth:`build`, as the sequence is only known when the batch is sent.
    """

    __slots__ = (
        "_buf", "count", "base_timestamp", "max_timestamp", "base_offset", "compression",
        "compression_level", "xerial_snappy", "log_append_time", "producer_id",
        "producer_epoch", "base_sequence", "is_transactional", "is_control",
        "partition_leader_epoch",
    )

    def __init__(
        self,
        compression: int | str = 0,
        *,
        base_offset: int = 0,
        timestamp_type_log_append: bool = False,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = -1,
        xerial_snappy: bool = False,
        compression_level: int | None = None,
    ):
        self._buf = bytearray(HEADER_SIZE)
        self.count = 0
        self.base_timestamp = NO_TIMESTAMP
        self.max_timestamp = NO_TIMESTAMP
        self.base_offset = base_offset
        self.compression = _compression.codec_id(compression)
        self.compression_level = compression_level
        self.xerial_snappy = xerial_snappy
        self.log_append_time = timestamp_type_log_append
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch

    def __len__(self) -> int:
        return self.count

    @property
    def size(self) -> int:
        """Bytes of the batch built now, were it not compressed."""
        return len(self._buf)

    def set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int, is_transactional: bool = False
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional

    def append(self, key, value, timestamp: int | None = None, headers=None) -> int:
        """Add a record; ``timestamp`` in epoch ms (None = now). Returns :attr:`size`.

        ``key``/``value``: bytes-like or None; ``headers``: ``[(str, bytes | None)]`` or a dict.
        A bad argument raises TypeError and leaves the builder unchanged.
        """
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        n = self.count
        if n:
            delta = timestamp - self.base_timestamp
            z = (delta << 1) ^ (delta >> 63)
            ts = _UV[z] if z < _TABLE_SIZE else _uvarint_slow(z)
        else:
            ts = b"\x00"
        z = n << 1
        od = _UV[z] if z < _TABLE_SIZE else _uvarint_slow(z)
        if key is None:
            kl = b"\x01"
            key = b""
        else:
            z = len(key) << 1
            kl = _UV[z] if z < _TABLE_SIZE else _uvarint_slow(z)
        if value is None:
            vl = b"\x01"
            value = b""
        else:
            z = len(value) << 1
            vl = _UV[z] if z < _TABLE_SIZE else _uvarint_slow(z)
        # Joining first means a wrong type fails before the builder is touched.
        body = b"".join((b"\x00", ts, od, kl, key, vl, value, _encode_headers(headers) if headers else b"\x00"))
        z = len(body) << 1
        buf = self._buf
        buf += _UV[z] if z < _TABLE_SIZE else _uvarint_slow(z)
        buf += body
        if n:
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        else:
            self.base_timestamp = self.max_timestamp = timestamp
        self.count = n + 1
        return len(buf)

    def attributes(self) -> int:
        attrs = self.compression
        if self.log_append_time:
            attrs |= TIMESTAMP_TYPE_BIT
        if self.is_transactional:
            attrs |= TRANSACTIONAL_BIT
        if self.is_control:
            attrs |= CONTROL_BIT
        return attrs

    def build(self) -> bytes:
        """The finished batch. The builder keeps its records (call :meth:`reset` to reuse)."""
        n = self.count
        if not n:
            raise ValueError("a record batch needs at least one record")
        buf = self._buf
        if self.compression:
            with memoryview(buf) as view, view[HEADER_SIZE:] as section:
                payload = _compression.compress(
                    self.compression, section, self.compression_level, xerial=self.xerial_snappy
                )
            out = bytearray(HEADER_SIZE)
            out += payload
        else:
            out = buf
        _HEADER.pack_into(
            out, 0, self.base_offset, len(out) - LOG_OVERHEAD, self.partition_leader_epoch, MAGIC, 0,
            self.attributes(), n - 1, self.base_timestamp, self.max_timestamp, self.producer_id,
            self.producer_epoch, self.base_sequence, n,
        )
        with memoryview(out) as view, view[CRC_START:] as covered:
            crc = crc32c(covered)
        _CRC.pack_into(out, _CRC_POS, crc)
        return bytes(out)

    def reset(self) -> None:
        """Drop the records to fill the builder again; settings stay."""
        del self._buf[HEADER_SIZE:]
        self.count = 0
        self.base_timestamp = self.max_timestamp = NO_TIMESTAMP


def build_batch(
    records: Iterable,
    *,
    base_offset: int = 0,
    compression: int | str = 0,
    timestamp_type_log_append: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    xerial_snappy: bool = False,
    compression_level: int | None = None,
) -> bytes:
    """One v2 batch from ``records``: tuples ``(key, value[, timestamp_ms[, headers]])``
    or objects with ``key``, ``value``, ``timestamp``, ``headers`` (a :class:`Record`; its
    offset is ignored, offset deltas are the records' indexes)."""
    builder = BatchBuilder(
        compression,
        base_offset=base_offset,
        timestamp_type_log_append=timestamp_type_log_append,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
        xerial_snappy=xerial_snappy,
        compression_level=compression_level,
    )
    append = builder.append
    for r in records:
        if isinstance(r, tuple):
            append(*r)
        else:
            append(r.key, r.value, r.timestamp, r.headers)
    return builder.build()


# ---------------------------------------------------------------------------- decoding


def decode_batch(buf, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Decode the whole batch at ``pos``: check its CRC, decompress, decode its records.

    Offsets and timestamps come back absolute. Control batches decode like any other
    (check ``header.is_control``). Raises CorruptRecordError for anything malformed.
    """
    end = len(buf)
    if pos + _MAGIC_POS + 1 > end:
        raise CorruptRecordError("record batch cut short")
    magic = buf[pos + _MAGIC_POS]
    if magic != MAGIC:
        if magic in (0, 1):
            raise CorruptRecordError("message format v0/v1 not supported")
        raise CorruptRecordError(f"unknown record batch magic {magic}")
    if pos + HEADER_SIZE > end:
        raise CorruptRecordError("record batch header cut short")
    header = read_header(buf, pos)
    size = header.batch_length + LOG_OVERHEAD
    if size < HEADER_SIZE or pos + size > end:
        raise CorruptRecordError(f"invalid record batch length {header.batch_length}")
    if compute_crc(buf, pos, size) != header.crc:
        raise CorruptRecordError("record batch CRC32C mismatch")
    codec = header.attributes & COMPRESSION_MASK
    start = pos + HEADER_SIZE
    stop = pos + size
    if codec:
        with memoryview(buf) as view, view[start:stop] as section:
            data = _compression.decompress(codec, section)
        start, stop = 0, len(data)
    elif type(buf) is bytes:
        data = buf  # decode in place: slicing bytes yields bytes
    else:
        with memoryview(buf) as view, view[start:stop] as section:
            data = bytes(section)
        start, stop = 0, len(data)
    log_append = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_BIT else None
    try:
        records = _decode_records(
            data, start, stop, header.record_count, header.base_offset, header.base_timestamp, log_append
        )
    except (IndexError, ValueError) as e:
        raise CorruptRecordError(f"malformed record in batch at offset {header.base_offset}: {e}") from None
    return header, records


def _decode_records(
    data: bytes, p: int, end: int, count: int, base_offset: int, base_ts: int, log_append_ts: int | None
) -> list[Record]:
    # The hot loop of consumers. Varints of one or two bytes (nearly all of them) are
    # decoded inline, zig-zag included; longer ones go through decode_uvarint.
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    uvarint = decode_uvarint
    out: list[Record] = []
    append = out.append
    for _ in range(count):
        b = data[p]
        if b < 0x80:
            p += 1
        elif data[p + 1] < 0x80:
            b = (b & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            b, p = uvarint(data, p)
        rec_end = p + ((b >> 1) ^ -(b & 1))
        if rec_end > end:
            raise CorruptRecordError("record runs past the end of its batch")
        b = data[p + 1]  # skip attributes: unused
        if b < 0x80:
            p += 2
        elif data[p + 2] < 0x80:
            b = (b & 0x7F) | (data[p + 2] << 7)
            p += 3
        else:
            b, p = uvarint(data, p + 1)
        timestamp = base_ts + ((b >> 1) ^ -(b & 1)) if log_append_ts is None else log_append_ts
        b = data[p]
        if b < 0x80:
            p += 1
        elif data[p + 1] < 0x80:
            b = (b & 0x7F) | (data[p + 1] << 7)
            p += 2
        else:
            b, p = uvarint(data, p)
        offset = base_offset + ((b >> 1) ^ -(b & 1))
        b = data[p]
        if b == 1:
            key = None
            p += 1
        else:
            if b < 0x80:
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                p += 2
            else:
                b, p = uvarint(data, p)
            if b & 1:
                key = None  # any negative length means null, as in Java
            else:
                b = p + (b >> 1)
                key = data[p:b]
                p = b
        b = data[p]
        if b == 1:
            value = None
            p += 1
        else:
            if b < 0x80:
                p += 1
            elif data[p + 1] < 0x80:
                b = (b & 0x7F) | (data[p + 1] << 7)
                p += 2
            else:
                b, p = uvarint(data, p)
            if b & 1:
                value = None
            else:
                b = p + (b >> 1)
                value = data[p:b]
                p = b
        if data[p] == 0:
            p += 1
            headers = []
        else:
            headers, p = decode_headers(data, p)
        if p != rec_end:
            raise CorruptRecordError(f"record fields end {p - rec_end:+} bytes from where its length says")
        append(Record(offset, timestamp, key, value, headers))
    if p != end:
        raise CorruptRecordError(f"{end - p} bytes left after the batch's {count} records")
    return out


def decode_headers(data: bytes, p: int) -> tuple[list[tuple[str, bytes | None]], int]:
    """A record's headers at ``p``: ((key, value) pairs, the position after them)."""
    count, p = decode_varint(data, p)
    if count < 0:
        raise CorruptRecordError(f"negative record header count {count}")
    headers = []
    for _ in range(count):
        n, p = decode_varint(data, p)
        if n < 0:
            raise CorruptRecordError("record header key is null")
        # Java decodes header keys leniently; so do we.
        key = data[p:p + n].decode("utf-8", "replace")
        p += n
        n, p = decode_varint(data, p)
        if n >= 0:
            value = data[p:p + n]
            p += n
        else:
            value = None
        headers.append((key, value))
    return headers, p


def iter_batches(buf, pos: int = 0) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Decode each batch of a record set; a partial batch at the end (as a Fetch response
    may hold) is ignored."""
    end = len(buf)
    while pos + LOG_OVERHEAD <= end:
        _, length = _LENGTH.unpack_from(buf, pos)
        if pos + LOG_OVERHEAD + length > end:
            return
        header, records = decode_batch(buf, pos)
        yield header, records
        pos += LOG_OVERHEAD + length


def iter_records(buf, *, skip_control: bool = False) -> Iterator[Record]:
    """Every record of a record set, across batches; see :func:`iter_batches`."""
    for header, records in iter_batches(buf):
        if skip_control and header.attributes & CONTROL_BIT:
            continue
        yield from records


def check_framing(buf, pos: int, header: BatchHeader) -> None:
    """Cheap structural check of a client's batch: its records fill it exactly, one per offset.

    Kafka reads every record a client produces; a batch whose CRC is good but whose records
    are garbage would otherwise be stored and stop every consumer at it. Uncompressed
    records are walked in place by their length prefixes; compressed ones are decompressed
    and walked. Raises CorruptRecordError.
    """
    start, stop = pos + HEADER_SIZE, pos + header.batch_length + LOG_OVERHEAD
    codec = header.attributes & COMPRESSION_MASK
    data = buf
    if codec:
        with memoryview(buf) as view, view[start:stop] as section:
            data = _compression.decompress(codec, section)
        start, stop = 0, len(data)
    count = 0
    p = start
    expected = header.record_count
    try:
        while p < stop:
            b = data[p]
            if b < 0x80:  # one-byte zig-zag varint: even means positive
                length = -1 if b & 1 else b >> 1
                p += 1
            elif data[p + 1] < 0x80:  # two bytes: records of 64 to 8191 bytes
                z = (b & 0x7F) | (data[p + 1] << 7)
                length = -1 if z & 1 else z >> 1
                p += 2
            else:
                length, p = decode_varint(data, p)
            if length <= 0:
                raise CorruptRecordError(f"record {count} of the batch has an invalid length")
            p += length
            count += 1
            if count > expected:
                break
    except IndexError:
        raise CorruptRecordError("record batch ends inside a record") from None
    if p != stop or count != expected:
        raise CorruptRecordError(
            f"record batch holds {count} record(s) in {stop - start} bytes but its header says {expected}")
