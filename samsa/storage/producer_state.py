"""Idempotent-producer state of one partition (KIP-98): epochs and recent sequences.

For each producer id the partition remembers its epoch and the metadata of its last
five batches. A retry of one of those batches is a duplicate (the log returns the
original offsets and writes nothing); any other batch must continue the sequence.

Unknown producer ids are accepted whatever their first sequence: the state may have
been removed by producer-id expiration or lost with the log's head, and Kafka (since
KIP-360) accepts such a producer rather than failing it with UNKNOWN_PRODUCER_ID.

Snapshots (``<20-digit offset>.snapshot``) hold the state of every batch below their
offset, in a compact binary format of our own (not Kafka's) guarded by a CRC32C::

    magic b"SMPS" | version int16 | crc uint32 (of what follows) | count int32
    count x (producer_id int64 | epoch int16 | last_timestamp int64 | n int8 |
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

from samsa.protocol.batch import CONTROL_BIT, NO_SEQUENCE, BatchHeader
from samsa.protocol.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from samsa.storage.files import SNAPSHOT_SUFFIX, parse_offset_name, segment_file, write_atomically

log = logging.getLogger(__name__)

CACHED_BATCHES = 5  # Kafka's max.in.flight.requests.per.connection bound for idempotence
SNAPSHOTS_KEPT = 2
INT32_MAX = 0x7FFFFFFF
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86400000  # producer.id.expiration.ms

_MAGIC = b"SMPS"
_VERSION = 1
_HEAD = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


class SnapshotError(ValueError):
    pass


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_timestamp")

    def __init__(self, epoch: int, last_timestamp: int = -1):
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=CACHED_BATCHES)
        self.last_timestamp = last_timestamp

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
            # every remembered batch has lower sequences).
            if header.base_sequence == entry.batches[-1].last_seq + 1 and not header.attributes & CONTROL_BIT:
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
    ) -> None:
        """Record a batch that is now in the log."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        if not is_control and first_seq != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        if timestamp > entry.last_timestamp:
            entry.last_timestamp = timestamp

    def update_from_header(self, h: BatchHeader) -> None:
        """Record a batch read back from the log (offsets are those in its header)."""
        if h.producer_id >= 0:
            self.update(
                h.producer_id, h.producer_epoch, h.base_sequence, h.last_sequence,
                h.base_offset, h.base_offset + h.last_offset_delta, h.max_timestamp, h.is_control,
            )

    def remove_expired(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers silent for ``expiration_ms`` (producer.id.expiration.ms)."""
        expired = [pid for pid, e in self.producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()

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
            parts.extend(_BATCH.pack(*b) for b in e.batches)
        body = b"".join(parts)
        return _HEAD.pack(_MAGIC, _VERSION, crc32c(body)) + body

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        if len(data) < _HEAD.size + _COUNT.size:
            raise SnapshotError("snapshot too short")
        magic, version, crc = _HEAD.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
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

    def load(self, log_start_offset: int, log_end_offset: int, headers_from: Callable[[int], Iterable[BatchHeader]]) -> None:
        """Newest valid snapshot at or below the log end offset, then the batches after it.

        ``headers_from(offset)`` yields the headers of the log's batches holding offsets
        >= ``offset``."""
        self.producers = {}
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
        if start < log_end_offset:
            for h in headers_from(start):
                if h.base_offset >= log_end_offset:
                    break
                if h.base_offset + h.last_offset_delta >= start:
                    self.update_from_header(h)
