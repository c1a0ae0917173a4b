"""What poll() hands out, and how fetched record batches become it.

A :class:`CompletedFetch` holds one partition's bytes from one Fetch response. Only the
batch headers are read when it arrives (so the next fetch can start at once); records
are decoded batch by batch as poll() asks for them, straight into :class:`ConsumerRecord`
tuples, with varints of one or two bytes decoded inline.
"""

from __future__ import annotations

import struct
from functools import partial
from typing import Any, Callable, NamedTuple

from crc32c import crc32c

from samsa.client.types import TopicPartition
from samsa.protocol import compression
from samsa.protocol.batch import (COMPRESSION_MASK, CONTROL_BIT, CRC_START, HEADER_SIZE, HEADER_STRUCT, LOG_OVERHEAD,
                                  TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT)
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.records import (CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE, decode_dense,
                                    decode_records)
TIMESTAMP_TYPE_NAMES = {NO_TIMESTAMP_TYPE: "NoTimestampType", CREATE_TIME: "CreateTime",
                        LOG_APPEND_TIME: "LogAppendTime"}

_CONTROL_KEY = struct.Struct(">hh")
ABORT_MARKER = 0


class ConsumerRecord(NamedTuple):
    """One record, as Java's ``ConsumerRecord``. ``headers`` is a tuple of ``(key, value)``
    pairs, ``timestamp_type`` 0 (CreateTime) or 1 (LogAppendTime), ``leader_epoch`` None
    when the batch has none. Records are immutable tuples (made in C, not in Python code)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int | None


_make_record = partial(tuple.__new__, ConsumerRecord)


class ShareConsumerRecord(NamedTuple):
    """A record a share consumer acquired: a :class:`ConsumerRecord`'s fields and the
    ``delivery_count`` (1 the first time the share group hands it out, 2 the next, ...)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int | None
    delivery_count: int


