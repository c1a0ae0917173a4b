"""Log compaction for topics with ``cleanup.policy`` holding ``compact``.

What compaction guarantees (Kafka's "Log Compaction" design): for every key the log
keeps at least the last record written with it; offsets never change (a cleaned log has
gaps); a record with a null value (a tombstone) deletes its key and is itself removed
once ``delete.retention.ms`` has passed, so that consumers reading the log from the
start have had time to see it.

How a clean runs, for one partition:

* The cleanable part of the log is made of whole closed segments below the *first
  uncleanable offset*: the smallest of the active segment's base, the high watermark
  (the last stable offset, which is never above it), and the base of the first segment holding a record younger than
  ``min.compaction.lag.ms`` (KIP-58). The active segment is never touched.
* The part after the *first dirty offset* (where the previous clean stopped, kept in
  ``PartitionLog.cleaner_offset`` and the log directory's ``cleaner-offset-checkpoint``)
  is dirty. A clean runs when dirty bytes / cleanable bytes reaches
  ``min.cleanable.dirty.ratio``, when the first dirty segment's first batch is older
  than ``max.compaction.lag.ms`` (KIP-354), or when tombstones kept by an earlier clean
  have reached their delete horizon.
* An offset map (key -> last offset) is built over the dirty segments (a soft bound on
  its entries can stop it at a segment boundary). Then every cleanable segment up to
  the end of the mapped part is copied, keeping a record only if it is the last one of
  its key; records without a key are dropped.
* Batches are rewritten with their original base offset and last offset delta, so
  kept records keep their offsets and each batch keeps its offset range (as Kafka's v2
  format requires for compacted logs), and with their producer id, epoch, base
  sequence, partition leader epoch, compression codec and timestamp type. A batch
  whose records are all removed disappears, except the last batch of a producer still
  in the producer state (its last data batch, or a marker of its epoch if it has
  written none since), which stays as an empty batch (record count 0, no
  compression), so that rebuilding the producer state from the log finds its last
  sequence (Kafka does the same).
* Tombstones: the first time a batch holding a kept tombstone is cleaned, it gets a
  delete horizon (now + ``delete.retention.ms``) in its ``baseTimestamp``, flagged by
  attribute bit 0x40 (KIP-534); record timestamp deltas are re-encoded against it so
  record timestamps do not change. A later clean at or after the horizon drops the
  batch's tombstones.
* Transactions: the cleanable part also ends at the last stable offset, so every
  transaction in it is decided. A batch of an aborted transaction (the segments'
  ``.txnindex``) is dropped and never mapped; committed transactional records are
  compacted as any others. A marker (control batch) stays while its transaction has a
  batch left before it (an abort marker keeps its ``.txnindex`` entry only then); once
  none is left it gets a delete horizon as tombstones do, and a clean at or after the
  horizon removes it (KIP-98, KIP-534), unless it is the last batch of its producer
  (kept, emptied). Kafka starts the horizon one clean after the one that removed the
  transaction's last batch; here that same clean starts it (consumers get the same
  ``delete.retention.ms`` to read the marker, without a clean more).

Crash safety, per group of consecutive segments cleaned into one (a group is at most
``segment.bytes``): the cleaned data goes to ``<base>.log.cleaned`` (indexes to
``<base>.index.cleaned`` / ``.timeindex.cleaned``), fsynced, outside the log's lock. Then,
holding the lock: check that the segments are still those cleaned, rename the file to
``<base>.log.swap`` (fsync of the directory), delete the old segments, move the indexes
into place and rename ``.swap`` to ``<base>.log``. When a log is opened,
:func:`complete_swaps` finishes an interrupted swap: a ``.log.swap`` file is complete by
construction, so it replaces every ``.log`` whose base offset lies in its offset range
(at least ``<base>.log``) and its indexes are rebuilt; ``.cleaned`` files are deleted
(the old segments are still all there). Old segments of the group whose base lies past
the swap's last batch may survive such a crash: they hold only records the clean
removed, and keeping them is merely a less compacted log, cleaned again later.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from crc32c import crc32c

from samsa.protocol import compression as _compression
from samsa.protocol.batch import (
    COMPRESSION_MASK,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    DELETE_HORIZON_BIT,
    HEADER_STRUCT,
    BatchHeader,
    compute_crc,
    read_header,
)
from samsa.protocol.control import ABORT, COMMIT, control_type
from samsa.protocol.errors import CorruptRecordError, KafkaStorageError
from samsa.protocol.records import RecordLocation, locate_records
from samsa.protocol.varint import encode_varint
from samsa.storage.config import LogConfig
from samsa.storage.files import (CLEANED_SUFFIX, CLEANER_OFFSET_CHECKPOINT, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
                                 TIME_INDEX_SUFFIX, fsync_dir, segment_file)
from samsa.storage.index import IndexCorruptError, TimeIndex
from samsa.storage.segment import INT32_MAX, LogSegment, scan_batches
from samsa.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from samsa.storage.log import PartitionLog

log = logging.getLogger(__name__)

LONG_MAX = 0x7FFFFFFFFFFFFFFF
DEFAULT_MAX_MAP_ENTRIES = 2_000_000
WRITE_CHUNK = 1 << 20
_MAX_RAW_KEY = 32  # longer keys are hashed in the offset map

_CRC = struct.Struct(">I")


class CleanerAbortedError(Exception):
    """The log changed under the cleaner (truncated, deleted, closed): nothing swapped."""


@dataclass
class CleanResult:
    """What one :meth:`Cleaner.clean` did. ``end_offset`` is the new first dirty offset."""

    first_offset: int
    end_offset: int
    dirty_ratio: float
    segments_before: int = 0
    segments_after: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys_mapped: int = 0
    next_delete_horizon: int | None = None  # earliest delete horizon of kept tombstones
    elapsed_ms: float = 0.0


# ---------------------------------------------------------------------------- batches


def _read_batches(fd: int, size: int) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
    """Every batch of a segment file that must hold whole v2 batches only; CorruptRecordError otherwise."""
    return scan_batches(fd, 0, size, strict=True)


def _batch_records(h: BatchHeader, buf, off: int) -> tuple[bytes, list[RecordLocation]]:
    """The records section of the batch (decompressed) and where each record lies in it."""
    if compute_crc(buf, off, h.size) != h.crc:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: CRC32C mismatch")
    section = memoryview(buf)[off + HEADER_SIZE:off + h.size]
    codec = h.attributes & COMPRESSION_MASK
    data = _compression.decompress(codec, section) if codec else bytes(section)
    section.release()
    try:
        return data, locate_records(data, h.record_count, h.last_offset_delta)
    except CorruptRecordError as e:
        raise CorruptRecordError(f"batch at offset {h.base_offset}: {e}") from None


def _map_key(key: bytes) -> bytes:
    """Offset-map key: the key itself if short, else a 32-byte hash marked by its length."""
    if len(key) <= _MAX_RAW_KEY:
        return key
    return hashlib.blake2b(key, digest_size=32).digest() + b"#"


def _encode_batch(
    h: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int, payload: bytes
) -> bytes:
    """A batch with ``h``'s offsets, epochs and producer fields around ``payload`` (the
    records section, already compressed if ``attributes`` says so)."""
    out = bytearray(HEADER_SIZE)
    out += payload
    HEADER_STRUCT.pack_into(
        out, 0, h.base_offset, len(out) - LOG_OVERHEAD, h.partition_leader_epoch, MAGIC, 0, attributes,
        h.last_offset_delta, base_timestamp, max_timestamp, h.producer_id, h.producer_epoch,
        h.base_sequence, count,
    )
    with memoryview(out) as view, view[CRC_START:] as covered:
        _CRC.pack_into(out, 17, crc32c(covered))
    return bytes(out)


class _Transactions:
    """What one clean learns of the transactions it walks through, in offset order: which
    batches belong to an aborted transaction, and which markers may go (Kafka's rule, KIP-98).

    A marker may go once this clean keeps none of its transaction's batches (an abort marker:
    none since the transaction's first offset; a commit marker: none of its producer's
    transactional batches since its previous marker). The ``.txnindex`` entries kept are those
    of abort markers that still have batches behind them (``dropped_entries`` holds the marker
    offsets of the others)."""

    __slots__ = ("_pending", "_aborted", "_committed", "dropped_entries")

    def __init__(self, aborted: list[AbortedTxn]):
        self._pending = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborted: dict[int, bool] = {}  # producer id -> a batch of its aborted transaction was kept
        self._committed: dict[int, bool] = {}  # producer id -> a batch of its other transaction was kept
        self.dropped_entries: set[int] = set()

    def _advance(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[0].first_offset <= offset:
            self._aborted.setdefault(pending.popleft().producer_id, False)

    def is_aborted(self, h: BatchHeader) -> bool:
        """Notes a transactional data batch; True if its transaction was aborted."""
        self._advance(h.last_offset)
        if h.producer_id in self._aborted:
            return True
        self._committed.setdefault(h.producer_id, False)
        return False

    def kept(self, h: BatchHeader) -> None:
        """The transactional batch just noted stays in the log (perhaps emptied)."""
        if h.producer_id in self._aborted:
            self._aborted[h.producer_id] = True
        else:
            self._committed[h.producer_id] = True

    def marker_removable(self, h: BatchHeader, kind: int | None) -> bool:
        """Notes a control batch; True if none of its transaction's batches is left before it."""
        self._advance(h.last_offset)
        if h.record_count == 0:
            return True  # emptied by an earlier clean
        pid = h.producer_id
        if kind == ABORT:
            kept = self._aborted.pop(pid, None)
            if kept is None:
                # No .txnindex entry: its batches (if any) were kept as committed ones; while they
                # are there the marker stays, so that rebuilding the index from the log finds it.
                return not self._committed.pop(pid, False)
            if not kept:
                self.dropped_entries.add(h.last_offset)
            return not kept
        if kind == COMMIT:
            return not self._committed.pop(pid, False)
        return False


