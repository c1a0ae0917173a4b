"""Idempotent-producer state of one partition (KIP-98): epochs and recent sequences.

For each producer id the partition remembers its epoch and the metadata of its last
five batches. A retry of one of those batches is a duplicate (the log returns the
original offsets and writes nothing); any other batch must continue the sequence.

Unknown producer ids are accepted whatever their first sequence: the state may have
been removed by producer-id expiration or lost with the log's head, and Kafka (since
KIP-360) accepts such a producer rather than failing it with UNKNOWN_PRODUCER_ID.

Transactions (KIP-98): a transactional batch from a producer with no open transaction
opens one at its first offset; the producer's commit or abort marker closes it. The first
offset of the oldest open transaction bounds the last stable offset (LSO), and so do
transactions closed by a marker that is not yet below the high watermark. Closing returns
a :class:`CompletedTxn`; the log indexes the aborted ones (``.txnindex``).

Snapshots (``<20-digit offset>.snapshot``) hold the state of every batch below their
offset, in a compact binary format of our own (not Kafka's) guarded by a CRC32C::

    magic b"SMPS" | version int16 | crc uint32 (of what follows) | count int32
    count x (producer_id int64 | epoch int16 | last_timestamp int64 | n int8 |
             [version 2: coordinator_epoch int32 | txn_first_offset int64 (-1: none)] |
             n x (first_seq int32 | last_seq int32 | first_offset int64 |
                  last_offset int64 | timestamp int64))

They are written on segment roll and on close; the newest two are kept. Loading takes
the newest valid snapshot at or below the log end offset and replays the batch headers
after it.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from pathlib import Path
from typing import Callable, Iterable, NamedTuple

from crc32c import crc32c

from samsa.protocol.batch import CONTROL_BIT, NO_SEQUENCE, TRANSACTIONAL_BIT, BatchHeader
from samsa.protocol.control import ABORT
from samsa.protocol.errors import (InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceNumberError,
                                   TransactionCoordinatorFencedError)
from samsa.storage.files import SNAPSHOT_SUFFIX, parse_offset_name, segment_file, write_atomically
from samsa.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
SNAPSHOTS_KEPT = 2
INT32_MAX = 0x7FFFFFFF
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000  # producer.id.expiration.ms
UNREPLICATED_KEPT = 100_000

_MAGIC = b"SMPS"
_VERSION = 2
_HEAD = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqb")
_TXN = struct.Struct(">iq")  # version 2: coordinator epoch, first offset of the open transaction
_BATCH = struct.Struct(">iiqqq")


class SnapshotError(ValueError):
    pass


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction closed by its marker at ``last_offset``."""
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_timestamp", "coordinator_epoch", "txn_first_offset")

    def __init__(self, epoch: int, last_timestamp: int = -1):
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=CACHED_BATCHES)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = -1
        self.txn_first_offset = -1  # first offset of the producer's open transaction, -1 if none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self, dir: Path):
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}
        # Open transactions, producer id -> first offset, oldest first (offsets only grow).
        self.ongoing: dict[int, int] = {}
        # Transactions closed by a marker the high watermark may not cover yet, in marker order
        # (bounded: the log prunes it as the high watermark moves).
        self.unreplicated: deque[CompletedTxn] = deque(maxlen=UNREPLICATED_KEPT)

    # ------------------------------------------------------------------ checks (leader)

    def check(self, header: BatchHeader, pending: dict[int, tuple[int, int]] | None = None) -> BatchMetadata | None:
        """Validate a batch from producer ``header.producer_id`` before it is appended.

        Returns the metadata of the original batch if this one is a retry of it, None if
        it may be appended. Raises InvalidProducerEpochError (fenced by a newer epoch)
        or OutOfOrderSequenceNumberError. ``pending`` carries (epoch, last_seq) of
        earlier batches of the same append, which are not in the state yet."""
        pid = header.producer_id
        if pid < 0:
            return None
        epoch = header.producer_epoch
        entry = self.producers.get(pid)
        if pending is None and entry is not None and entry.batches and epoch == entry.epoch:
            # Fast path, the common case: the next batch in sequence (it cannot be a retry:
            # every remembered batch has lower sequences), not a plain batch inside a transaction.
            if (header.base_sequence == entry.batches[-1].last_seq + 1 and not header.attributes & CONTROL_BIT
                    and (entry.txn_first_offset < 0 or header.attributes & TRANSACTIONAL_BIT)):
                return None
        first_seq = header.base_sequence
        last_seq = header.last_sequence
        if pending and pid in pending:
            cur_epoch, cur_last = pending[pid]
        elif entry is not None:
            dup = entry.find_duplicate(epoch, first_seq, last_seq)
            if dup is not None and not header.is_control:
                return dup
            cur_epoch, cur_last = entry.epoch, entry.last_seq
        else:
            cur_epoch = None  # unknown producer: accepted (see module docstring)
            cur_last = NO_SEQUENCE
        if cur_epoch is not None:
            if epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} has epoch {epoch} but the partition has seen epoch {cur_epoch}: it is fenced"
                )
            if (entry is not None and epoch == entry.epoch and entry.txn_first_offset >= 0
                    and not header.attributes & (TRANSACTIONAL_BIT | CONTROL_BIT)):
                raise InvalidTxnStateError(
                    f"producer {pid} wrote a non-transactional batch inside its open transaction")
            if not header.is_control and first_seq != NO_SEQUENCE:
                if epoch > cur_epoch:
                    if first_seq != 0:
                        raise OutOfOrderSequenceNumberError(
                            f"producer {pid}: first sequence of new epoch {epoch} is {first_seq}, expected 0"
                        )
                elif cur_last == NO_SEQUENCE:
                    if first_seq != 0:
                        raise OutOfOrderSequenceNumberError(
                            f"producer {pid} epoch {epoch}: sequence {first_seq}, expected 0"
                        )
                elif not in_sequence(cur_last, first_seq):
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {cur_last}"
                    )
        if pending is not None:
            pending[pid] = (epoch, last_seq if not header.is_control else cur_last)
        return None

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """May the coordinator write a marker for this producer? (its epoch may have been bumped)"""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker for producer {producer_id} has epoch {epoch}, the partition has seen epoch {entry.epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {entry.coordinator_epoch}")

    # ------------------------------------------------------------------ updates

    def update(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        is_control: bool = False,
        *,
        transactional: bool = False,
        marker: int | None = None,
        coordinator_epoch: int = -1,
    ) -> CompletedTxn | None:
        """Record a batch that is now in the log. A transactional batch opens the producer's
        transaction if none is open; its marker (``marker``: ABORT or COMMIT) closes it and
        returns it."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        if timestamp > entry.last_timestamp:
            entry.last_timestamp = timestamp
        if not is_control:
            if first_seq != NO_SEQUENCE:
                entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
            if transactional and entry.txn_first_offset < 0:
                entry.txn_first_offset = first_offset
                self.ongoing[producer_id] = first_offset
            return None
        if marker is None:
            return None
        if coordinator_epoch > entry.coordinator_epoch:
            entry.coordinator_epoch = coordinator_epoch
        first = entry.txn_first_offset
        if first < 0:
            return None  # a marker for a partition the producer wrote nothing to
        entry.txn_first_offset = -1
        self.ongoing.pop(producer_id, None)
        done = CompletedTxn(producer_id, first, last_offset, marker == ABORT)
        self.unreplicated.append(done)
        return done

    def update_from_header(self, h: BatchHeader, marker: int | None = None,
                           coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record a batch read back from the log (offsets are those in its header)."""
        if h.producer_id < 0:
            return None
        return self.update(
            h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
            h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp, h.is_control,
            transactional=h.is_transactional, marker=marker, coordinator_epoch=coordinator_epoch,
        )

    # ------------------------------------------------------------------ transactions

    def aborted_entry(self, txn: CompletedTxn) -> AbortedTxn:
        """The ``.txnindex`` entry of an aborted transaction just closed: its LSO is the
        first offset of the oldest transaction still open, or the offset after its marker."""
        lso = next(iter(self.ongoing.values()), txn.last_offset + 1)
        return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)

    def prune_replicated(self, high_watermark: int) -> None:
        """Forget the closed transactions whose marker is below ``high_watermark``."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0].last_offset < high_watermark:
            unreplicated.popleft()

    def first_unstable_offset(self, high_watermark: int) -> int:
        """The LSO: the first offset of the oldest transaction that is open or whose marker is
        not below ``high_watermark`` yet, capped by ``high_watermark``."""
        self.prune_replicated(high_watermark)
        unreplicated = self.unreplicated
        lso = high_watermark
        for first in self.ongoing.values():
            if first < lso:
                lso = first
            break  # the oldest comes first
        for txn in unreplicated:
            if txn.first_offset < lso:
                lso = txn.first_offset
        return lso

    def remove_expired(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers silent for ``expiration_ms`` (producer.id.expiration.ms), except
        those with an open transaction."""
        expired = [pid for pid, e in self.producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms and e.txn_first_offset < 0]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()

    # ------------------------------------------------------------------ snapshots

    def snapshot_offsets(self) -> list[int]:
        out = []
        for name in os.listdir(self.dir):
            off = parse_offset_name(name, SNAPSHOT_SUFFIX)
            if off is not None:
                out.append(off)
        return sorted(out)

    def _path(self, offset: int) -> Path:
        return segment_file(self.dir, offset, SNAPSHOT_SUFFIX)

    def encode(self) -> bytes:
        parts = [_COUNT.pack(len(self.producers))]
        for pid, e in self.producers.items():
            parts.append(_PRODUCER.pack(pid, e.epoch, e.last_timestamp, len(e.batches)))
            parts.append(_TXN.pack(e.coordinator_epoch, e.txn_first_offset))
            parts.extend(_BATCH.pack(*b) for b in e.batches)
        body = b"".join(parts)
        return _HEAD.pack(_MAGIC, _VERSION, crc32c(body)) + body

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        if len(data) < _HEAD.size + _COUNT.size:
            raise SnapshotError("snapshot too short")
        magic, version, crc = _HEAD.unpack_from(data)
        if magic != _MAGIC or version not in (1, _VERSION):
            raise SnapshotError("not a samsa producer snapshot")
        body = memoryview(data)[_HEAD.size:]
        if crc32c(body) != crc:
            raise SnapshotError("snapshot CRC mismatch")
        producers: dict[int, ProducerEntry] = {}
        try:
            (count,) = _COUNT.unpack_from(body)
            p = _COUNT.size
            for _ in range(count):
                pid, epoch, last_ts, n = _PRODUCER.unpack_from(body, p)
                p += _PRODUCER.size
                entry = ProducerEntry(epoch, last_ts)
                if version >= 2:
                    entry.coordinator_epoch, entry.txn_first_offset = _TXN.unpack_from(body, p)
                    p += _TXN.size
                for _ in range(n):
                    entry.batches.append(BatchMetadata._make(_BATCH.unpack_from(body, p)))
                    p += _BATCH.size
                producers[pid] = entry
        except struct.error as e:
            raise SnapshotError(f"snapshot cut short: {e}") from None
        return producers

    def take_snapshot(self, offset: int, *, fsync: bool = False) -> None:
        """Persist the state of every batch below ``offset``; keep the newest two."""
        write_atomically(self._path(offset), self.encode(), fsync=fsync)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            self._delete_snapshot(old)

    def _delete_snapshot(self, offset: int) -> None:
        try:
            self._path(offset).unlink()
        except FileNotFoundError:
            pass

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                self._delete_snapshot(off)

    def delete_all_snapshots(self) -> None:
        for off in self.snapshot_offsets():
            self._delete_snapshot(off)

    def load(self, log_start_offset: int, log_end_offset: int,
             headers_from: Callable[[int], Iterable[tuple[BatchHeader, int | None, int]]]
             ) -> tuple[int, list[AbortedTxn]]:
        """Newest valid snapshot at or below the log end offset, then the batches after it.

        ``headers_from(offset)`` yields ``(header, marker type or None, coordinator epoch)``
        for the log's batches holding offsets >= ``offset``. Returns the offset the replay
        started from and the transactions aborted by the markers replayed (the log rebuilds
        its ``.txnindex`` entries from that offset on with them)."""
        self.producers = {}
        self.ongoing = {}
        self.unreplicated = deque(maxlen=UNREPLICATED_KEPT)
        self.delete_snapshots_above(log_end_offset)
        start = log_start_offset
        for off in reversed(self.snapshot_offsets()):
            try:
                self.producers = self.decode(self._path(off).read_bytes())
            except (OSError, SnapshotError) as e:
                log.warning("%s: dropping producer snapshot %d: %s", self.dir, off, e)
                self._delete_snapshot(off)
                continue
            start = max(off, log_start_offset)
            break
        for pid, e in sorted(self.producers.items(), key=lambda item: item[1].txn_first_offset):
            if e.txn_first_offset >= 0:
                self.ongoing[pid] = e.txn_first_offset
        aborted: list[AbortedTxn] = []
        if start < log_end_offset:
            for h, marker, coordinator_epoch in headers_from(start):
                if h.base_offset >= log_end_offset:
                    break
                if h.base_offset + h.last_offset_delta >= start:
                    done = self.update_from_header(h, marker, coordinator_epoch)
                    if done is not None and done.aborted:
                        aborted.append(self.aborted_entry(done))
        # The transactions closed by the markers replayed stay "unreplicated" until the high
        # watermark (set by the replica manager after loading) passes their marker.
        return start, aborted
