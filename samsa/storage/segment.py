"""One segment of a partition's log: a ``.log`` file of whole batches and its two indexes.

The segment keeps its file descriptor open and reads and writes with ``os.pread`` and
``os.pwrite``. It holds no Python object per batch or per record: a handful of numbers
(base offset, size, next offset, largest timestamp) plus the index arrays.
"""

from __future__ import annotations

import logging
import os
import struct
from array import array
from pathlib import Path
from typing import Iterator

from samsa.protocol.batch import (CONTROL_BIT, HEADER_SIZE, LENGTH_STRUCT, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH,
                                  BatchHeader, batch_problem, compute_crc, iter_headers, read_header)
from samsa.protocol.control import control_type, coordinator_epoch
from samsa.clock import now_ms
from samsa.protocol.errors import CorruptRecordError, KafkaStorageError
from samsa.storage.config import LogConfig
from samsa.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, pwrite_all, segment_file
from samsa.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from samsa.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF
# base_offset int64, batch_length int32, (epoch, magic, crc, attributes), last_offset_delta int32
_PEEK = struct.Struct(">qi11xi")
PEEK_SIZE = _PEEK.size
LOCATE_CHUNK = 16384  # read while looking for a batch from an index entry (4 KiB apart)
SCAN_CHUNK = 1 << 20  # read while scanning a whole segment


def scan_batches(fd: int, start: int, end: int, *, with_data: bool = True,
                 strict: bool = False) -> Iterator[tuple[int, BatchHeader, bytes | None, int]]:
    """``(position, header, buf, offset_in_buf)`` of each whole v2 batch of a segment file in
    [start, end), read in big chunks: the one scanner of segment files (recovery, reads,
    the cleaner, dump-log). ``buf`` holds the batch at ``offset_in_buf`` (None for a batch
    larger than a chunk when ``with_data`` is off). At a torn or impossible batch it stops
    silently, or with ``strict`` raises CorruptRecordError."""
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(SCAN_CHUNK, end - pos), pos)
        off = 0
        for at, h in iter_headers(chunk, 0, len(chunk)):
            yield pos + at, h, chunk, at
            off = at + h.size
        if off == 0:  # the batch at pos is larger than a chunk, or not a whole batch at all
            problem = batch_problem(chunk, 0, end - pos) if len(chunk) >= HEADER_SIZE else "torn batch header"
            if problem is None:
                h = read_header(chunk, 0)
                data = os.pread(fd, h.size, pos) if with_data else None
                if data is None or len(data) == h.size:
                    yield pos, h, data, 0
                    pos += h.size
                    continue
                problem = "the file ends inside a record batch"
            if strict:
                raise CorruptRecordError(f"{problem} at position {pos}")
            return
        pos += off