class _Context:
    """What deciding the fate of a record needs during one clean."""

    __slots__ = ("offset_map", "now", "delete_retention_ms", "producer_last", "records_read", "records_kept", "horizon",
                 "txns")

    def __init__(self, offset_map: dict[bytes, int], now: int, delete_retention_ms: int,
                 producer_last: dict[int, tuple[int, int]], aborted: list[AbortedTxn] | None = None):
        self.txns = _Transactions(aborted or [])
        self.offset_map = offset_map
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.producer_last = producer_last
        self.records_read = 0
        self.records_kept = 0
        self.horizon: int | None = None  # earliest delete horizon of the kept tombstones and markers

    def note_horizon(self, horizon: int) -> None:
        if self.horizon is None or horizon < self.horizon:
            self.horizon = horizon

    def is_producer_last(self, h: BatchHeader) -> bool:
        """Is ``h`` the last batch of a producer still in the producer state? Its last data
        batch, or, for a producer that has written none since, a marker of its epoch: kept (maybe
        emptied) so that the state rebuilt from the log still knows the producer."""
        last = self.producer_last.get(h.producer_id) if h.producer_id >= 0 else None
        if last is None:
            return False
        offset, epoch = last
        if offset >= 0:
            return offset == h.last_offset
        return h.is_control and h.producer_epoch == epoch


