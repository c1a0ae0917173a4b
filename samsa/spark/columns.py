"""Fetched record batches to one Arrow batch of Spark's Kafka columns, without a Python object
per record.

Only the chain of record lengths is walked in Python (one varint a record, to find where each
record starts); every field after it is decoded for all records at once with numpy, and keys
and values are gathered by index into Arrow binary columns. Records with headers (rare, and
wanted by Spark as lists of structs) go through the consumer's record decoder instead.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from samsa.client.consumer_internals.records import ConsumerRecord, FetchedBatch
from samsa.protocol.records import decode_records
from samsa.protocol.errors import CorruptRecordError
from samsa.protocol.varint import decode_uvarint
from samsa.spark.schema import ARROW_HEADER, TS_MICROS, constant_string, to_arrow

_INT32_MAX = 2**31 - 1


def batches_to_arrow(batches: Sequence[FetchedBatch], topic: str, partition: int, start: int, end: int,
                     schema: pa.Schema) -> pa.RecordBatch:
    """The records of ``batches`` (one partition's, in order) with offsets in ``[start, end)``."""
    buf, regions = _concatenate(batches)
    u = np.frombuffer(buf, np.uint8)
    try:
        columns = _decode(u, _walk(buf, regions), batches)
        if columns is None:  # some record has headers
            return _with_records(batches, topic, partition, start, end, schema)
    except (IndexError, ValueError, CorruptRecordError) as e:
        raise CorruptRecordError(f"Malformed record in a batch of {topic}-{partition}: {e}") from None
    offsets, timestamps, ts_types, key_at, key_len, value_at, value_len = columns
    keep = (offsets >= start) & (offsets < end)
    if not keep.all():
        offsets, timestamps, ts_types, key_at, key_len, value_at, value_len = (
            a[keep] for a in (offsets, timestamps, ts_types, key_at, key_len, value_at, value_len))
    n = len(offsets)
    arrays = [_binary(u, key_at, key_len), _binary(u, value_at, value_len), constant_string(topic, n),
              pa.array(np.full(n, partition, np.int32)), pa.array(offsets),
              pa.Array.from_buffers(TS_MICROS, n, [None, pa.py_buffer(timestamps * 1000)]),
              pa.array(ts_types)]
    if len(schema) > 7:
        arrays.append(pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), pa.array([], ARROW_HEADER),
                                               type=pa.list_(ARROW_HEADER)))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _concatenate(batches: Sequence[FetchedBatch]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """The batches' records in one buffer, and each batch's (position, size, record count) in it."""
    regions = []
    parts = []
    pos = 0
    for b in batches:
        size = b.end - b.start
        regions.append((pos, size, b.count))
        parts.append(memoryview(b.data)[b.start:b.end])
        pos += size
    parts.append(bytes(12))  # for reading 12 bytes at any record's key or value (see _binary)
    return b"".join(parts), regions


def _walk(buf: bytes, regions: list[tuple[int, int, int]]) -> np.ndarray:
    """Where each record (its length varint) begins; each batch's chain must end at its end."""
    out: list[int] = []
    append = out.append
    for pos, size, count in regions:
        p = pos
        for _ in range(count):
            append(p)
            b = buf[p]
            if b < 0x80:
                p += 1 + (b >> 1)
            elif buf[p + 1] < 0x80:
                p += 2 + (((b & 0x7F) | (buf[p + 1] << 7)) >> 1)
            else:
                v, p = decode_uvarint(buf, p)
                p += v >> 1
        if p != pos + size:
            raise ValueError(f"the records end {p - pos - size:+} bytes from where their batch does")
    return np.array(out, np.int64)


def _varints(u: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints at positions ``at``: (values, sizes in bytes)."""
    last = len(u) - 1
    b = u[np.minimum(at, last)].astype(np.uint64)
    value = b & 0x7F
    size = np.ones(len(at), np.int64)
    more = b >= 0x80
    shift = 7
    while more.any():
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")
        b = u[np.minimum(at + size, last)].astype(np.uint64)
        value |= np.where(more, (b & 0x7F) << np.uint64(shift), 0).astype(np.uint64)
        size += more
        more &= b >= 0x80
        shift += 7
    signed = (value >> np.uint64(1)) ^ (np.uint64(0) - (value & np.uint64(1)))
    return signed.view(np.int64), size


def _decode(u: np.ndarray, lengths_at: np.ndarray, batches: Sequence[FetchedBatch]) -> tuple | None:
    """Per record: offset, timestamp (ms), timestamp type, key and value position and length
    (-1: null). None if a record has headers."""
    length, size = _varints(u, lengths_at)
    begin = lengths_at + size
    record_end = begin + length
    ts_delta, size = _varints(u, begin + 1)  # after the attributes byte
    p = begin + 1 + size
    offset_delta, size = _varints(u, p)
    p += size
    key_len, size = _varints(u, p)
    key_at = p + size
    p = key_at + np.maximum(key_len, 0)
    value_len, size = _varints(u, p)
    value_at = p + size
    p = value_at + np.maximum(value_len, 0)
    header_count, size = _varints(u, p)
    if header_count.any():
        return None
    if (length < 0).any() or (p + size != record_end).any():
        raise ValueError("a record's fields do not end where its length says")
    counts = [b.count for b in batches]
    offsets = np.repeat(np.array([b.base_offset for b in batches], np.int64), counts) + offset_delta
    timestamps = np.repeat(np.array([b.base_timestamp for b in batches], np.int64), counts) + ts_delta
    log_append = [b.log_append_time for b in batches]
    ts_types = np.zeros(len(offsets), np.int32)
    if any(t is not None for t in log_append):
        appended = np.repeat(np.array([t is not None for t in log_append]), counts)
        timestamps[appended] = np.repeat(np.array([t or 0 for t in log_append], np.int64), counts)[appended]
        ts_types[appended] = 1
    return offsets, timestamps, ts_types, key_at, key_len, value_at, value_len


def _binary(u: np.ndarray, at: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The byte strings ``u[at:at + length]`` (null where the length is negative) as an Arrow
    binary column: described as Arrow binary views (16 bytes each: the length, then the bytes
    themselves up to 12, else a 4-byte prefix and the position), then gathered by Arrow's
    cast to binary, in C. ``u`` must have 12 bytes to spare at its end."""
    n = len(at)
    null = lengths < 0
    nulls = int(null.sum())
    if nulls == n:
        return pa.nulls(n, pa.binary())
    lengths = np.where(null, 0, lengths).astype("<i4")
    if int(lengths.sum(dtype=np.int64)) > _INT32_MAX:
        raise ValueError("more than 2 GiB of keys or values in one poll")
    views = np.empty((n, 16), np.uint8)
    views[:, 0:4] = lengths.view(np.uint8).reshape(n, 4)
    views[:, 4:16] = np.lib.stride_tricks.sliding_window_view(u, 12)[at]
    inline = lengths <= 12
    views[:, 4:16][inline[:, None] & (np.arange(12) >= lengths[:, None])] = 0  # inline bytes are zero-padded
    long = ~inline
    views[long, 8:12] = 0  # data buffer 0 ...
    views[long, 12:16] = at[long].astype("<i4").view(np.uint8).reshape(-1, 4)  # ... at this position
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), pa.py_buffer(u)],
                                 null_count=nulls).cast(pa.binary())


def _with_records(batches: Sequence[FetchedBatch], topic: str, partition: int, start: int, end: int,
                  schema: pa.Schema) -> pa.RecordBatch:
    """Record by record, with the consumer's decoder: for batches holding headers."""
    records = []
    for b in batches:
        decoded, p = decode_records(b.data, b.start, b.count, b.base_offset, b.base_timestamp, b.log_append_time,
                                    topic, partition, b.leader_epoch, ConsumerRecord._make)
        if p != b.end:
            raise ValueError(f"the records of the batch at offset {b.base_offset} end {p - b.end:+} bytes from it")
        records += [r for r in decoded if start <= r.offset < end]
    return to_arrow(records, schema) if records else pa.RecordBatch.from_pylist([], schema=schema)
