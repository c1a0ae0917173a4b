"""The log of one partition: an ordered list of segments, the last one active.

Appends assign offsets and go to the active segment; reads find the segment by binary
search over base offsets and the batch through the segment's offset index. Crash
recovery, retention, truncation and the producer state all live here.

Thread safety: every public method takes the log's lock, so the server may call it
from its event loop and from worker threads (flush, retention) alike.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from bisect import bisect_right
from pathlib import Path
from typing import Iterator, NamedTuple

from samsa.protocol.batch import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
)
from samsa.protocol.control import control_type, coordinator_epoch
from samsa.protocol.errors import CorruptRecordError, KafkaStorageError, OffsetOutOfRangeError
from samsa.storage.config import LogConfig
from samsa.storage.files import (
    DELETE_DIR_SUFFIX,
    FileSlice,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TEMP_SUFFIXES,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_offset_name,
    parse_partition_dir,
)
from samsa.storage.index import IndexCorruptError, OffsetIndex, TimeIndex
from samsa.storage.leader_epoch import LeaderEpochCache
from samsa.storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from samsa.storage.segment import INT32_MAX, LogSegment
from samsa.storage.txn_index import AbortedTxn
from samsa.clock import now_ms as wall_ms
from samsa.storage.swap import complete_swaps

log = logging.getLogger(__name__)


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 with CreateTime
    log_start_offset: int
    duplicate: bool = False


class PartitionLog:
    """``high_watermark`` follows the log end offset until :meth:`set_high_watermark`
    is first called (single broker); from then on the caller (replication) owns it."""

    def __init__(self, dir: Path, config: LogConfig, topic: str, partition: int):
        self.dir = dir
        self.config = config
        self.topic = topic
        self.partition = partition
        self.log_start_offset = 0
        self.recovery_point = 0  # offsets below it are on disk (fsynced)
        self.cleaner_offset = 0  # first dirty offset: where log compaction resumes
        self.producer_id_expiration_ms = DEFAULT_PRODUCER_ID_EXPIRATION_MS
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._leo = 0
        self._hw: int | None = None
        self._lock = threading.RLock()
        self._producers = ProducerStateManager(dir)
        self._leader_epochs: LeaderEpochCache | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = wall_ms()
        self._closed = False

    # ------------------------------------------------------------------ properties

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._leo if self._hw is None else min(self._hw, self._leo)

    def set_high_watermark(self, offset: int) -> None:
        with self._lock:
            self._hw = max(self.log_start_offset, min(offset, self._leo))
            if self._producers.unreplicated:
                self._producers.prune_replicated(self._hw)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: below it every transaction is decided (read_committed reads up to it)."""
        producers = self._producers
        if not producers.ongoing and not producers.unreplicated:
            return self.high_watermark
        with self._lock:
            return producers.first_unstable_offset(self.high_watermark)

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        assert self._leader_epochs is not None
        return self._leader_epochs

    @property
    def segments(self) -> list[LogSegment]:
        """The segments, oldest first (read-only view for tools and tests)."""
        return list(self._segments)

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    def __repr__(self) -> str:
        return f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, end={self._leo})"

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig,
        recover: bool = True,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
    ) -> PartitionLog:
        """Load (or create) the log in ``dir``, named ``<topic>-<partition>``.

        With ``recover`` (no clean shutdown), every segment from the one holding
        ``recovery_point`` on is scanned and CRC-checked, its indexes rebuilt, and the
        log cut after the last valid batch. Without it, segments are trusted after a
        sanity check of their indexes and of the active segment's tail; a segment
        failing that check is recovered anyway."""
        dir = Path(dir)
        parsed = parse_partition_dir(dir.name)
        if parsed is None:
            raise ValueError(f"{dir.name!r} is not a <topic>-<partition> directory name")
        dir.mkdir(parents=True, exist_ok=True)
        self = cls(dir, config, *parsed)
        try:
            self._load(recover, recovery_point, log_start_offset)
        except BaseException:
            for seg in self._segments:
                seg.close_handle()
            raise
        return self

    def _load(self, recover: bool, recovery_point: int, log_start_offset: int) -> None:
        bases = self._clean_directory()
        config = self.config
        segments = [LogSegment.open(self.dir, b, config) for b in bases]
        self._segments = segments
        first_to_recover = len(segments)
        if recover and segments:
            first_to_recover = max(bisect_right(bases, recovery_point) - 1, 0)
        recovered = False
        first_recovered: int | None = None
        i = 0
        while i < len(segments):
            seg = segments[i]
            last = i == len(segments) - 1
            needs_recovery = i >= first_to_recover
            if not needs_recovery:
                try:
                    if last:
                        seg.load_active()
                    else:
                        seg.load_closed(segments[i + 1].base_offset)
                except IndexCorruptError as e:
                    log.warning("%s; recovering segment %s", e, seg.path)
                    needs_recovery = True
            if needs_recovery:
                recovered = True
                if first_recovered is None:
                    first_recovered = seg.base_offset
                cut = seg.recover()
                if cut:
                    log.warning("%s: cut %d bytes of invalid data at position %d", seg.path, cut, seg.size)
                    for later in segments[i + 1:]:
                        log.warning("%s: deleting segment %s after the corruption", self.dir, later.path)
                        later.delete()
                    del segments[i + 1:]
                    last = True
                if not last:
                    seg.seal()
            i += 1
        if not segments:
            segments.append(LogSegment.create(self.dir, max(log_start_offset, 0), config))
        self._bases = [s.base_offset for s in segments]
        self._leo = segments[-1].next_offset
        self.log_start_offset = min(max(log_start_offset, segments[0].base_offset), self._leo)
        if recovered:
            for seg in segments:
                seg.flush()
        self.recovery_point = self._leo
        self._leader_epochs = LeaderEpochCache(self.dir)
        self._leader_epochs.truncate_from_end(self._leo)
        self._leader_epochs.truncate_from_start(self.log_start_offset)
        if first_recovered is not None:
            # The producer state (and the .txnindex files) are rebuilt from before the first
            # recovered segment: replaying from a later snapshot would skip its markers.
            self._producers.delete_snapshots_above(first_recovered)
        self._load_producer_state()

    def _load_producer_state(self) -> None:
        """Producer state from its newest snapshot and the batches after it; the aborted
        transactions replayed replace the ``.txnindex`` entries from there on."""
        start, aborted = self._producers.load(self.log_start_offset, self._leo, self._producer_batches_from)
        segments = self._segments
        i = max(bisect_right(self._bases, start) - 1, 0)
        for seg in segments[i:]:
            seg.txn_index.truncate_to(start)
        for txn in aborted:
            j = max(bisect_right(self._bases, txn.last_offset) - 1, 0)
            segments[j].txn_index.append(txn)

    def _clean_directory(self) -> list[int]:
        """Remove leftovers of interrupted operations and orphan indexes; return the
        base offsets of the segments, sorted."""
        complete_swaps(self.dir)  # a committed swap of cleaned segments is finished
        logs, others = set(), []
        for name in os.listdir(self.dir):
            path = self.dir / name
            if name.endswith(TEMP_SUFFIXES):
                path.unlink(missing_ok=True)
                continue
            off = parse_offset_name(name, LOG_SUFFIX)
            if off is not None:
                logs.add(off)
                continue
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                off = parse_offset_name(name, suffix)
                if off is not None:
                    others.append((off, path))
        for off, path in others:
            if off not in logs:
                log.info("deleting orphan index %s", path)
                path.unlink(missing_ok=True)
        return sorted(logs)

    def _producer_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, int | None, int]]:
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for seg in self._segments[i:]:
            yield from seg.iter_producer_batches(offset)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    # ------------------------------------------------------------------ append

    def append(
        self,
        records: bytearray,
        batches: list[tuple[int, BatchHeader]],
        *,
        leader_epoch: int = 0,
        now_ms: int,
    ) -> AppendInfo:
        """Append a validated record set as leader: assign offsets from the log end
        offset (patching the batches in place), stamp the leader epoch and, with
        LogAppendTime, the time. An idempotent retry writes nothing and returns the
        original offsets with ``duplicate=True``."""
        if not batches:
            raise CorruptRecordError("empty record set")
        config = self.config
        with self._lock:
            self._check_open()
            producers = self._producers
            pending: dict[int, tuple[int, int]] | None = {} if len(batches) > 1 else None
            for pos, h in batches:
                if h.producer_id >= 0:
                    if h.attributes & CONTROL_BIT:
                        producers.check_marker(h.producer_id, h.producer_epoch, coordinator_epoch(records, pos, h))
                    dup = producers.check(h, pending)
                    if dup is not None:
                        return AppendInfo(
                            dup.first_offset, dup.last_offset,
                            dup.timestamp if config.log_append_time else -1,
                            self.log_start_offset, True,
                        )
            if not isinstance(records, (bytearray, memoryview)):
                records = bytearray(records)
            append_time = now_ms if config.log_append_time else -1
            first = offset = self._leo
            metas = []
            max_ts = -1
            for pos, h in batches:
                set_base_offset(records, pos, offset)
                set_partition_leader_epoch(records, pos, leader_epoch)
                if append_time >= 0:
                    set_log_append_time(records, pos, h, append_time)
                    ts = append_time
                else:
                    ts = h.max_timestamp
                last = offset + h.last_offset_delta
                metas.append((pos, h.size, last, ts))
                if ts > max_ts:
                    max_ts = ts
                offset = last + 1
            last = offset - 1
            seg = self._maybe_roll(len(records), max_ts, first, last, now_ms)
            seg.append(records, metas)
            self._leo = offset
            for (pos, h), m in zip(batches, metas):
                if h.producer_id >= 0:
                    attrs = h.attributes
                    if attrs & CONTROL_BIT:
                        self._apply_marker(seg, records, pos, h, m[2], m[3])
                    else:
                        producers.update(
                            h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                            m[2] - h.last_offset_delta, m[2], m[3], False,
                            transactional=bool(attrs & TRANSACTIONAL_BIT),
                        )
            if leader_epoch > self._leader_epochs.latest_epoch:  # type: ignore[union-attr]
                self._leader_epochs.assign(leader_epoch, first)  # type: ignore[union-attr]
            self._after_append(offset - first)
            return AppendInfo(first, last, append_time, self.log_start_offset, False)

    def _apply_marker(self, seg: LogSegment, records, pos: int, h: BatchHeader, offset: int, ts: int) -> None:
        """A control batch is in ``seg`` at ``offset``: close its producer's transaction and
        index it if aborted."""
        done = self._producers.update(
            h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence, offset, offset, ts, True,
            transactional=True, marker=control_type(records, pos, h),
            coordinator_epoch=coordinator_epoch(records, pos, h))
        if done is not None:
            if done.aborted:
                seg.txn_index.append(self._producers.aborted_entry(done))
            if self._hw is None:  # the high watermark is the log end: the marker is below it already
                self._producers.prune_replicated(self._leo + 1)

    def append_as_follower(self, records, batches: list[tuple[int, BatchHeader]]) -> None:
        """Append batches that already carry their offsets (replication): they must
        start at or after the log end offset and increase. No idempotence fencing; the
        producer state and leader-epoch cache are updated from the headers."""
        if not batches:
            return
        with self._lock:
            self._check_open()
            expected = self._leo
            metas = []
            max_ts = -1
            for pos, h in batches:
                if h.base_offset < expected or h.last_offset_delta < 0:
                    raise CorruptRecordError(
                        f"follower append at offset {h.base_offset} does not continue the log at {expected}"
                    )
                metas.append((pos, h.size, h.last_offset, h.max_timestamp))
                if h.max_timestamp > max_ts:
                    max_ts = h.max_timestamp
                expected = h.next_offset
            first = batches[0][1].base_offset
            seg = self._maybe_roll(len(records), max_ts, first, expected - 1, wall_ms())
            if seg.size == 0 and first > seg.base_offset:
                seg = self._roll(wall_ms(), first)  # a gap: start the segment at the batch
            seg.append(records, metas)
            self._leo = expected
            epochs = self._leader_epochs
            for pos, h in batches:
                if h.attributes & CONTROL_BIT and h.producer_id >= 0:
                    self._apply_marker(seg, records, pos, h, h.base_offset, h.max_timestamp)
                else:
                    self._producers.update_from_header(h)
                if h.partition_leader_epoch > epochs.latest_epoch:  # type: ignore[union-attr]
                    epochs.assign(h.partition_leader_epoch, h.base_offset)  # type: ignore[union-attr]
            self._after_append(expected - first)

    def _after_append(self, messages: int) -> None:
        self._unflushed_messages += messages
        if self._unflushed_messages >= self.config.flush_messages:
            self._flush()

    def _maybe_roll(self, size: int, max_ts: int, first: int, last: int, now: int) -> LogSegment:
        seg = self._segments[-1]
        if seg.size == 0:
            return seg
        config = self.config
        if (
            seg.size + size > config.segment_bytes
            or seg.offset_index.is_full
            or seg.time_index.is_full
            or last - seg.base_offset > INT32_MAX
            or seg.should_roll_by_time(max_ts, now, config.segment_ms)
        ):
            return self._roll(now, first)
        return seg

    def _roll(self, now: int, base_offset: int | None = None) -> LogSegment:
        """Close the active segment to appends and start a new one at ``base_offset``
        (the log end offset by default). The old segment is fsynced by the next flush."""
        base = self._leo if base_offset is None else base_offset
        active = self._segments[-1]
        if active.size == 0:
            if active.base_offset == base:
                return active
            active.delete()  # empty: replace it
            self._segments.pop()
            self._bases.pop()
        else:
            active.seal()
        seg = LogSegment.create(self.dir, base, self.config, now)
        self._segments.append(seg)
        self._bases.append(base)
        self._producers.take_snapshot(base)
        log.debug("%s: rolled new segment at %d", self.dir.name, base)
        return seg

    def roll(self, now_ms: int | None = None) -> None:
        """Force a new active segment (if the current one has data)."""
        with self._lock:
            self._check_open()
            if self._active.size:
                self._roll(wall_ms() if now_ms is None else now_ms)

    # ------------------------------------------------------------------ read

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> bytes:
        """Whole batches from the one holding ``offset`` (it may start before it), up
        to ``max_bytes`` but at least one batch if ``min_one_batch``, only batches with
        base offset below ``max_offset`` (the caller passes the high watermark).
        ``offset`` at the log end gives b""; before the log start or past the end
        raises OffsetOutOfRangeError."""
        with self._lock:
            parts, _ = self._ranges(offset, max_bytes, max_offset, min_one_batch)
            if len(parts) == 1:
                seg, pos, n = parts[0]
                return os.pread(seg.fd, n, pos)
            return b"".join(os.pread(seg.fd, n, pos) for seg, pos, n in parts)

    def read_slice(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
        inline_below: int = 0,
    ) -> "bytes | FileSlice":
        """What :meth:`read` returns, as a :class:`FileSlice` of the segment files for a
        zero-copy send (the byte ranges fixed now, the files held open by the slice); a read
        of fewer than ``inline_below`` bytes comes back as the bytes themselves."""
        with self._lock:
            parts, end_offset = self._ranges(offset, max_bytes, max_offset, min_one_batch)
            if not parts:
                return b""
            if sum(n for _, _, n in parts) < inline_below:
                return b"".join(os.pread(seg.fd, n, pos) for seg, pos, n in parts)
            ranges = []
            try:
                for seg, pos, n in parts:
                    ranges.append((os.dup(seg.fd), pos, n))
            except OSError:
                for fd, _, _ in ranges:
                    os.close(fd)
                raise
            return FileSlice(ranges, end_offset)

    def _ranges(self, offset: int, max_bytes: int, max_offset: int | None,
                min_one_batch: bool) -> tuple[list[tuple[LogSegment, int, int]], int]:
        """The byte ranges (segment, position, length) of a read (see :meth:`read`) and the
        offset bounding them; the caller holds the lock."""
        self._check_open()
        leo = self._leo
        if offset == leo:
            return [], offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] of {self.topic}-{self.partition}"
            )
        if max_offset is not None and offset >= max_offset:
            return [], offset
        segments = self._segments
        i = max(bisect_right(self._bases, offset) - 1, 0)
        parts: list[tuple[LogSegment, int, int]] = []
        remaining = max_bytes
        end_offset = offset
        while i < len(segments):
            seg = segments[i]
            pos, n, exhausted, end_offset = seg.read_range(offset, remaining, max_offset, min_one_batch)
            if n:
                parts.append((seg, pos, n))
                remaining -= n
                min_one_batch = False
            i += 1
            if not exhausted or remaining <= 0 or i == len(segments):
                break
            offset = segments[i].base_offset
            if max_offset is not None and offset >= max_offset:
                break
        return parts, end_offset

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), for a
        read_committed fetch: from the ``.txnindex`` of the segment holding ``fetch_offset`` on."""
        out: list[AbortedTxn] = []
        with self._lock:
            i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
            for seg in self._segments[i:]:
                if seg.txn_index.collect(fetch_offset, upper_bound, out):
                    break
        return out

    # ------------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``
        (ListOffsets), or None when there is none (the caller answers the log end)."""
        with self._lock:
            self._check_open()
            start = self.log_start_offset
            for seg in self._segments:
                if seg.max_timestamp < timestamp or seg.next_offset <= start:
                    continue
                batch = seg.first_batch_at_timestamp(timestamp, start)
                if batch is None:
                    continue
                found = _record_at_timestamp(batch, lambda off, ts: ts >= timestamp and off >= start)
                if found is not None:
                    return found
            return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp
        (ListOffsets MAX_TIMESTAMP); (-1, -1) if no record has a timestamp."""
        with self._lock:
            self._check_open()
            best = None
            for seg in self._segments:
                if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                    best = seg
            if best is None:
                return -1, -1
            found = best.batch_at(best.offset_of_max_timestamp)
            max_ts = best.max_timestamp
            if found is not None:
                hit = _record_at_timestamp(found[1], lambda off, ts: ts == max_ts)
                if hit is not None:
                    return hit
            return best.offset_of_max_timestamp, max_ts

    # ------------------------------------------------------------------ deletion

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` and delete the
        segments entirely below it. Returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self._leo or offset < 0:
                raise OffsetOutOfRangeError(f"offset {offset} is past the log end offset {self._leo}")
            if offset > self.log_start_offset:
                self.log_start_offset = offset
                self.leader_epochs.truncate_from_start(offset)
                self._delete_segments_below_start()
            return self.log_start_offset

    def _delete_segments_below_start(self) -> int:
        n = 0
        while len(self._segments) > 1 and self._segments[1].base_offset <= self.log_start_offset:
            self._delete_oldest()
            n += 1
        return n

    def _delete_oldest(self) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        seg.delete()
        if self._segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self._segments[0].base_offset
            self.leader_epochs.truncate_from_start(self.log_start_offset)

    def enforce_retention(self, now_ms: int) -> int:
        """Delete segments by retention.ms (largest timestamp too old) and by
        retention.bytes (oldest first while the log is too big), then those below the
        log start offset. As in Kafka, only segments wholly below the high watermark
        go, and an active segment that is due for deletion is rolled first, so the
        (new, empty) active segment always remains. The active segment is also rolled
        when segment.ms has passed. Returns the number of segments deleted."""
        with self._lock:
            self._check_open()
            config = self.config
            active = self._active
            if active.should_roll_by_time(now_ms, now_ms, config.segment_ms):
                self._roll(now_ms)
            deleted = 0
            if config.delete_enabled:
                if config.retention_ms >= 0:
                    limit = config.retention_ms
                    deleted += self._delete_while(lambda seg: now_ms - seg.largest_timestamp > limit, now_ms)
                if config.retention_bytes >= 0:
                    excess = [self.size_bytes() - config.retention_bytes]

                    def too_big(seg: LogSegment) -> bool:
                        if excess[0] - seg.size >= 0:
                            excess[0] -= seg.size
                            return True
                        return False

                    deleted += self._delete_while(too_big, now_ms)
            deleted += self._delete_segments_below_start()
            self._producers.remove_expired(now_ms, self.producer_id_expiration_ms)
            return deleted

    def _delete_while(self, predicate, now: int) -> int:
        """Delete segments from the oldest while ``predicate`` holds (Kafka's rules)."""
        hw = self.high_watermark
        n = 0
        while True:
            seg = self._segments[0]
            is_last = len(self._segments) == 1
            end = self._leo if is_last else self._segments[1].base_offset
            if (is_last and seg.size == 0) or hw < end or not predicate(seg):
                return n
            if is_last:
                self._roll(now)
            self._delete_oldest()
            n += 1

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> None:
        """Drop every offset >= ``offset`` (follower truncation). A batch straddling
        ``offset`` is dropped whole."""
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                return
            if offset < self._segments[0].base_offset:
                self._truncate_fully(offset)
                return
            while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
                self._segments.pop().delete()
                self._bases.pop()
            self._leo = self._active.truncate_to(offset)
            self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at ``offset``."""
        with self._lock:
            self._check_open()
            self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        for seg in self._segments:
            seg.delete()
        self._producers.delete_all_snapshots()
        seg = LogSegment.create(self.dir, offset, self.config)
        self._segments = [seg]
        self._bases = [offset]
        self._leo = self.log_start_offset = offset
        self.leader_epochs.clear()
        self._after_truncation()

    def _after_truncation(self) -> None:
        leo = self._leo
        if self.log_start_offset > leo:
            self.log_start_offset = leo
        if self._hw is not None:
            self._hw = min(self._hw, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.cleaner_offset = min(self.cleaner_offset, leo)
        self.leader_epochs.truncate_from_end(leo)
        self._load_producer_state()

    # ------------------------------------------------------------------ flush

    def flush(self) -> None:
        """fsync every segment with unflushed data and its indexes."""
        with self._lock:
            self._check_open()
            self._flush()

    def _flush(self) -> None:
        for seg in self._segments:
            if seg.dirty:
                seg.flush()
        self.recovery_point = self._leo
        self._unflushed_messages = 0
        self._last_flush_ms = wall_ms()

    def maybe_flush(self, now_ms: int) -> bool:
        """Apply flush.messages / flush.ms; also make rolled segments durable (so the
        recovery point moves on at least once per segment, as Kafka does on roll)."""
        with self._lock:
            if self._closed:
                return False
            config = self.config
            if self._unflushed_messages and (
                self._unflushed_messages >= config.flush_messages
                or now_ms - self._last_flush_ms >= config.flush_ms
            ):
                self._flush()
                return True
            active = self._active
            if self.recovery_point < active.base_offset:
                for seg in self._segments[:-1]:
                    if seg.dirty:
                        seg.flush()
                self.recovery_point = active.base_offset
                return True
            return False

    # ------------------------------------------------------------------ misc

    def size_bytes(self) -> int:
        return sum(seg.size for seg in self._segments)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            for seg in self._segments:
                seg.index_interval_bytes = config.index_interval_bytes
            self._active.offset_index.max_entries = max(config.segment_index_bytes // OffsetIndex.ENTRY_SIZE, 1)
            self._active.time_index.max_entries = max(config.segment_index_bytes // TimeIndex.ENTRY_SIZE, 1)

    def close(self) -> None:
        """Flush, write the indexes, a producer snapshot at the log end offset and the
        leader epochs; then close the files."""
        with self._lock:
            if self._closed:
                return
            try:
                for seg in self._segments:
                    seg.close()
                self._producers.take_snapshot(self._leo, fsync=True)
                self.recovery_point = self._leo
            finally:
                for seg in self._segments:
                    seg.close_handle()
                self._closed = True

    def close_handles(self) -> None:
        """Close the files without writing anything (used before deletion, and by
        tests to simulate a crash)."""
        with self._lock:
            for seg in self._segments:
                seg.close_handle()
            self._closed = True

    def delete(self) -> None:
        """Delete the partition: :meth:`detach`, then remove its files."""
        target = self.detach()
        if target is not None:
            shutil.rmtree(target, ignore_errors=True)

    def detach(self) -> Path | None:
        """Close the files and rename the directory to ``<name>.<uuid>-delete`` (a crash before
        it is removed is finished at the next load): the directory to remove, None if gone."""
        with self._lock:
            self.close_handles()
            target = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            try:
                os.rename(self.dir, target)
            except FileNotFoundError:
                return None
            return target


def _record_at_timestamp(batch: bytes, accept) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of ``batch`` for which
    ``accept(offset, timestamp)`` holds (decoding the batch's records)."""
    from samsa.protocol.records import decode_batch

    try:
        _, records = decode_batch(batch)
    except CorruptRecordError as e:
        log.warning("cannot decode a batch while searching by timestamp: %s", e)
        return None
    for r in records:
        if accept(r.offset, r.timestamp):
            return r.offset, r.timestamp
    return None