def _is_aborted(h: BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """Is ``h`` a batch of an aborted transaction? (``aborted``: producer id -> [(first, marker offset)])"""
    if not h.is_transactional or h.is_control:
        return False
    return any(first <= h.base_offset <= last for first, last in aborted.get(h.producer_id, ()))


def _emptied(h: BatchHeader) -> bytes:
    """``h`` without records: what stays of a producer's last batch once its records go (a
    delete horizon in its base timestamp goes too)."""
    base_ts = h.max_timestamp if h.attributes & DELETE_HORIZON_BIT else h.base_timestamp
    return _encode_batch(h, h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_BIT), base_ts, h.max_timestamp, 0, b"")


def _with_horizon(h: BatchHeader, data: bytes, kept: list[RecordLocation], horizon: int) -> tuple[bytes, int]:
    """The records section of ``kept`` re-encoded against ``horizon`` as the base timestamp
    (KIP-534), so that the records' own timestamps do not change; and the new attributes."""
    old_base_ts = h.base_timestamp
    parts = []
    for r in kept:
        body = b"".join((
            data[r.attrs_pos:r.attrs_pos + 1],
            encode_varint(old_base_ts + r.ts_delta - horizon),
            encode_varint(r.offset_delta),
            data[r.fields_pos:r.end],
        ))
        parts.append(encode_varint(len(body)))
        parts.append(body)
    return b"".join(parts), h.attributes | DELETE_HORIZON_BIT