class LogSegment:
    """``base_offset``: first offset the segment may hold (its file name).
    ``next_offset``: one past its last offset; exact for the active segment, an upper
    bound (the next segment's base) for the others when loaded without a scan."""

    __slots__ = (
        "dir", "base_offset", "fd", "size", "offset_index", "time_index", "index_interval_bytes",
        "next_offset", "max_timestamp", "offset_of_max_timestamp", "rolling_base_timestamp",
        "created_ms", "bytes_since_index", "dirty", "kind", "txn_index",
    )

    def __init__(self, dir: Path, base_offset: int, fd: int, size: int, config: LogConfig, *, new: bool,
                 kind: str = ""):
        self.dir = dir
        self.base_offset = base_offset
        self.fd = fd
        self.size = size
        self.kind = kind  # "" for a segment of the log; ".cleaned" for one the cleaner is writing
        self.offset_index = OffsetIndex(segment_file(dir, base_offset, INDEX_SUFFIX + kind), base_offset,
                                        config.segment_index_bytes, new=new)
        self.time_index = TimeIndex(segment_file(dir, base_offset, TIME_INDEX_SUFFIX + kind), base_offset,
                                    config.segment_index_bytes, new=new)
        self.txn_index = TransactionIndex(segment_file(dir, base_offset, TXN_INDEX_SUFFIX + kind))
        self.index_interval_bytes = config.index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset  # last offset of the batch holding max_timestamp
        # Max timestamp of the first batch: segment.ms is measured from it (as Kafka does);
        # None until a batch with a timestamp arrives, then created_ms is used instead.
        self.rolling_base_timestamp: int | None = None
        self.created_ms = now_ms()
        self.bytes_since_index = 0
        self.dirty = False

    @property
    def path(self) -> Path:
        return segment_file(self.dir, self.base_offset, LOG_SUFFIX + self.kind)

    # ------------------------------------------------------------------ open / create

    @classmethod
    def create(cls, dir: Path, base_offset: int, config: LogConfig, created_ms: int | None = None, *,
               kind: str = "") -> LogSegment:
        fd = os.open(segment_file(dir, base_offset, LOG_SUFFIX + kind), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg = cls(dir, base_offset, fd, 0, config, new=True, kind=kind)
        seg.txn_index.delete()  # a new segment has no aborted transactions yet
        if created_ms is not None:
            seg.created_ms = created_ms
        return seg

    @classmethod
    def open(cls, dir: Path, base_offset: int, config: LogConfig) -> LogSegment:
        fd = os.open(segment_file(dir, base_offset, LOG_SUFFIX), os.O_RDWR)
        return cls(dir, base_offset, fd, os.fstat(fd).st_size, config, new=False)

    def load_closed(self, next_base: int) -> None:
        """State of a segment that is not the last one, from its index files only.

        Raises IndexCorruptError if an index fails its sanity check."""
        self.next_offset = next_base
        self.offset_index.check_against(self.size)
        self.time_index.check_against(next_base)
        last = self.time_index.read_file_entries((-1,))
        if last:
            self.max_timestamp, rel = last[0]
            self.offset_of_max_timestamp = self.base_offset + rel

    def load_active(self) -> None:
        """State of the last segment: its indexes, then a scan of the batches after the
        last offset-index entry. Raises IndexCorruptError if the index or the tail of the
        log cannot be trusted (the caller then runs :meth:`recover`)."""
        self.offset_index.check_against(self.size)
        self.time_index.check_against()
        self._load_tail()
        if self.size >= HEADER_SIZE:
            first = read_header(os.pread(self.fd, HEADER_SIZE, 0))
            if first.max_timestamp >= 0:
                self.rolling_base_timestamp = first.max_timestamp

    def _load_tail(self) -> None:
        entry = self.offset_index.last_entry()
        t = self.time_index.last_entry()
        max_ts, off_max = t if t else (-1, self.base_offset)
        start = entry[1] if entry else 0
        next_offset = self.base_offset
        end = start
        for pos, h, _, _ in self._scan(start, self.size, False):
            if pos == start and entry and not h.base_offset <= entry[0] <= h.last_offset:
                raise IndexCorruptError(f"{self.offset_index.path}: last entry is not at its batch")
            if h.magic != MAGIC or h.base_offset < next_offset:
                raise IndexCorruptError(f"{self.path}: bad batch at position {pos}")
            if h.max_timestamp > max_ts:
                max_ts, off_max = h.max_timestamp, h.last_offset
            next_offset = h.last_offset + 1
            end = pos + h.size
        if end != self.size:
            raise IndexCorruptError(f"{self.path}: {self.size - end} bytes after the last whole batch")
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.bytes_since_index = self.size - start if entry else self.size

    # ------------------------------------------------------------------ recovery

    def recover(self, *, verify_crc: bool = True) -> int:
        """Scan every batch, rebuild both indexes, and cut the file after the last valid
        batch (bad magic, bad length, offsets going backwards, CRC mismatch, partial
        tail). Returns the number of bytes cut off."""
        base = self.base_offset
        interval = self.index_interval_bytes
        o_keys, o_vals = array("i"), array("i")
        t_keys, t_vals = array("q"), array("i")
        max_ts, off_max = -1, base
        next_offset = base
        since = 0
        valid_end = 0
        rolling = None
        for pos, h, buf, off in self._scan(0, self.size, verify_crc):
            last = h.base_offset + h.last_offset_delta
            if (
                h.magic != MAGIC
                or h.base_offset < next_offset
                or h.last_offset_delta < 0
                or last - base > INT32_MAX
                or (verify_crc and compute_crc(buf, off, h.size) != h.crc)
            ):
                break
            ts = h.max_timestamp
            if pos == 0 and ts >= 0:
                rolling = ts
            if ts > max_ts:
                max_ts, off_max = ts, last
            if since > interval:
                o_keys.append(last - base)
                o_vals.append(pos)
                if max_ts > (t_keys[-1] if t_keys else -1):
                    t_keys.append(max_ts)
                    t_vals.append(off_max - base)
                since = 0
            since += h.size
            next_offset = last + 1
            valid_end = pos + h.size
        cut = self.size - valid_end
        if cut:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        self.offset_index.reset(o_keys, o_vals)
        self.time_index.reset(t_keys, t_vals)
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.rolling_base_timestamp = rolling
        self.bytes_since_index = since
        self.dirty = True
        return cut

    def _scan(self, start: int, end: int, with_data: bool) -> Iterator[tuple[int, BatchHeader, bytes | None, int]]:
        """The whole batches in [start, end); stops silently at a torn or impossible one."""
        return scan_batches(self.fd, start, end, with_data=with_data)

    def iter_headers(self, from_offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches holding offsets >= ``from_offset``."""
        loc = self.locate(from_offset)
        if loc is None:
            return
        for _, h, _, _ in self._scan(loc[0], self.size, False):
            yield h

    def iter_producer_batches(self, from_offset: int) -> Iterator[tuple[BatchHeader, int | None, int]]:
        """``(header, marker type, coordinator epoch)`` of the batches holding offsets >=
        ``from_offset``: what rebuilding the producer state needs (markers are read from
        their control record; other batches give ``None, -1``)."""
        loc = self.locate(from_offset)
        if loc is None:
            return
        for pos, h, buf, off in self._scan(loc[0], self.size, False):
            if not h.attributes & CONTROL_BIT:
                yield h, None, -1
                continue
            if buf is None:
                buf, off = os.pread(self.fd, h.size, pos), 0
            yield h, control_type(buf, off, h), coordinator_epoch(buf, off, h)

    # ------------------------------------------------------------------ append

    def append(self, data, metas: list[tuple[int, int, int, int]]) -> None:
        """Write ``data`` (whole batches, offsets assigned) at the end of the segment.

        ``metas`` has one ``(position_in_data, size, last_offset, max_timestamp)`` per
        batch; they drive the sparse index entries (one per index_interval_bytes)."""
        position = self.size
        try:
            pwrite_all(self.fd, data, position)
        except OSError as e:
            raise KafkaStorageError(f"write to {self.path} failed: {e}") from e
        if position == 0 and metas[0][3] >= 0:
            self.rolling_base_timestamp = metas[0][3]
        since = self.bytes_since_index
        interval = self.index_interval_bytes
        max_ts = self.max_timestamp
        off_max = self.offset_of_max_timestamp
        for p, size, last, ts in metas:
            if ts > max_ts:
                max_ts, off_max = ts, last
            if since > interval:
                self.offset_index.append(last, position + p)
                self.time_index.maybe_append(max_ts, off_max)
                since = 0
            since += size
        self.bytes_since_index = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, off_max
        self.size = position + len(data)
        self.next_offset = metas[-1][2] + 1
        self.dirty = True

    def should_roll_by_time(self, max_timestamp: int, now: int, segment_ms: int) -> bool:
        """Kafka's rule: measured in record time from the first batch's timestamp when
        there is one, else in wall-clock time from the segment's creation."""
        if self.size == 0:
            return False
        if self.rolling_base_timestamp is not None and max_timestamp >= 0:
            return max_timestamp - self.rolling_base_timestamp > segment_ms
        return now - self.created_ms > segment_ms

    # ------------------------------------------------------------------ read

    def locate(self, offset: int) -> tuple[int, int, int] | None:
        """``(position, base_offset, size)`` of the first batch whose last offset is >=
        ``offset``, or None. Binary search in the offset index, then a forward scan."""
        if offset < self.base_offset:
            offset = self.base_offset
        entry_offset, pos = self.offset_index.lookup(offset)
        try:
            return self._locate_from(pos, offset, entry_offset if pos else None)
        except IndexCorruptError as e:
            log.warning("%s; rebuilding the indexes of %s", e, self.path)
            self.recover(verify_crc=False)
            return self._locate_from(0, offset, None)

    def _locate_from(self, pos: int, offset: int, entry_offset: int | None) -> tuple[int, int, int] | None:
        fd, end = self.fd, self.size
        # The batch sought starts within about one index interval of the entry: read that much
        # first (plus a header), then in bigger chunks if the index is sparser than configured.
        step = min(self.index_interval_bytes + 2 * PEEK_SIZE, LOCATE_CHUNK)
        while pos + PEEK_SIZE <= end:
            chunk = os.pread(fd, min(step, end - pos), pos)
            step = LOCATE_CHUNK
            n = len(chunk)
            off = 0
            while off + PEEK_SIZE <= n:
                base, length, lod = _PEEK.unpack_from(chunk, off)
                if entry_offset is not None:  # check the index entry against the log
                    if not base <= entry_offset <= base + lod:
                        raise IndexCorruptError(f"{self.offset_index.path}: entry {entry_offset} is not at its batch")
                    entry_offset = None
                if length < MIN_BATCH_LENGTH:
                    raise IndexCorruptError(f"{self.path}: impossible batch length {length} at {pos + off}")
                if base + lod >= offset:
                    return pos + off, base, length + LOG_OVERHEAD
                off += length + LOG_OVERHEAD
            if n < PEEK_SIZE:
                return None
            pos += off
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> tuple[bytes, bool]:
        """Whole batches from the one holding ``offset``: at most ``max_bytes`` (but at
        least one batch if ``min_one_batch``), only batches with base offset below
        ``max_offset``. Returns the bytes and whether the read ran to the segment's end
        (so the caller may go on into the next segment): :meth:`read_range`'s range, read."""
        pos, n, exhausted, _ = self.read_range(offset, max_bytes, max_offset, min_one_batch)
        return (os.pread(self.fd, n, pos) if n else b""), exhausted

    def read_range(self, offset: int, max_bytes: int, max_offset: int | None,
                   min_one_batch: bool) -> tuple[int, int, bool, int]:
        """Whole batches from the one holding ``offset`` (see :meth:`read`), as ``(position,
        length, exhausted, end_offset)`` without reading the bytes (only the batch headers near
        the cut): for a zero-copy fetch. ``end_offset`` bounds the offsets in the range (the next batch's base offset
        where known, else the segment's next offset)."""
        loc = self.locate(offset)
        if loc is None:
            return 0, 0, True, self.next_offset
        pos, base, first_size = loc
        if max_offset is not None and base >= max_offset:
            return pos, 0, False, base
        avail = self.size - pos
        if first_size > max_bytes:
            if not min_one_batch:
                return pos, 0, False, base
            return pos, first_size, first_size == avail, self.next_offset
        want = min(max_bytes, avail)
        if want == avail and (max_offset is None or max_offset >= self.next_offset):
            return pos, avail, True, self.next_offset
        # Cut after the last whole batch below max_offset, walking batch lengths from the last
        # index entry inside the range (checked against its batch) rather than from the first.
        start = pos
        entry_offset, entry_pos = self.offset_index.lookup_position(pos + want - PEEK_SIZE)
        if entry_pos > pos and (max_offset is None or entry_offset < max_offset):
            peek = os.pread(self.fd, PEEK_SIZE, entry_pos)
            if len(peek) == PEEK_SIZE:
                b, _, lod = _PEEK.unpack_from(peek)
                if b <= entry_offset <= b + lod:
                    start = entry_pos
        # Only the batch headers are read (in chunks, skipping over big batches), not the bytes
        # between them: the range's end is where the last whole batch below the cut ends.
        cut = pos + want
        end = at = start
        end_offset = self.next_offset
        unpack = LENGTH_STRUCT.unpack_from
        fd = self.fd
        while at + LOG_OVERHEAD <= cut:
            chunk = os.pread(fd, min(LOCATE_CHUNK, cut - at), at)
            n = len(chunk)
            off = 0
            while off + LOG_OVERHEAD <= n:
                b, length = unpack(chunk, off)
                nxt = at + off + LOG_OVERHEAD + length
                if max_offset is not None and b >= max_offset or nxt > cut:
                    end_offset = b
                    at = cut  # done
                    break
                end = nxt
                off += LOG_OVERHEAD + length
            else:
                if n < LOG_OVERHEAD:
                    break
                at += off
        length = end - pos
        return pos, length, length == avail, end_offset

    def batch_at(self, offset: int) -> tuple[int, bytes] | None:
        """``(position, bytes)`` of the batch holding ``offset`` (or the next one)."""
        loc = self.locate(offset)
        if loc is None:
            return None
        return loc[0], os.pread(self.fd, loc[2], loc[0])

    def first_batch_at_timestamp(self, timestamp: int, min_offset: int) -> bytes | None:
        """The first batch with a record at or after ``min_offset`` whose max timestamp is
        >= ``timestamp``; the time index tells where to start scanning."""
        if self.max_timestamp < timestamp:
            return None
        start = max(self.time_index.lookup_before(timestamp), min_offset)
        loc = self.locate(start)
        if loc is None:
            return None
        for pos, h, _, _ in self._scan(loc[0], self.size, False):
            if h.max_timestamp >= timestamp and h.last_offset >= min_offset:
                return os.pread(self.fd, h.size, pos)
        return None

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime if no record has one (Kafka)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except OSError:
            return now_ms()

    # ------------------------------------------------------------------ truncate

    def truncate_to(self, offset: int) -> int:
        """Drop the batches holding offsets >= ``offset`` (a batch straddling it goes
        whole). Returns the new next offset."""
        loc = self.locate(offset)
        if loc is None:
            self.next_offset = max(offset, self.base_offset)
            return self.next_offset
        pos, base, _ = loc
        os.ftruncate(self.fd, pos)
        self.size = pos
        new_next = min(offset, base)
        self.offset_index.truncate_to_offset(new_next)
        self.time_index.truncate_to_offset(new_next)
        self.txn_index.truncate_to(new_next)
        self._load_tail()
        self.next_offset = max(new_next, self.base_offset)
        if self.size == 0:
            self.rolling_base_timestamp = None
            self.created_ms = now_ms()
        self.dirty = True
        return self.next_offset

    # ------------------------------------------------------------------ persistence

    def seal(self) -> None:
        """The segment stops being the active one: record its largest timestamp in the
        time index (so a later load knows it without a scan) and write the indexes."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)

    def flush(self) -> None:
        try:
            if self.dirty:
                os.fsync(self.fd)
            self.offset_index.flush(fsync=True)
            self.time_index.flush(fsync=True)
            self.txn_index.flush()
        except OSError as e:
            raise KafkaStorageError(f"flush of {self.path} failed: {e}") from e
        self.dirty = False

    def close(self) -> None:
        if self.fd < 0:
            return
        if self.time_index.loaded:  # else untouched since loaded: nothing to write
            self.seal()
        if os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)  # junk left by a failed write
        self.flush()
        os.close(self.fd)
        self.fd = -1

    def close_handle(self) -> None:
        """Close the file without writing anything (deletion, or a simulated crash)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete(self) -> None:
        self.close_handle()
        for path in (self.path, self.offset_index.path, self.time_index.path):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
