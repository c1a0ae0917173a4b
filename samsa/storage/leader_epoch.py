"""A partition's leader-epoch cache: the first offset written in each leader epoch.

Persisted as ``leader-epoch-checkpoint`` in the partition directory (Kafka's format:
version line, count line, ``epoch start_offset`` lines). Replication uses it to answer
OffsetsForLeaderEpoch and to find where a follower's log diverges.
"""

from __future__ import annotations

import logging
from pathlib import Path

from samsa.storage.checkpoint import CheckpointError, read_lines, write_lines
from samsa.storage.files import LEADER_EPOCH_CHECKPOINT

log = logging.getLogger(__name__)

UNDEFINED = -1


class LeaderEpochCache:
    def __init__(self, dir: Path):
        self.path = dir / LEADER_EPOCH_CHECKPOINT
        self.entries: list[tuple[int, int]] = []  # (epoch, start_offset), both increasing
        try:
            self.entries = [(int(e), int(o)) for e, o in read_lines(self.path, 2)]
        except (CheckpointError, ValueError) as e:
            log.warning("%s unreadable (%s); starting with an empty leader epoch cache", self.path, e)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (ignored unless it is newer)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # A new epoch starting at or before older ones supersedes them (follower rewrite).
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._persist()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= ``epoch``, its end offset), or
        (-1, -1) if ``epoch`` is after the latest known epoch."""
        if not self.entries or epoch > self.entries[-1][0]:
            return UNDEFINED, UNDEFINED
        if epoch < self.entries[0][0]:
            return epoch, self.entries[0][1]  # as Kafka: the requested epoch ends where the first known starts
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        for i, (e, _) in enumerate(self.entries):
            if e > epoch:
                return self.entries[i - 1][0], self.entries[i][1]
        return self.entries[-1][0], log_end_offset  # not reached

    def epoch_for(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in, or -1."""
        found = UNDEFINED
        for e, start in self.entries:
            if start > offset:
                break
            found = e
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after ``end_offset`` (log truncated there)."""
        kept = [(e, o) for e, o in self.entries if o < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop epochs entirely below it."""
        i = 0
        while i + 1 < len(self.entries) and self.entries[i + 1][1] <= start_offset:
            i += 1
        kept = self.entries[i:]
        if kept and kept[0][1] < start_offset:
            kept[0] = (kept[0][0], start_offset)
        if kept != self.entries:
            self.entries = kept
            self._persist()

    def clear(self) -> None:
        self.entries = []
        self._persist()

    def _persist(self) -> None:
        try:
            write_lines(self.path, (f"{e} {o}" for e, o in self.entries))
        except FileNotFoundError:
            pass  # the partition directory is being deleted