def _clean_marker(h: BatchHeader, buf, off: int, ctx: _Context) -> bytes | memoryview | None:
    """A control batch as it is to be kept, or None to drop it. A marker whose transaction has
    no batch left gets a delete horizon (now + ``delete.retention.ms``, as tombstones do), so
    that consumers in the middle of the transaction have time to read it; a clean at or after
    the horizon removes it."""
    view = memoryview(buf)[off:off + h.size]
    if not ctx.txns.marker_removable(h, control_type(buf, off, h)):
        return view
    if h.record_count and not h.attributes & DELETE_HORIZON_BIT:
        horizon = min(ctx.now + ctx.delete_retention_ms, LONG_MAX)
        ctx.note_horizon(horizon)
        data, records = _batch_records(h, buf, off)
        payload, attrs = _with_horizon(h, data, records, horizon)
        return _encode_batch(h, attrs, horizon, h.max_timestamp, len(records), payload)
    if h.record_count and ctx.now < h.base_timestamp:
        ctx.note_horizon(h.base_timestamp)
        return view
    # past its horizon, or emptied by an earlier clean
    if ctx.is_producer_last(h):
        return _emptied(h) if h.record_count else view
    return None


def _clean_batch(h: BatchHeader, buf, off: int, ctx: _Context) -> bytes | memoryview | None:
    """The batch as it is to be kept (its bytes, maybe rewritten), or None to drop it."""
    if h.is_control:
        return _clean_marker(h, buf, off, ctx)
    transactional = h.is_transactional
    if transactional and ctx.txns.is_aborted(h):
        ctx.records_read += h.record_count
        if ctx.is_producer_last(h):
            ctx.txns.kept(h)
            return _emptied(h)
        return None
    data, records = _batch_records(h, buf, off)
    ctx.records_read += len(records)
    horizon = h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None
    offset_map = ctx.offset_map
    now = ctx.now
    base = h.base_offset
    kept = []
    tombstones = False
    for r in records:
        if r.key is None:
            continue  # keyless records cannot be compacted: dropped
        latest = offset_map.get(_map_key(r.key))
        if latest is not None and latest > base + r.offset_delta:
            continue  # superseded by a later record with the same key
        if r.null_value:
            if horizon is not None and now >= horizon:
                continue  # a tombstone past its delete horizon
            tombstones = True
        kept.append(r)
    ctx.records_kept += len(kept)
    if not kept:
        if ctx.is_producer_last(h):
            if transactional:
                ctx.txns.kept(h)
            return _emptied(h)  # the producer's last batch: kept, empty, for its sequence and epoch
        return None
    if transactional:
        ctx.txns.kept(h)
    new_horizon = tombstones and horizon is None
    if new_horizon:
        horizon = min(now + ctx.delete_retention_ms, LONG_MAX)
    if tombstones:
        ctx.note_horizon(horizon)  # type: ignore[arg-type]
    if len(kept) == len(records) and not new_horizon:
        return memoryview(buf)[off:off + h.size]  # unchanged
    old_base_ts = h.base_timestamp
    if new_horizon:
        payload, attrs = _with_horizon(h, data, kept, horizon)  # type: ignore[arg-type]
        base_ts = horizon
    else:
        payload = b"".join(data[r.start:r.end] for r in kept)
        base_ts = old_base_ts
        attrs = h.attributes
    if h.log_append_time:
        max_ts = h.max_timestamp
    else:
        max_ts = max(old_base_ts + r.ts_delta for r in kept)
    codec = attrs & COMPRESSION_MASK
    if codec:
        payload = _compression.compress(codec, payload)
    return _encode_batch(h, attrs, base_ts, max_ts, len(kept), payload)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- output


