"""Records inside a v2 record batch: building batches, decoding them (varints: protocol/varint.py).

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

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from crc32c import crc32c

from samsa.protocol import compression as _compression
from samsa.protocol.batch import (
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    HEADER_SIZE,
    HEADER_STRUCT,
    LENGTH_STRUCT,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_POS,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    compute_crc,
    read_header,
    write_crc,
)
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.varint import (UVARINT_BYTES, UVARINT_TABLE_SIZE, decode_uvarint, decode_varint,
                                   encode_long_uvarint, encode_varint)

NO_TIMESTAMP = -1
# Worst-case bytes a record takes beyond its key, value and headers: length (5),
# attributes (1), timestamp delta (10), offset delta (5), key and value lengths (5 + 5),
# header count (5).
RECORD_OVERHEAD_MAX = 36



@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


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
            ts = UVARINT_BYTES[z] if z < UVARINT_TABLE_SIZE else encode_long_uvarint(z)
        else:
            ts = b"\x00"
        z = n << 1
        od = UVARINT_BYTES[z] if z < UVARINT_TABLE_SIZE else encode_long_uvarint(z)
        if key is None:
            kl = b"\x01"
            key = b""
        else:
            z = len(key) << 1
            kl = UVARINT_BYTES[z] if z < UVARINT_TABLE_SIZE else encode_long_uvarint(z)
        if value is None:
            vl = b"\x01"
            value = b""
        else:
            z = len(value) << 1
            vl = UVARINT_BYTES[z] if z < UVARINT_TABLE_SIZE else encode_long_uvarint(z)
        # Joining first means a wrong type fails before the builder is touched.
        body = b"".join((b"\x00", ts, od, kl, key, vl, value, _encode_headers(headers) if headers else b"\x00"))
        z = len(body) << 1
        buf = self._buf
        buf += UVARINT_BYTES[z] if z < UVARINT_TABLE_SIZE else encode_long_uvarint(z)
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
        HEADER_STRUCT.pack_into(
            out, 0, self.base_offset, len(out) - LOG_OVERHEAD, self.partition_leader_epoch, MAGIC, 0,
            self.attributes(), n - 1, self.base_timestamp, self.max_timestamp, self.producer_id,
            self.producer_epoch, self.base_sequence, n,
        )
        with memoryview(out) as view, view[CRC_START:] as covered:
            crc = crc32c(covered)
        write_crc(out, 0, crc)
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
    if pos + MAGIC_POS + 1 > end:
        raise CorruptRecordError("record batch cut short")
    magic = buf[pos + MAGIC_POS]
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
    if header.record_count < 0:
        raise CorruptRecordError(f"negative record count {header.record_count}")
    try:
        rows, end = decode_records(data, start, header.record_count, header.base_offset, header.base_timestamp,
                                   log_append, "", -1, None)
    except (IndexError, ValueError) as e:
        raise CorruptRecordError(f"malformed record in batch at offset {header.base_offset}: {e}") from None
    if end != stop:
        raise CorruptRecordError(f"{stop - end} bytes left after the batch's {header.record_count} records")
    return header, [Record(r[2], r[3], r[5], r[6], list(r[7])) for r in rows]


# Records decode into rows (topic, partition, offset, timestamp, timestamp_type, key, value,
# headers, leader_epoch) built by a ``make`` callable: the consumer's ConsumerRecord is made
# straight from them in C (tuple.__new__), with no per-record Python call in between.
MakeRow = Callable[[tuple], Any]
NO_HEADERS: tuple = ()  # shared: a record without headers allocates nothing for them
# Java's TimestampType ids.
NO_TIMESTAMP_TYPE, CREATE_TIME, LOG_APPEND_TIME = -1, 0, 1


def decode_records(data: bytes, p: int, n: int, base_offset: int, base_ts: int, log_append_ts: int | None,
                   topic: str, partition: int, epoch: int | None, make: MakeRow = tuple) -> tuple[list, int]:
    """``n`` records of a batch from ``p``, any layout: (rows built by ``make``, position after them)."""
    out: list = []
    append = out.append
    uvarint = decode_uvarint
    ts_type = CREATE_TIME if log_append_ts is None else LOG_APPEND_TIME
    for _ in range(n):
        b, p = uvarint(data, p)  # record length
        rec_end = p + (b >> 1)
        b, p = uvarint(data, p + 1)  # after the attributes byte: timestamp delta
        ts = base_ts + ((b >> 1) ^ -(b & 1)) if log_append_ts is None else log_append_ts
        b, p = uvarint(data, p)
        offset = base_offset + ((b >> 1) ^ -(b & 1))
        key, p = _nullable_bytes(data, p)
        value, p = _nullable_bytes(data, p)
        if data[p]:
            headers, p = decode_header_tuple(data, p)
        else:
            headers = NO_HEADERS
            p += 1
        if p != rec_end:
            raise ValueError(f"record at offset {offset} ends {p - rec_end:+} bytes from where its length says")
        append(make((topic, partition, offset, ts, ts_type, key, value, headers, epoch)))
    return out, p


def _nullable_bytes(data: bytes, p: int) -> tuple[bytes | None, int]:
    """A varint length then that many bytes; any negative length is null, as in Java."""
    n, p = decode_uvarint(data, p)
    if n & 1:
        return None, p
    end = p + (n >> 1)
    return data[p:end], end


# Bytes of the zig-zag varint of offset delta i, for i below each bound.
_DELTA_SIZES = ((64, 1), (8192, 2), (1 << 20, 3), (1 << 27, 4), (1 << 31, 5))


def decode_dense(data: bytes, p: int, i: int, stop: int, base_offset: int, base_ts: int,
                 topic: str, partition: int, epoch: int | None, make: MakeRow = tuple) -> tuple[list, int]:
    """The hot loop of the consumer: records ``i`` to ``stop`` of a batch whose offset
    deltas run 0, 1, 2 ... (every batch a producer writes) with CreateTime timestamps.

    The offset of record i is ``base_offset + i``, so its delta's bytes are skipped (one
    byte below 64, two below 8192 ...). Record lengths are skipped too: a walk that goes
    wrong anywhere cannot end exactly at the batch's end, which the caller checks. One-
    and two-byte varints (nearly all of them) are decoded inline.
    """
    out: list = []
    append = out.append
    uvarint = decode_uvarint
    for bound, delta_size in _DELTA_SIZES:
        seg_stop = bound if bound < stop else stop
        if i >= seg_stop:
            continue
        for i in range(i, seg_stop):
            b = data[p]  # record length
            if b < 0x80:
                p += 1
            elif data[p + 1] < 0x80:
                p += 2
            else:
                _, p = uvarint(data, p)
            t = data[p + 1]  # timestamp delta, after the attributes byte
            if t < 0x80:
                p += 2
            else:
                c = data[p + 2]
                if c < 0x80:
                    t = (t & 0x7F) | (c << 7)
                    p += 3
                else:
                    t, p = uvarint(data, p + 1)
            p += delta_size
            # Key and value are decoded inline (no call per field): this loop is the consumer's hot path.
            b = data[p]  # key length: 1 is -1, null
            if b == 1:
                key = None
                p += 1
            else:
                if b < 0x80:
                    p += 1
                else:
                    c = data[p + 1]
                    if c < 0x80:
                        b = (b & 0x7F) | (c << 7)
                        p += 2
                    else:
                        b, p = uvarint(data, p)
                if b & 1:
                    key = None
                else:
                    b = p + (b >> 1)
                    key = data[p:b]
                    p = b
            b = data[p]  # value length
            if b >= 0x80:
                c = data[p + 1]
                if c < 0x80:
                    b = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    b, p = uvarint(data, p)
                if b & 1:
                    value = None
                else:
                    b = p + (b >> 1)
                    value = data[p:b]
                    p = b
            elif b & 1:
                value = None
                p += 1
            else:
                b = p + 1 + (b >> 1)
                value = data[p + 1:b]
                p = b
            if data[p]:
                headers, p = decode_header_tuple(data, p)
            else:
                headers = NO_HEADERS
                p += 1
            append(make((topic, partition, base_offset + i, base_ts + ((t >> 1) ^ -(t & 1)), CREATE_TIME, key,
                         value, headers, epoch)))
        i = seg_stop
        if i >= stop:
            break
    return out, p


def decode_header_tuple(data: bytes, p: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    headers, p = decode_headers(data, p)
    return tuple(headers), p


class RecordLocation:
    """Where one record lies in a batch's records section, with what rewriting it needs
    (the log cleaner keeps or drops records by key and re-bases their deltas)."""

    __slots__ = ("start", "end", "attrs_pos", "fields_pos", "ts_delta", "offset_delta", "key", "null_value")

    def __init__(self, start: int, end: int, attrs_pos: int, fields_pos: int, ts_delta: int, offset_delta: int,
                 key: bytes | None, null_value: bool):
        self.start, self.end, self.attrs_pos, self.fields_pos = start, end, attrs_pos, fields_pos
        self.ts_delta, self.offset_delta, self.key, self.null_value = ts_delta, offset_delta, key, null_value


def locate_records(data: bytes, count: int, last_offset_delta: int) -> list[RecordLocation]:
    """The records of a (decompressed) records section, located; CorruptRecordError if malformed."""
    out = []
    p, end = 0, len(data)
    try:
        for _ in range(count):
            start = p
            length, p = decode_varint(data, p)
            rec_end = p + length
            if length < 0 or rec_end > end:
                raise CorruptRecordError("record runs past the end of its batch")
            attrs_pos = p
            ts_delta, p = decode_varint(data, p + 1)
            offset_delta, p = decode_varint(data, p)
            if not 0 <= offset_delta <= last_offset_delta:
                raise CorruptRecordError(f"record offset delta {offset_delta} outside the batch")
            fields_pos = p
            n, p = decode_varint(data, p)
            key = data[p:p + n] if n >= 0 else None
            p += max(n, 0)
            n, p = decode_varint(data, p)
            out.append(RecordLocation(start, rec_end, attrs_pos, fields_pos, ts_delta, offset_delta, key, n < 0))
            p = rec_end
    except (IndexError, ValueError) as e:
        raise CorruptRecordError(f"malformed record: {e}") from None
    if p != end:
        raise CorruptRecordError(f"{end - p} bytes after its records")
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
        _, length = LENGTH_STRUCT.unpack_from(buf, pos)
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
    # Records of one length usually follow each other (a producer's records of one size, until
    # an offset or timestamp delta needs one more varint byte): a run of them is checked at
    # once by the bytes of their length prefixes, read with one strided slice (in C). The run
    # tried doubles while runs are found; after a miss the next try waits a few records, longer
    # after each miss in a row, so records of varied lengths cost one walk step each as before.
    run, misses, next_try = 16, 0, 0
    try:
        while p < stop:
            b = data[p]
            if b < 0x80:  # one-byte zig-zag varint: even means positive
                length = -1 if b & 1 else b >> 1
                k = 1
            elif data[p + 1] < 0x80:  # two bytes: records of 64 to 8191 bytes
                z = (b & 0x7F) | (data[p + 1] << 7)
                length = -1 if z & 1 else z >> 1
                k = 2
            else:
                length, q = decode_varint(data, p)
                k = q - p
            if length <= 0:
                raise CorruptRecordError(f"record {count} of the batch has an invalid length")
            step = k + length
            if count >= next_try and k < 3:
                m = min(run, (stop - p) // step, expected - count)
                if m > 1 and data[p:p + m * step:step] == bytes((b,)) * m and (
                        k == 1 or data[p + 1:p + 1 + m * step:step] == bytes((data[p + 1],)) * m):
                    p += m * step
                    count += m
                    run, misses, next_try = min(run * 2, 8192), 0, count
                    continue
                run, misses = 16, min(misses + 1, 8)
                next_try = count + (1 << misses)
            p += step
            count += 1
            if count > expected:
                break
    except IndexError:
        raise CorruptRecordError("record batch ends inside a record") from None
    except ValueError as e:  # a length varint longer than 10 bytes
        raise CorruptRecordError(f"record {count} of the batch has a malformed length: {e}") from None
    if p != stop or count != expected:
        raise CorruptRecordError(
            f"record batch holds {count} record(s) in {stop - start} bytes but its header says {expected}")