class OffsetAndMetadata(NamedTuple):
    """A committed offset: the next offset to read, with optional metadata and leader epoch."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class RecordDeserializationError(Exception):
    """A deserializer failed on the record at ``offset``; seek past it to go on."""

    def __init__(self, tp: TopicPartition, offset: int, cause: BaseException):
        super().__init__(f"Error deserializing key/value for partition {tp} at offset {offset}. "
                         f"If needed, please seek past the record to continue consumption. ({cause})")
        self.partition = tp
        self.offset = offset


Deserialize = Callable[[str, Any, Any], Any]


class FetchedBatch(NamedTuple):
    """A fetched record batch with its CRC checked and decompressed: its records are encoded
    in ``data[start:end]``, as the record batch format lays them out. What
    :meth:`Consumer.poll_batches` hands to columnar readers, which decode records themselves."""

    data: bytes
    start: int
    end: int
    count: int
    base_offset: int
    base_timestamp: int
    log_append_time: int | None  # every record's timestamp, for a LogAppendTime batch
    leader_epoch: int | None
    next_offset: int  # after the batch's last offset


class _Cursor:
    """Where decoding stands inside one batch."""

    __slots__ = ("data", "p", "end", "i", "count", "base_offset", "base_ts", "log_append_ts", "epoch", "dense",
                 "next_offset")

    def __init__(self, data: bytes, p: int, end: int, h: tuple):
        self.data, self.p, self.end, self.i, self.count = data, p, end, 0, h[12]
        self.base_offset, self.base_ts = h[0], h[7]
        self.log_append_ts = h[8] if h[5] & TIMESTAMP_TYPE_BIT else None
        self.epoch = h[2] if h[2] >= 0 else None
        self.next_offset = h[0] + h[6] + 1
        # Offset deltas 0, 1, 2 ... (as every producer writes them): the fast decoder
        self.dense = self.log_append_ts is None and h[12] == h[6] + 1


class CompletedFetch:
    """One partition's record set from one Fetch response, decoded as poll() asks.

    Records are decoded a poll's worth at a time (not a whole batch at once): they then
    die young, before the garbage collector's older generations ever see them.
    """

    __slots__ = ("tp", "data", "fetch_offset", "next_offset", "high_watermark", "epoch", "_batches", "_cur",
                 "_check_crcs", "_aborted", "_aborted_pids", "_key_de", "_value_de", "error")

    def __init__(self, tp: TopicPartition, data: bytes, fetch_offset: int, high_watermark: int, epoch: int, *,
                 check_crcs: bool = True, aborted: list[tuple[int, int]] | None = None,
                 key_deserializer: Any = None, value_deserializer: Any = None):
        self.tp = tp
        self.data = data
        self.fetch_offset = fetch_offset
        self.high_watermark = high_watermark
        self.epoch = epoch  # the partition's seek epoch when the fetch was sent
        self._check_crcs = check_crcs
        self._aborted = sorted(aborted, key=lambda a: a[1]) if aborted else None
        self._aborted_pids: set[int] = set()
        self._key_de = key_deserializer
        self._value_de = value_deserializer
        self._cur: _Cursor | None = None
        self.error: BaseException | None = None
        # Batch positions now: a partial batch at the end (Fetch cuts at max bytes) is left out.
        batches = []
        pos, end = 0, len(data)
        next_offset = fetch_offset
        unpack = HEADER_STRUCT.unpack_from
        while pos + HEADER_SIZE <= end:
            h = unpack(data, pos)
            size = h[1] + LOG_OVERHEAD
            if size < HEADER_SIZE or pos + size > end:
                break
            if h[3] != 2:
                raise CorruptRecordError(f"record batch magic {h[3]} at offset {h[0]} of {tp} is not supported")
            batches.append((pos, h))
            next_offset = max(next_offset, h[0] + h[6] + 1)
            pos += size
        batches.reverse()  # popped from the end
        self._batches = batches
        self.next_offset = next_offset

    @property
    def exhausted(self) -> bool:
        return self._cur is None and not self._batches and self.error is None

    def take(self, position: int, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` records at or after ``position``, in offset order."""
        out: list[ConsumerRecord] = []
        while len(out) < max_records:
            if self.error is not None:
                if out:
                    break
                raise self.error
            cur = self._cur
            if cur is None:
                if not self._batches:
                    break
                pos, h = self._batches.pop()
                if h[0] + h[6] >= position:  # else wholly before the position
                    self._cur = self._open(pos, h)
                continue
            records = self._read(cur, max_records - len(out))
            if records and records[0].offset < position:
                records = [r for r in records if r.offset >= position]
            if self._key_de is not None or self._value_de is not None:
                records = self._deserialize(records)
            out += records
        return out

    def take_batches(self, position: int) -> list[FetchedBatch]:
        """The rest of the record batches holding offsets at or after ``position``, undecoded
        (a batch may begin before ``position``: skipping those records is the caller's)."""
        if self.error is not None:
            raise self.error
        out = []
        cur = self._cur
        if cur is not None:  # a batch poll() has begun decoding: the records it has not reached
            out.append(FetchedBatch(cur.data, cur.p, cur.end, cur.count - cur.i, cur.base_offset, cur.base_ts,
                                    cur.log_append_ts, cur.epoch, cur.next_offset))
            self._cur = None
        while self._batches:
            pos, h = self._batches.pop()
            if h[0] + h[6] >= position and (cur := self._open(pos, h)) is not None:
                out.append(FetchedBatch(cur.data, cur.p, cur.end, cur.count, cur.base_offset, cur.base_ts,
                                        cur.log_append_ts, cur.epoch, cur.next_offset))
        return out

    def _open(self, pos: int, h: tuple) -> _Cursor | None:
        """Check a batch and start decoding it; None for a batch with nothing to hand out."""
        data = self.data
        size = h[1] + LOG_OVERHEAD
        if self._check_crcs:
            with memoryview(data) as view, view[pos + CRC_START:pos + size] as covered:
                if crc32c(covered) != h[4]:
                    raise CorruptRecordError(f"Record batch at offset {h[0]} of {self.tp} is corrupt "
                                             f"(CRC32C mismatch)")
        attributes = h[5]
        if self._aborted is not None and self._skip_aborted(pos, h, attributes):
            return None
        if attributes & CONTROL_BIT or h[12] <= 0:
            return None
        codec = attributes & COMPRESSION_MASK
        if codec:
            with memoryview(data) as view, view[pos + HEADER_SIZE:pos + size] as section:
                plain = compression.decompress(codec, section)
            return _Cursor(plain, 0, len(plain), h)
        return _Cursor(data, pos + HEADER_SIZE, pos + size, h)

    def _read(self, cur: _Cursor, n: int) -> list[ConsumerRecord]:
        stop = min(cur.count, cur.i + n)
        tp = self.tp
        try:
            if cur.dense:
                records, p = decode_dense(cur.data, cur.p, cur.i, stop, cur.base_offset, cur.base_ts, tp.topic,
                                          tp.partition, cur.epoch, _make_record)
            else:
                records, p = decode_records(cur.data, cur.p, stop - cur.i, cur.base_offset, cur.base_ts,
                                            cur.log_append_ts, tp.topic, tp.partition, cur.epoch, _make_record)
        except (IndexError, ValueError, CorruptRecordError) as e:
            self._cur = None
            raise CorruptRecordError(f"Malformed record in the batch at offset {cur.base_offset} of {tp}: {e}") from None
        cur.p, cur.i = p, stop
        if stop == cur.count:
            self._cur = None
            if p != cur.end:
                raise CorruptRecordError(f"Malformed batch at offset {cur.base_offset} of {tp}: its {cur.count} "
                                         f"records end {p - cur.end:+} bytes from the batch's end")
        return records

    def _deserialize(self, records: list[ConsumerRecord]) -> list[ConsumerRecord]:
        kd = self._key_de.deserialize if self._key_de is not None else None
        vd = self._value_de.deserialize if self._value_de is not None else None
        out = []
        for r in records:
            topic, headers = r[0], r[7]
            try:
                key = kd(topic, r[5], headers) if kd is not None else r[5]
                value = vd(topic, r[6], headers) if vd is not None else r[6]
            except Exception as e:  # noqa: BLE001 - any deserializer failure stops here
                self.error = RecordDeserializationError(self.tp, r[2], e)
                self._batches.clear()
                self._cur = None
                break
            out.append(_make_record((topic, r[1], r[2], r[3], r[4], key, value, headers, r[8])))
        return out

    def _skip_aborted(self, pos: int, h: tuple, attributes: int) -> bool:
        """read_committed: drop batches of aborted transactions, as the fetch response lists them."""
        aborted = self._aborted
        last = h[0] + h[6]
        while aborted and aborted[0][1] <= last:
            self._aborted_pids.add(aborted.pop(0)[0])
        producer_id = h[9]
        if attributes & CONTROL_BIT:
            if producer_id in self._aborted_pids and self._is_abort_marker(pos, h):
                self._aborted_pids.discard(producer_id)
            return True
        return bool(attributes & TRANSACTIONAL_BIT) and producer_id in self._aborted_pids

    def _is_abort_marker(self, pos: int, h: tuple) -> bool:
        try:
            records, _ = decode_records(self.data, pos + HEADER_SIZE, 1, h[0], h[7], None, "", 0, None, _make_record)
        except (IndexError, ValueError):
            return False
        key = records[0].key if records else None
        return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == ABORT_MARKER