class _CleanedSegment:
    """``<base>.log.cleaned`` and its two indexes: a LogSegment of the ``.cleaned`` kind,
    written in big chunks."""

    def __init__(self, dir: Path, base_offset: int, config: LogConfig):
        self.dir = dir
        self.base_offset = base_offset
        self.segment = LogSegment.create(dir, base_offset, config, kind=CLEANED_SUFFIX)
        self.size = 0
        self._pending = bytearray()
        self._metas: list[tuple[int, int, int, int]] = []  # (position in pending, size, last offset, max ts)
        self.committed = False  # renamed to .swap: from then on it must not be deleted
        # Abort markers whose transaction has no batch left: their .txnindex entries go.
        self.dropped_entries: set[int] = set()

    def append(self, batch, h_last_offset: int, max_timestamp: int) -> None:
        n = len(batch)
        self._metas.append((len(self._pending), n, h_last_offset, max_timestamp))
        self._pending += batch
        self.size += n
        if len(self._pending) >= WRITE_CHUNK:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._pending:
            self.segment.append(self._pending, self._metas)
            self._pending, self._metas = bytearray(), []

    def finish(self, mtime_ns: int | None) -> None:
        """Write everything and fsync (data, then the indexes)."""
        self._write_pending()
        self.segment.close()
        if mtime_ns is not None:
            os.utime(self.path, ns=(mtime_ns, mtime_ns))  # retention falls back to mtime

    def discard(self) -> None:
        self.segment.close_handle()
        if self.committed:
            return
        for path in (self.path, self.index_path, self.time_index_path, self.swap_path):
            path.unlink(missing_ok=True)

    @property
    def path(self) -> Path:
        return self.segment.path

    @property
    def index_path(self) -> Path:
        return self.segment.offset_index.path

    @property
    def time_index_path(self) -> Path:
        return self.segment.time_index.path

    @property
    def swap_path(self) -> Path:
        return segment_file(self.dir, self.base_offset, LOG_SUFFIX + SWAP_SUFFIX)


# ---------------------------------------------------------------------------- recovery


# ---------------------------------------------------------------------------- cleaner


@dataclass
class _Source:
    segment: LogSegment
    fd: int  # a dup of the segment's descriptor: stays valid whatever the log does
    base: int
    end: int  # next segment's base
    size: int


@dataclass
class _Plan:
    sources: list[_Source]  # the cleanable segments
    first_dirty: int
    dirty_ratio: float
    producer_last: dict[int, tuple[int, int]]  # producer id -> (last data offset or -1, epoch)
    config: LogConfig
    segment_count: int
    checkpoint_seen: int  # plog.cleaner_offset when planned
    fds: list[int] = field(default_factory=list)
    aborted: list[AbortedTxn] = field(default_factory=list)  # the cleanable part's, from the .txnindex files
    aborted_ranges: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # producer id -> [(first, last)]


class Cleaner:
    """Compacts partition logs, one at a time (calls are serialised). Meant to run in a
    worker thread: it holds a log's lock only to look at its segments and to swap
    cleaned segments in; appends and reads go on meanwhile."""

    def __init__(self, *, max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES):
        self.max_map_entries = max_map_entries
        self._mutex = threading.Lock()
        # Earliest delete horizon of the tombstones each log kept at its last clean:
        # reaching it makes the log due for cleaning whatever its dirty ratio.
        self._horizons: weakref.WeakKeyDictionary[PartitionLog, int] = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ entry point

    def clean(self, plog: PartitionLog, now_ms: int) -> CleanResult | None:
        """Compact ``plog`` if it is due (see the module docstring); None if nothing was
        done. Raises on I/O errors or corrupt batches (nothing is swapped then)."""
        with self._mutex:
            config = plog.config
            if not config.compact_enabled or plog._closed:
                return None
            self._maybe_roll(plog, now_ms)
            plan = self._plan(plog, now_ms)
            if plan is None:
                return None
            try:
                result = self._run(plog, plan, now_ms)
            except CleanerAbortedError as e:
                log.info("%r: clean abandoned: %s", plog, e)
                return None
            except Exception:
                if plog._closed:  # closed or deleted while being cleaned
                    log.info("%r: clean abandoned: the log was closed", plog, exc_info=True)
                    return None
                raise
            finally:
                for fd in plan.fds:
                    os.close(fd)
            if result.next_delete_horizon is None:
                self._horizons.pop(plog, None)
            else:
                self._horizons[plog] = result.next_delete_horizon
            return result

    def _maybe_roll(self, plog: PartitionLog, now: int) -> None:
        """KIP-354: an active segment older than max.compaction.lag.ms is rolled so it
        can be cleaned."""
        lag = plog.config.max_compaction_lag_ms
        if lag >= LONG_MAX or lag >= plog.config.segment_ms:
            return
        with plog._lock:
            if plog._closed:
                return
            active = plog._segments[-1]
            if active.should_roll_by_time(now, now, lag):
                plog.roll(now)

    # ------------------------------------------------------------------ planning

    def _plan(self, plog: PartitionLog, now: int) -> _Plan | None:
        with plog._lock:
            if plog._closed:
                return None
            config = plog.config
            segments = plog._segments
            active = segments[-1]
            uncleanable = min(active.base_offset, plog.last_stable_offset)
            if config.min_compaction_lag_ms > 0:
                limit = now - config.min_compaction_lag_ms
                for seg in segments[:-1]:
                    if seg.largest_timestamp > limit:
                        uncleanable = min(uncleanable, seg.base_offset)
                        break
            sources = []
            for i, seg in enumerate(segments[:-1]):
                end = segments[i + 1].base_offset
                if end > uncleanable:
                    break
                sources.append(_Source(seg, -1, seg.base_offset, end, seg.size))
            if not sources:
                return None
            first_dirty = plog.cleaner_offset
            if first_dirty < plog.log_start_offset or first_dirty > plog.log_end_offset:
                first_dirty = plog.log_start_offset
            clean_bytes = sum(s.size for s in sources if s.end <= first_dirty)
            dirty = [s for s in sources if s.end > first_dirty]
            dirty_bytes = sum(s.size for s in dirty)
            total = clean_bytes + dirty_bytes
            ratio = dirty_bytes / total if total else 0.0
            due = bool(dirty) and total > 0 and ratio >= config.min_cleanable_dirty_ratio
            if not due and dirty and config.max_compaction_lag_ms < LONG_MAX:
                first_ts = _first_batch_timestamp(dirty[0].segment)
                due = first_ts >= 0 and now - first_ts > config.max_compaction_lag_ms
            if not due:
                horizon = self._horizons.get(plog)
                due = horizon is not None and now >= horizon
            if not due:
                return None
            producer_last = {
                pid: (e.batches[-1].last_offset if e.batches else -1, e.epoch)
                for pid, e in plog._producers.producers.items()
            }
            plan = _Plan(sources, first_dirty, ratio, producer_last, config, len(segments), plog.cleaner_offset)
            plan.aborted = plog.aborted_transactions(sources[0].base, sources[-1].end)
            for txn in plan.aborted:
                plan.aborted_ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
            for s in sources:
                s.fd = os.dup(s.segment.fd)
                plan.fds.append(s.fd)
            return plan

    # ------------------------------------------------------------------ cleaning

    def _run(self, plog: PartitionLog, plan: _Plan, now: int) -> CleanResult:
        t0 = time.monotonic()
        config = plan.config
        offset_map, clean_end = self._build_offset_map(plan)
        sources = [s for s in plan.sources if s.end <= clean_end]
        result = CleanResult(sources[0].base, clean_end, plan.dirty_ratio, keys_mapped=len(offset_map))
        ctx = _Context(offset_map, now, config.delete_retention_ms, plan.producer_last, plan.aborted)
        swapped = 0
        for group in _group(sources, config):
            out = _CleanedSegment(plog.dir, group[0].base, config)
            out.dropped_entries = ctx.txns.dropped_entries
            try:
                unchanged = True
                for src in group:
                    result.bytes_read += src.size
                    for _, h, buf, off in _read_batches(src.fd, src.size):
                        result.batches_read += 1
                        kept = _clean_batch(h, buf, off, ctx)
                        if kept is None:
                            unchanged = False
                            continue
                        if isinstance(kept, bytes):
                            unchanged = False
                            max_ts = read_header(kept).max_timestamp
                        else:
                            max_ts = h.max_timestamp
                        out.append(kept, h.last_offset, max_ts)
                if unchanged and len(group) == 1:
                    out.discard()  # nothing to gain from rewriting it
                    continue
                out.finish(os.fstat(group[-1].fd).st_mtime_ns)
                result.bytes_written += out.size
                self._swap(plog, group, out)
                swapped += 1
            except BaseException:
                out.discard()
                raise
        result.records_read = ctx.records_read
        result.records_kept = ctx.records_kept
        result.next_delete_horizon = ctx.horizon
        with plog._lock:
            if plog.cleaner_offset == plan.checkpoint_seen:  # else truncated meanwhile: keep that
                plog.cleaner_offset = max(plan.first_dirty, clean_end)
            result.segments_before = plan.segment_count
            result.segments_after = len(plog._segments)
        result.elapsed_ms = (time.monotonic() - t0) * 1000
        log.info(
            "%r: cleaned offsets %d..%d in %d group(s): %d -> %d bytes, %d of %d records kept, %.0f ms",
            plog, result.first_offset, clean_end - 1, swapped, result.bytes_read, result.bytes_written,
            result.records_kept, result.records_read, result.elapsed_ms,
        )
        return result

    def _build_offset_map(self, plan: _Plan) -> tuple[dict[bytes, int], int]:
        """key -> last offset over the dirty segments, stopping at a segment boundary
        once the map holds ``max_map_entries`` keys. Returns it and the end of the part
        to clean (the end of the last mapped segment, or of the clean part if nothing
        is dirty)."""
        offset_map: dict[bytes, int] = {}
        dirty = [s for s in plan.sources if s.end > plan.first_dirty]
        if not dirty:
            return offset_map, plan.sources[-1].end
        end = dirty[0].base
        for src in dirty:
            if offset_map and len(offset_map) >= self.max_map_entries:
                break
            for _, h, buf, off in _read_batches(src.fd, src.size):
                if h.is_control or _is_aborted(h, plan.aborted_ranges):
                    continue
                _, records = _batch_records(h, buf, off)
                base = h.base_offset
                for r in records:
                    if r.key is not None:
                        offset_map[_map_key(r.key)] = base + r.offset_delta
            end = src.end
        return offset_map, end

    # ------------------------------------------------------------------ swapping

    def _swap(self, plog: PartitionLog, group: list[_Source], out: _CleanedSegment) -> None:
        """Replace the group's segments with the cleaned one, under the log's lock."""
        dir = plog.dir
        base = group[0].base
        with plog._lock:
            if plog._closed:
                raise CleanerAbortedError("the log was closed")
            segments = plog._segments
            olds = [s.segment for s in group]
            try:
                i = next(j for j, seg in enumerate(segments) if seg is olds[0])
            except StopIteration:
                raise CleanerAbortedError(f"segment {base} is gone") from None
            k = len(olds)
            if (
                i + k >= len(segments)  # the last one must not have become the active segment
                or any(a is not b for a, b in zip(segments[i:i + k], olds))
                or any(s.segment.size != s.size for s in group)
                or segments[i + k].base_offset != group[-1].end
            ):
                raise CleanerAbortedError(f"segments from {base} changed while being cleaned")
            os.rename(out.path, out.swap_path)
            out.committed = True
            fsync_dir(dir)
            # From here the swap is committed: a crash is finished by complete_swaps.
            try:
                self._install(plog, i, olds, group[-1].end, out)
            except OSError as e:
                plog.close_handles()  # the segment list no longer matches the files
                raise KafkaStorageError(f"swap of cleaned segment {out.swap_path} failed: {e}") from e

    @staticmethod
    def _install(plog: PartitionLog, i: int, olds: list[LogSegment], end: int, out: _CleanedSegment) -> None:
        dir, base, k = plog.dir, out.base_offset, len(olds)
        segments = plog._segments
        aborted = [txn for seg in olds for txn in seg.txn_index.entries if txn.last_offset not in out.dropped_entries]
        for seg in olds:
            seg.delete()
        os.replace(out.index_path, segment_file(dir, base, INDEX_SUFFIX))
        os.replace(out.time_index_path, segment_file(dir, base, TIME_INDEX_SUFFIX))
        fsync_dir(dir)
        os.replace(out.swap_path, segment_file(dir, base, LOG_SUFFIX))
        fsync_dir(dir)
        new = LogSegment.open(dir, base, plog.config)
        try:
            new.load_closed(end)
        except IndexCorruptError as e:
            log.warning("%s; rebuilding the indexes of cleaned segment %s", e, new.path)
            new.recover(verify_crc=False)
            new.seal()
            new.flush()
        new.txn_index.reset(aborted)
        new.txn_index.flush()
        segments[i:i + k] = [new]
        plog._bases[i:i + k] = [base]


def _first_batch_timestamp(seg: LogSegment) -> int:
    """Max timestamp of the segment's first batch (KIP-354 measures a segment's age from
    it), else its largest timestamp."""
    if seg.size >= HEADER_SIZE:
        try:
            h = read_header(os.pread(seg.fd, HEADER_SIZE, 0))
        except OSError:
            return -1
        if h.max_timestamp >= 0:
            return h.max_timestamp
    return seg.largest_timestamp


def _group(sources: list[_Source], config: LogConfig) -> Iterator[list[_Source]]:
    """Consecutive segments cleaned into one: at most segment.bytes in all (before
    cleaning), offsets fitting a segment's 32-bit relative offsets, and an index that
    stays within segment.index.bytes."""
    max_entries = max(config.segment_index_bytes // TimeIndex.ENTRY_SIZE, 1)
    interval = max(config.index_interval_bytes, 1)
    group: list[_Source] = []
    size = 0
    for src in sources:
        if group and (
            size + src.size > config.segment_bytes
            or src.end - 1 - group[0].base > INT32_MAX
            or (size + src.size) // interval >= max_entries
        ):
            yield group
            group, size = [], 0
        group.append(src)
        size += src.size
    if group:
        yield group


def read_cleaner_offsets(log_dir: Path) -> dict[tuple[str, int], int]:
    """The log directory's ``cleaner-offset-checkpoint`` (first dirty offset of each
    compacted partition); {} if missing or unreadable (everything is dirty then)."""
    from samsa.storage.checkpoint import CheckpointError, read_offsets

    try:
        return read_offsets(log_dir / CLEANER_OFFSET_CHECKPOINT)
    except CheckpointError as e:
        log.warning("ignoring %s: %s", log_dir / CLEANER_OFFSET_CHECKPOINT, e)
        return {}


def write_cleaner_offsets(log_dir: Path, offsets: dict[tuple[str, int], int]) -> None:
    from samsa.storage.checkpoint import write_offsets

    write_offsets(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
